//! The admin API on TCP (`admin::tcp`), on loopback: requests with the token are answered and
//! reach the array's control; a missing or wrong token is refused with 401 before the control
//! sees anything, and logged with the client's address; a plaintext client gets no HTTP at all
//! (its connection fails the TLS handshake, logged); a client that trusts another CA refuses
//! the server. Certificates are made with rcgen.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use admin::api::{ApiError, Request};
use admin::server::{Arrays, Control};
use admin::tcp::AdminTcp;
use admin::token::Token;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};

const TOKEN: &str = "s3cret-admin-token-0123456789";

/// Records every request it is handed.
#[derive(Default)]
struct Recorder(Mutex<Vec<Request>>);

impl Control for Recorder {
    fn handle(&self, request: Request) -> Result<Value, ApiError> {
        self.0.lock().unwrap().push(request);
        Ok(json!({ "state": "clean" }))
    }
}

struct Server {
    addr: SocketAddr,
    ca: String,
    control: Arc<Recorder>,
    lines: Arc<Mutex<Vec<String>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
    _runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let ca = testsupport::certificates::server_in(dir.path());
        let tls = nbd::Tls::load(dir.path(), nbd::TlsMode::Require, false).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let tcp = AdminTcp::new(listener, tls.acceptor(), Token::new(TOKEN).unwrap()).unwrap();
        let control = Arc::new(Recorder::default());
        let arrays = Arc::new(Arrays::default());
        assert!(arrays.insert("md0", control.clone()));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let logged = Arc::clone(&lines);
        let log: admin::Log = Arc::new(move |line| logged.lock().unwrap().push(line.to_string()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        runtime.spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            admin::tcp::serve(&tcp, arrays, log, shutdown)
                .await
                .unwrap();
        });
        Server {
            addr,
            ca,
            control,
            lines,
            _stop: stop,
            _runtime: runtime,
            _dir: dir,
        }
    }

    /// Waits (≤ 10 s) for a logged line containing every one of `words`.
    fn logged(&self, words: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines = self.lines.lock().unwrap().clone();
            if let Some(line) = lines.iter().find(|l| words.iter().all(|w| l.contains(w))) {
                return line.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no log line with {words:?}; logged: {lines:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.control.0.lock().unwrap().clone()
    }
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// Sends one HTTP/1.1 request over TLS trusting `ca_pem`; the status and body, or the error.
fn request_with_ca(
    addr: SocketAddr,
    ca_pem: &str,
    head: &str,
    body: &str,
) -> std::io::Result<(u16, Value)> {
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(client_config(ca_pem), name).unwrap();
    let sock = TcpStream::connect(addr)?;
    sock.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let request = format!(
        "{head}\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes())?;
    let mut reply = Vec::new();
    match tls.read_to_end(&mut reply) {
        Ok(_) => {}
        // The server may close without close_notify after a 401 (`connection: close`).
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !reply.is_empty() => {}
        Err(e) => return Err(e),
    }
    let text = String::from_utf8(reply).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP reply");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Ok((status, serde_json::from_str(body).unwrap()))
}

fn request(server: &Server, head: &str, body: &str) -> (u16, Value) {
    request_with_ca(server.addr, &server.ca, head, body).unwrap()
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

#[test]
fn requests_with_the_token_are_served_over_tls() {
    let server = Server::start();
    let (status, body) = request(
        &server,
        &format!("GET /v1/status HTTP/1.1\r\n{}", bearer(TOKEN)),
        "",
    );
    assert_eq!((status, body), (200, json!({ "state": "clean" })));
    let fail = format!("POST /v1/fail HTTP/1.1\r\n{}", bearer(TOKEN));
    let (status, _) = request(&server, &fail, r#"{"member": "role 1"}"#);
    assert_eq!(status, 200);
    // The scheme is case-insensitive (RFC 9110 11.1).
    let add = format!("POST /v1/add HTTP/1.1\r\nauthorization: bearer {TOKEN}");
    let (status, _) = request(&server, &add, r#"{"member": "/dev/x"}"#);
    assert_eq!(status, 200);
    assert_eq!(
        server.requests(),
        vec![
            Request::Status,
            Request::Fail {
                member: "role 1".into()
            },
            Request::Add {
                member: "/dev/x".into()
            },
        ]
    );
}

#[test]
fn a_missing_or_wrong_token_is_refused_and_logged() {
    let server = Server::start();
    let fail = r#"{"member": "role 0"}"#;
    let refused = [
        (
            "POST /v1/fail HTTP/1.1\r\nX-Nothing: 1".to_string(),
            "no Authorization header",
        ),
        (
            format!(
                "POST /v1/fail HTTP/1.1\r\n{}",
                bearer("s3cret-admin-token-012345678X")
            ),
            "a wrong token",
        ),
        (
            format!(
                "POST /v1/fail HTTP/1.1\r\n{}",
                bearer(&TOKEN[..TOKEN.len() - 1])
            ),
            "a wrong token",
        ),
        (
            format!("POST /v1/fail HTTP/1.1\r\nAuthorization: Basic {TOKEN}"),
            "not `Bearer TOKEN`",
        ),
        (
            "POST /v1/fail HTTP/1.1\r\nAuthorization: Bearer ".to_string(),
            // (hyper trims the header value: "Bearer" alone)
            "not `Bearer TOKEN`",
        ),
    ];
    for (head, why) in refused {
        let (status, body) = request(&server, &head, fail);
        assert_eq!(status, 401, "{head}: {body}");
        let message = body["error"].as_str().unwrap();
        assert!(message.contains(why), "{head}: {message}");
        server.logged(&[
            "admin TCP request POST /v1/fail from 127.0.0.1:",
            "refused (401)",
            why,
        ]);
    }
    assert_eq!(
        server.requests(),
        vec![],
        "a refused request reached the array"
    );
}

#[test]
fn a_plaintext_client_gets_no_http_and_is_logged() {
    let server = Server::start();
    let mut sock = TcpStream::connect(server.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let plain = format!(
        "GET /v1/status HTTP/1.1\r\nHost: localhost\r\n{}\r\n\r\n",
        bearer(TOKEN)
    );
    sock.write_all(plain.as_bytes()).unwrap();
    let mut reply = Vec::new();
    let _ = sock.read_to_end(&mut reply);
    assert!(
        !String::from_utf8_lossy(&reply).contains("HTTP/1.1"),
        "a plaintext request was answered in plaintext: {reply:?}"
    );
    server.logged(&[
        "admin TCP connection from 127.0.0.1:",
        "TLS handshake failed",
    ]);
    assert_eq!(server.requests(), vec![]);
}

#[test]
fn a_client_trusting_another_ca_refuses_the_server() {
    let server = Server::start();
    let other = tempfile::tempdir().unwrap();
    let other_ca = testsupport::certificates::server_in(other.path());
    let head = format!("GET /v1/status HTTP/1.1\r\n{}", bearer(TOKEN));
    let err = request_with_ca(server.addr, &other_ca, &head, "").unwrap_err();
    assert!(
        err.to_string().contains("UnknownIssuer")
            || err.to_string().contains("invalid peer certificate"),
        "{err}"
    );
    server.logged(&[
        "admin TCP connection from 127.0.0.1:",
        "TLS handshake failed",
    ]);
    assert_eq!(
        server.requests(),
        vec![],
        "the token went to a server the client did not trust"
    );
}
