//! STARTTLS: in require mode every option but STARTTLS (and ABORT) is refused with
//! NBD_REP_ERR_TLS_REQD and EXPORT_NAME closes; after the TLS handshake the options and the
//! transmission phase run over TLS (data written and read back); without TLS configured
//! STARTTLS is refused; a second STARTTLS is invalid. Certificates are made with rcgen.

mod common;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use nbd::codec::consts::*;
use nbd::codec::*;
use nbd::{ServerConfig, Tls, TlsMode};
use rustls::pki_types::ServerName;

const SIZE: usize = 4 << 20;

fn tls_server(mode: TlsMode) -> (Arc<MemExport>, TestServer, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ca = testsupport::certificates::server_in(dir.path());
    let export = Arc::new(MemExport::new(SIZE));
    let config = ServerConfig {
        tls: Some(Tls::load(dir.path(), mode, false).unwrap()),
        ..config("disk0")
    };
    let server = TestServer::start(export.clone(), config, Transport::Unix);
    (export, server, ca, dir)
}

/// The client side of TLS over the raw client's socket.
struct TlsStream(rustls::StreamOwned<rustls::ClientConnection, Box<dyn ReadWrite>>);

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl ReadWrite for TlsStream {
    fn set_timeout(&self, d: Duration) {
        self.0.sock.set_timeout(d);
    }
}

/// STARTTLS, then the TLS handshake trusting `ca_pem`: the client's stream becomes TLS.
fn start_tls(c: &mut RawClient, ca_pem: &str) {
    let r = c.option_replies(&ClientOption::StartTls { has_data: false });
    assert_eq!(r, vec![OptionReply::Ack]);
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let placeholder: Box<dyn ReadWrite> = Box::new(Closed);
    let sock = std::mem::replace(&mut c.stream, placeholder);
    c.stream = Box::new(TlsStream(rustls::StreamOwned::new(conn, sock)));
}

/// Stands in for the socket while it is moved into the TLS stream.
struct Closed;

impl Read for Closed {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        Ok(0)
    }
}

impl Write for Closed {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Ok(0)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ReadWrite for Closed {
    fn set_timeout(&self, _: Duration) {}
}

fn every_option_but_starttls() -> Vec<ClientOption> {
    let info = InfoRequest {
        name: "disk0".into(),
        requests: vec![INFO_BLOCK_SIZE],
    };
    let meta = MetaContextRequest {
        name: "disk0".into(),
        queries: vec!["base:allocation".into()],
    };
    vec![
        ClientOption::List { has_data: false },
        ClientOption::Info(info.clone()),
        ClientOption::Go(info),
        ClientOption::StructuredReply { has_data: false },
        ClientOption::ListMetaContext(meta.clone()),
        ClientOption::SetMetaContext(meta),
        ClientOption::ExtendedHeaders,
        ClientOption::Unknown(4242),
    ]
}

#[test]
fn require_refuses_every_option_before_starttls_then_serves_over_tls() {
    let (export, server, ca, _dir) = tls_server(TlsMode::Require);
    let mut c = server.connect();
    c.start();
    for option in every_option_but_starttls() {
        c.expect_option_error(&option, REP_ERR_TLS_REQD);
    }
    start_tls(&mut c, &ca);
    // Over TLS nothing is refused for want of TLS; a second STARTTLS is invalid.
    c.expect_option_error(&ClientOption::StartTls { has_data: false }, REP_ERR_INVALID);
    let list = c.option_replies(&ClientOption::List { has_data: false });
    assert_eq!(list.last(), Some(&OptionReply::Ack), "{list:?}");
    let r = c.option_replies(&ClientOption::Go(InfoRequest {
        name: "disk0".into(),
        requests: vec![],
    }));
    assert_eq!(export_info(&r).0, SIZE as u64);
    let data: Vec<u8> = (0..256 << 10).map(|i| (i * 7 + 3) as u8).collect();
    c.write(1, 65536, &data, 0);
    assert_eq!(c.reply(0).unwrap(), Reply::done(1));
    c.request(CMD_READ, 0, 2, 65536, data.len() as u32);
    let r = c.reply(data.len()).unwrap();
    assert_eq!((r.cookie, r.error), (2, 0));
    assert_eq!(r.data, data);
    assert_eq!(
        export.bytes.lock().unwrap()[65536..65536 + data.len()],
        data[..]
    );
    c.request(CMD_DISC, 0, 3, 0, 0);
    assert!(c.is_closed());
}

#[test]
fn require_closes_on_plaintext_export_name_and_keeps_serving() {
    let (_export, server, ca, _dir) = tls_server(TlsMode::Require);
    let mut c = server.connect();
    c.start();
    c.send_option(&ClientOption::ExportName("disk0".into()));
    assert!(c.is_closed());
    // ABORT is answered in plaintext.
    let mut c = server.connect();
    c.start();
    assert_eq!(
        c.option_replies(&ClientOption::Abort),
        vec![OptionReply::Ack]
    );
    // Another client still gets TLS.
    let mut c = server.connect();
    c.start();
    start_tls(&mut c, &ca);
    let list = c.option_replies(&ClientOption::List { has_data: false });
    assert_eq!(list.last(), Some(&OptionReply::Ack), "{list:?}");
}

#[test]
fn on_serves_plaintext_options_and_tls() {
    let (_export, server, ca, _dir) = tls_server(TlsMode::On);
    let mut c = server.connect();
    c.start();
    for option in every_option_but_starttls() {
        let r = c.option_replies(&option);
        assert!(
            !r.iter().any(|reply| matches!(reply,
                OptionReply::Error { reply_type, .. } if *reply_type == REP_ERR_TLS_REQD)),
            "{option:?}: {r:?}"
        );
        if matches!(option, ClientOption::Go(_)) {
            break;
        }
    }
    let mut c = server.connect();
    c.start();
    c.expect_option_error(&ClientOption::StartTls { has_data: true }, REP_ERR_INVALID);
    start_tls(&mut c, &ca);
    let list = c.option_replies(&ClientOption::List { has_data: false });
    assert_eq!(list.last(), Some(&OptionReply::Ack), "{list:?}");
}

#[test]
fn missing_certificates_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = Tls::load(dir.path(), TlsMode::Require, false).unwrap_err();
    assert!(err.to_string().contains("server-cert.pem"), "{err}");
    testsupport::certificates::server_in(dir.path());
    std::fs::remove_file(dir.path().join("ca-cert.pem")).unwrap();
    Tls::load(dir.path(), TlsMode::Require, false).expect("no CA needed without verify-peer");
    let err = Tls::load(dir.path(), TlsMode::Require, true).unwrap_err();
    assert!(err.to_string().contains("ca-cert.pem"), "{err}");
}
