//! TLS for `nbds://` and `nbds+unix://` members, with rustls: the client configuration from a
//! URI's `tls-*` parameters (libnbd's certificate directory layout), the TLS handshake after
//! `NBD_OPT_STARTTLS`, errors that say what failed and what to do, and the transmission phase
//! over one TLS session shared by the sending threads and the reader thread.
//!
//! Sharing one session: rustls's `ClientConnection` is a state machine, not a stream, so it
//! sits behind a mutex held only to seal or open records, never across socket I/O. A sender
//! (holding the connection's send turn, so records leave in the order they were sealed) seals
//! at most [`SEAL_BYTES`] of plaintext under the lock, takes the records out and writes them
//! to the socket after unlocking; the reader thread reads ciphertext from the socket unlocked
//! and only feeds it to the session under the lock. A sender blocked on a full socket thus
//! never stops the reader from taking the server's replies (which would deadlock a server
//! that waits to write its replies before it reads more requests).

use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime,
};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct,
    RootCertStore, SignatureScheme,
};

use super::stream::Stream;
use super::uri::{NbdTarget, TlsSettings};

/// Plaintext sealed per turn of the session lock when sending (rustls's own send buffer
/// limit is 64 KiB): bounds the sealed bytes held outside the session and the lock's hold time.
const SEAL_BYTES: usize = 64 * 1024;
/// Ciphertext read from the socket at once by the reader thread.
const READ_BYTES: usize = 64 * 1024;

/// A session shared by the senders and the reader thread.
pub type Session = Arc<Mutex<ClientConnection>>;

fn lock(session: &Mutex<ClientConnection>) -> MutexGuard<'_, ClientConnection> {
    // A panic while sealing or opening a record is a bug that already stopped its thread; the
    // session's state is rustls's own and stays consistent between calls.
    session.lock().unwrap_or_else(|p| p.into_inner())
}

/// The name `name` as a TLS server name (a DNS name or an IP address).
pub fn server_name(name: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(name.to_string()).map_err(|e| e.to_string())
}

/// A member's TLS client: its configuration and what to check, built for each connection (so
/// renewed certificate files are read at the next reconnect).
pub struct Client {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    /// What the errors name.
    context: Context,
}

/// What an error message needs to say what to do.
#[derive(Clone)]
struct Context {
    dir: Option<PathBuf>,
    /// The name the server's certificate is checked against, if any.
    checked_name: Option<String>,
    client_certificate: bool,
}

impl Context {
    fn file(&self, name: &str) -> String {
        match &self.dir {
            Some(dir) => dir.join(name).display().to_string(),
            None => format!("DIR/{name} (tls-certificates=DIR)"),
        }
    }
}

fn tls_error(reason: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, reason)
}

impl Client {
    /// Reads the certificates `settings` name and builds the configuration for `target`.
    pub fn new(settings: &TlsSettings, target: &NbdTarget) -> io::Result<Client> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let dir = settings.certificates.as_deref();
        let checked_name = match (&settings.hostname, target) {
            (Some(name), _) => Some(name.clone()),
            (None, NbdTarget::Tcp { host, .. }) => Some(host.clone()),
            (None, NbdTarget::Unix { .. }) => None,
        };
        let verifier: Arc<dyn ServerCertVerifier> = if settings.verify_peer {
            let dir = dir.expect("the URI parser requires tls-certificates with verification");
            let web = verifier(dir, provider.clone())?;
            match checked_name {
                Some(_) => web,
                None => Arc::new(ChainOnly(web)),
            }
        } else {
            Arc::new(Unverified(provider.clone()))
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error(format!("TLS setup: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let identity = match dir {
            Some(dir) => client_identity(dir)?,
            None => None,
        };
        let client_certificate = identity.is_some();
        let mut config = match identity {
            Some((certs, key)) => builder.with_client_auth_cert(certs, key).map_err(|e| {
                tls_error(format!(
                    "{} and {} do not make a usable client identity: {e}",
                    dir.unwrap_or(Path::new("."))
                        .join("client-cert.pem")
                        .display(),
                    dir.unwrap_or(Path::new("."))
                        .join("client-key.pem")
                        .display()
                ))
            })?,
            None => builder.with_no_client_auth(),
        };
        // Without a name to check (a Unix socket and no tls-hostname) none is sent either.
        config.enable_sni = checked_name.is_some();
        let name = server_name(checked_name.as_deref().unwrap_or("localhost"))
            .map_err(|e| tls_error(format!("{e} (give tls-hostname=NAME)")))?;
        Ok(Client {
            config: Arc::new(config),
            name,
            context: Context {
                dir: dir.map(Path::to_path_buf),
                checked_name: checked_name.filter(|_| settings.verify_peer),
                client_certificate,
            },
        })
    }

    /// Runs the TLS handshake on `stream` (after the server acknowledged `NBD_OPT_STARTTLS`).
    pub fn handshake(&self, stream: &mut Stream) -> io::Result<ClientConnection> {
        let mut conn = ClientConnection::new(Arc::clone(&self.config), self.name.clone())
            .map_err(|e| tls_error(format!("TLS setup: {e}")))?;
        while conn.is_handshaking() {
            match conn.complete_io(stream) {
                Ok((0, 0)) => {
                    let e = io::Error::from(io::ErrorKind::UnexpectedEof);
                    return Err(self.explain(e));
                }
                Ok(_) => {}
                Err(e) => return Err(self.explain(e)),
            }
        }
        Ok(conn)
    }

    /// `e`, met during the TLS handshake or the options after it, said in words: what failed
    /// and what to do.
    pub fn explain(&self, e: io::Error) -> io::Error {
        if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut {
            return e;
        }
        let ctx = &self.context;
        let reason = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::InvalidCertificate(ce)) => certificate_refused(ce, ctx),
            Some(rustls::Error::AlertReceived(alert)) => alert_received(*alert, ctx),
            Some(other) => format!("TLS failed: {other}"),
            None => match e.kind() {
                io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe => format!(
                    "the server closed the connection during TLS setup ({e}); {}",
                    client_certificate_hint(ctx)
                ),
                _ => return e,
            },
        };
        io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {reason}"))
    }
}

/// The verifier of the server's chain against `dir/ca-cert.pem` (and `dir/ca-crl.pem` when
/// there is one).
fn verifier(dir: &Path, provider: Arc<CryptoProvider>) -> io::Result<Arc<WebPkiServerVerifier>> {
    let ca_path = dir.join("ca-cert.pem");
    let mut roots = RootCertStore::empty();
    for cert in read_certs(&ca_path)? {
        roots.add(cert).map_err(|e| {
            tls_error(format!(
                "unusable CA certificate in {}: {e}",
                ca_path.display()
            ))
        })?;
    }
    let crl_path = dir.join("ca-crl.pem");
    let crls = if crl_path.exists() {
        CertificateRevocationListDer::pem_file_iter(&crl_path)
            .and_then(|i| i.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                tls_error(format!(
                    "cannot read revocation lists from {}: {e}",
                    crl_path.display()
                ))
            })?
    } else {
        Vec::new()
    };
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .with_crls(crls)
        .build()
        .map_err(|e| tls_error(format!("{}: {e}", ca_path.display())))
}

/// `dir/client-cert.pem` and `dir/client-key.pem` when both are there; one without the other
/// is an error naming both. Shared with the admin CLI's `--admin-client-certificates`.
#[allow(clippy::type_complexity)]
pub fn client_identity(
    dir: &Path,
) -> io::Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>> {
    let cert_path = dir.join("client-cert.pem");
    let key_path = dir.join("client-key.pem");
    match (cert_path.exists(), key_path.exists()) {
        (false, false) => return Ok(None),
        (true, true) => {}
        _ => {
            return Err(tls_error(format!(
                "{} and {} go together: give both (a client certificate for servers that \
                 verify clients) or neither",
                cert_path.display(),
                key_path.display()
            )))
        }
    }
    let certs = read_certs(&cert_path)?;
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| {
        tls_error(format!(
            "cannot read the private key {}: {e} (a PEM key, as certtool --generate-privkey \
             writes)",
            key_path.display()
        ))
    })?;
    Ok(Some((certs, key)))
}

/// Every certificate of the PEM file `path`; a missing, unreadable or empty file is an error
/// naming it, followed by `layout` (which files the directory should hold). Shared with the
/// NBD server's `--tls-certificates`.
pub fn pem_certificates(path: &Path, layout: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let bad = |e: &dyn fmt::Display| {
        format!(
            "cannot read certificates from {}: {e} ({layout})",
            path.display()
        )
    };
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(bad(&"no PEM certificate in it"));
    }
    Ok(certs)
}

/// [`pem_certificates`] of a member's `tls-certificates` directory.
fn read_certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    pem_certificates(
        path,
        "the tls-certificates directory holds ca-cert.pem, and client-cert.pem with \
         client-key.pem for servers that verify clients, as libnbd's does",
    )
    .map_err(tls_error)
}

/// Why the server's certificate was refused, and what to do.
fn certificate_refused(e: &CertificateError, ctx: &Context) -> String {
    let ca = ctx.file("ca-cert.pem");
    match e {
        CertificateError::UnknownIssuer => format!(
            "the server's certificate is not signed by the CA in {ca} (a wrong CA, or a server \
             that does not send its intermediate certificates): put the CA that signed the \
             server's certificate in {ca}"
        ),
        CertificateError::BadSignature => format!(
            "the server's certificate does not verify against the CA in {ca} (a CA of the same \
             name but another key signed it, or it is forged): put the CA that signed the \
             server's certificate in {ca}"
        ),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            let expected = ctx.checked_name.as_deref().unwrap_or("?");
            let presented = match e {
                CertificateError::NotValidForNameContext { presented, .. } => {
                    // rustls words them `DnsName("x")`, `IpAddress(1.2.3.4)`: the names only.
                    let names: Vec<&str> = presented
                        .iter()
                        .map(|p| {
                            let p = p.strip_prefix("DnsName(").unwrap_or(p);
                            let p = p.strip_prefix("IpAddress(").unwrap_or(p);
                            p.strip_suffix(')').unwrap_or(p).trim_matches('"')
                        })
                        .collect();
                    format!(" (it names {})", names.join(", "))
                }
                _ => String::new(),
            };
            format!(
                "the server's certificate is not valid for {expected}{presented}: connect by a \
                 name the certificate carries, or give tls-hostname=NAME"
            )
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            let when = match e {
                CertificateError::ExpiredContext { time, not_after } => {
                    format!(
                        " {} ago",
                        ago(time.as_secs().saturating_sub(not_after.as_secs()))
                    )
                }
                _ => String::new(),
            };
            format!(
                "the server's certificate expired{when}: the server needs a renewed \
                 certificate (or this machine's clock is wrong)"
            )
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "the server's certificate is not valid yet: check the clocks of both machines"
                .to_string()
        }
        CertificateError::Revoked => format!(
            "the server's certificate is revoked ({}): the server needs a new certificate",
            ctx.file("ca-crl.pem")
        ),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "the server's certificate is not for TLS servers (its extended key usage): issue it \
             with tls_www_server (certtool) / serverAuth"
                .to_string()
        }
        other => format!(
            "the server's certificate failed verification against {ca}: {}",
            rustls::Error::InvalidCertificate(other.clone())
        ),
    }
}

/// What to do when the server may want a client certificate.
fn client_certificate_hint(ctx: &Context) -> String {
    if ctx.client_certificate {
        format!(
            "the server may not trust our client certificate {}: it must be signed by a CA the \
             server trusts (nbdkit: the ca-cert.pem of its --tls-certificates directory)",
            ctx.file("client-cert.pem")
        )
    } else {
        format!(
            "the server may require a client certificate: put client-cert.pem and \
             client-key.pem, signed by a CA the server trusts, in {}",
            ctx.dir
                .as_ref()
                .map_or("DIR (tls-certificates=DIR)".to_string(), |d| d
                    .display()
                    .to_string())
        )
    }
}

/// Why the server ended the TLS session with `alert`, and what to do.
fn alert_received(alert: AlertDescription, ctx: &Context) -> String {
    match alert {
        AlertDescription::CertificateRequired => format!(
            "the server requires a client certificate: put client-cert.pem and client-key.pem, \
             signed by a CA the server trusts, in {}",
            ctx.dir
                .as_ref()
                .map_or("DIR (tls-certificates=DIR)".to_string(), |d| d
                    .display()
                    .to_string())
        ),
        AlertDescription::CertificateExpired => format!(
            "the server says our client certificate {} expired: renew it",
            ctx.file("client-cert.pem")
        ),
        AlertDescription::CertificateRevoked => format!(
            "the server says our client certificate {} is revoked",
            ctx.file("client-cert.pem")
        ),
        AlertDescription::BadCertificate
        | AlertDescription::UnknownCA
        | AlertDescription::UnsupportedCertificate
        | AlertDescription::CertificateUnknown
        | AlertDescription::AccessDenied => format!(
            "the server refused the TLS session (alert {alert:?}); {}",
            client_certificate_hint(ctx)
        ),
        AlertDescription::ProtocolVersion
        | AlertDescription::HandshakeFailure
        | AlertDescription::InsufficientSecurity => format!(
            "no TLS version or cipher suite in common with the server (alert {alert:?}): this \
             client speaks TLS 1.2 and 1.3"
        ),
        other => format!("the server ended the TLS session with alert {other:?}"),
    }
}

/// `secs` in words: "3 days", "5 hours", "12 minutes", "40 seconds".
fn ago(secs: u64) -> String {
    match secs {
        s if s >= 2 * 86_400 => format!("{} days", s / 86_400),
        s if s >= 2 * 3_600 => format!("{} hours", s / 3_600),
        s if s >= 2 * 60 => format!("{} minutes", s / 60),
        s => format!("{s} seconds"),
    }
}

/// Verifies the chain but not the name: for a Unix socket without `tls-hostname`, whose
/// server has no host name to check (the CA alone says who may serve).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // WebPkiServerVerifier checks the chain (and revocation) first and the name last, so
        // a name error means the chain passed.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `tls-verify-peer=false`: any certificate is taken (the handshake's signatures are still
/// checked, so the session is with the holder of that certificate's key, whoever it is).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Seals `bufs` (one after the other) and writes the records to `sock`. The caller holds the
/// connection's send turn, so no other sender's records come between.
pub fn send(session: &Mutex<ClientConnection>, sock: &Stream, bufs: &[&[u8]]) -> io::Result<()> {
    let mut sealed = Vec::with_capacity(SEAL_BYTES + 1024);
    for buf in bufs {
        let mut rest: &[u8] = buf;
        while !rest.is_empty() {
            {
                let mut conn = lock(session);
                let n = conn.writer().write(&rest[..rest.len().min(SEAL_BYTES)])?;
                rest = &rest[n..];
                while conn.wants_write() {
                    conn.write_tls(&mut sealed)?;
                }
            }
            sock.write_all_shared(&sealed)?;
            sealed.clear();
        }
    }
    Ok(())
}

/// Sends a TLS close_notify (best effort, at the end of a connection).
pub fn close(session: &Mutex<ClientConnection>, sock: &Stream) -> io::Result<()> {
    let mut sealed = Vec::new();
    {
        let mut conn = lock(session);
        conn.send_close_notify();
        while conn.wants_write() {
            conn.write_tls(&mut sealed)?;
        }
    }
    sock.write_all_shared(&sealed)
}

/// The reader thread's side of a TLS session: plaintext out of ciphertext read from the
/// socket without holding the session's lock.
pub struct Reader {
    sock: Stream,
    session: Session,
    raw: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Reader {
    pub fn new(sock: Stream, session: Session) -> Reader {
        Reader {
            sock,
            session,
            raw: vec![0u8; READ_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }
}

impl Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut conn = lock(&self.session);
                match conn.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                // No plaintext left: open what was read (rustls refuses more ciphertext while
                // plaintext waits, so this comes only once it is drained).
                if self.start < self.end {
                    let mut pending = &self.raw[self.start..self.end];
                    let n = conn.read_tls(&mut pending)?;
                    self.start += n;
                    conn.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    continue;
                }
            }
            let n = self.sock.read(&mut self.raw)?;
            if n == 0 {
                // The end of the ciphertext: rustls then says whether the server closed
                // cleanly (close_notify: Ok(0)) or not (UnexpectedEof).
                let mut conn = lock(&self.session);
                conn.read_tls(&mut io::empty())?;
                conn.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                return match conn.reader().read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        Err(io::ErrorKind::UnexpectedEof.into())
                    }
                    other => other,
                };
            }
            self.start = 0;
            self.end = n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ago_in_words() {
        assert_eq!(ago(40), "40 seconds");
        assert_eq!(ago(600), "10 minutes");
        assert_eq!(ago(3 * 3_600), "3 hours");
        assert_eq!(ago(10 * 86_400 + 5), "10 days");
    }
}
