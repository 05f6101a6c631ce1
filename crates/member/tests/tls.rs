//! `nbds://` and `nbds+unix://` members against nbdkit with `--tls=require` (GnuTLS), with
//! certificates made here by rcgen in libnbd's/nbdkit's directory layouts: data round trips from
//! many threads at once and in requests larger than one TLS record, landing in nbdkit's file;
//! the server's name checked over TCP (and `tls-hostname`); a wrong CA, an expired server
//! certificate, a server without TLS, a plaintext URI against a TLS-only server and a missing
//! client certificate each refused with a message naming the member and what to do;
//! `tls-verify-peer=false`; reconnect after the server restarts, over TLS.
//! Random data comes from `RAIDKIT_SEED` (printed; set it to replay).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use member::{open, Member, MemberError, NbdMember, OpenOptions, RemoteOptions, SimRng};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use tempfile::TempDir;
use testsupport::server::{nbdkit, sparse_file, Server};

const DISK_BYTES: u64 = 16 << 20;

/// Certificate directories: `server` (nbdkit's: ca-cert, server-cert for "localhost",
/// server-key), `expired` (the same with a certificate that expired in 2021), `client`
/// (libnbd's: ca-cert, client-cert, client-key), `anonymous` (ca-cert only), `other` (a CA
/// that signed nothing here).
struct Pki {
    root: TempDir,
}

impl Pki {
    fn new() -> Pki {
        let root = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.clone().self_signed(&ca_key).unwrap();
        let other_key = KeyPair::generate().unwrap();
        let mut other_params = ca_params.clone();
        other_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "another CA");
        let other = other_params.self_signed(&other_key).unwrap();
        let issue = |dir: &str, kind: &str, params: CertificateParams, ca_pem: &str| {
            let dir = root.path().join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
            std::fs::write(dir.join("ca-cert.pem"), ca_pem).unwrap();
            if !kind.is_empty() {
                std::fs::write(dir.join(format!("{kind}-cert.pem")), cert.pem()).unwrap();
                std::fs::write(dir.join(format!("{kind}-key.pem")), key.serialize_pem()).unwrap();
            }
        };
        let localhost = || CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        issue("server", "server", localhost(), &ca.pem());
        let mut expired = localhost();
        expired.not_before = rcgen::date_time_ymd(2020, 1, 1);
        expired.not_after = rcgen::date_time_ymd(2021, 1, 1);
        issue("expired", "server", expired, &ca.pem());
        issue("client", "client", localhost(), &ca.pem());
        issue("anonymous", "", localhost(), &ca.pem());
        issue("other", "", localhost(), &other.pem());
        Pki { root }
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }
}

/// A directory with a sparse disk image and a socket path, once nbdkit is there.
fn setup() -> Option<(TempDir, PathBuf, PathBuf, Pki)> {
    if !testsupport::require_tool("nbdkit") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = sparse_file(&dir.path().join("disk.img"), DISK_BYTES);
    let sock = dir.path().join("s");
    Some((dir, disk, sock, Pki::new()))
}

/// nbdkit's file plugin over `disk` on `sock`, TLS required with the certificates of `certs`
/// (plus `extra` options).
fn tls_nbdkit(sock: &Path, certs: &Path, disk: &Path, extra: &[&str]) -> Server {
    let certs = format!("--tls-certificates={}", certs.display());
    let mut args = vec!["--tls=require", &certs];
    args.extend_from_slice(extra);
    args.extend(["file", disk.to_str().unwrap()]);
    nbdkit(sock, &args)
}

fn unix_uri(sock: &Path, certs: &Path) -> String {
    format!(
        "nbds+unix:///?socket={}&tls-certificates={}",
        sock.display(),
        certs.display()
    )
}

fn open_err(uri: &str) -> String {
    let err = open(uri, &OpenOptions::default()).unwrap_err();
    assert!(matches!(err, MemberError::Io { .. }), "{err:?}");
    let text = err.to_string();
    eprintln!("refused as expected: {text}");
    assert!(text.contains(uri), "the error names the member: {text}");
    text
}

fn seed() -> u64 {
    testsupport::seed("member tls")
}

fn random_bytes(rng: &mut SimRng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

fn read(m: &dyn Member, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xAAu8; len];
    m.read_at(&mut buf, offset).unwrap();
    buf
}

#[test]
fn nbds_unix_round_trips_from_many_threads_into_the_servers_file() {
    let Some((_dir, disk, sock, pki)) = setup() else {
        return;
    };
    let _server = tls_nbdkit(&sock, &pki.dir("server"), &disk, &[]);
    let m = NbdMember::open(
        &unix_uri(&sock, &pki.dir("client")),
        &OpenOptions::default(),
        &RemoteOptions::default(),
    )
    .unwrap();
    assert!(
        m.description().contains("TLS, server certificate verified"),
        "{}",
        m.description()
    );
    let m: Arc<dyn Member> = Arc::new(m);
    assert_eq!(m.len(), DISK_BYTES);
    let seed = seed();
    // 8 threads, each its own 2 MiB: writes of 1 byte to 1 MiB + 3 (unaligned, several TLS
    // records each) and whole-area vectored writes, read back while the others run.
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                let mut rng = SimRng::new(seed ^ t);
                let base = t * (2 << 20);
                let mut image = vec![0u8; 2 << 20];
                for len in [1usize, 4096, 65_536 + 17, (1 << 20) + 3, 300_001] {
                    let at = rng.next_u64() as usize % ((2 << 20) - len);
                    let data = random_bytes(&mut rng, len);
                    m.write_at(&data, base + at as u64).unwrap();
                    image[at..at + len].copy_from_slice(&data);
                    assert_eq!(read(m.as_ref(), base + at as u64, len), data);
                }
                let (a, b) = image.split_at(700_000);
                m.write_vectored_at(&[a, b], base).unwrap();
                assert_eq!(read(m.as_ref(), base, image.len()), image);
                image
            })
        })
        .collect();
    let images: Vec<Vec<u8>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    m.flush().unwrap();
    // What the server wrote to its file is what was sent: the data was decrypted there.
    let on_disk = std::fs::read(&disk).unwrap();
    assert_eq!(&on_disk[..16 << 20], images.concat().as_slice());
    m.trim(4096, 8192).unwrap();
    assert_eq!(read(m.as_ref(), 4096, 8192), vec![0u8; 8192]);
}

/// A free loopback TCP port (bound and released: the server takes it next).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// nbdkit with TLS required on 127.0.0.1:`port`, waited for until an open of `probe` stops
/// failing to connect.
fn tcp_tls_nbdkit(port: u16, certs: &Path, disk: &Path) -> Server {
    let child = Command::new("nbdkit")
        .args(["-f", "--exit-with-parent", "-i", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .arg("--tls=require")
        .arg(format!("--tls-certificates={}", certs.display()))
        .args(["file", disk.to_str().unwrap()])
        .spawn()
        .unwrap();
    let server = Server::adopt(child);
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nbdkit not listening"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

#[test]
fn nbds_tcp_checks_the_servers_name() {
    let Some((_dir, disk, _sock, pki)) = setup() else {
        return;
    };
    let port = free_port();
    let _server = tcp_tls_nbdkit(port, &pki.dir("server"), &disk);
    let certs = pki.dir("client");
    // The certificate names localhost, not 127.0.0.1.
    let by_ip = format!(
        "nbds://127.0.0.1:{port}/?tls-certificates={}",
        certs.display()
    );
    let text = open_err(&by_ip);
    assert!(
        text.contains("not valid for 127.0.0.1") && text.contains("localhost"),
        "{text}"
    );
    assert!(text.contains("tls-hostname=NAME"), "{text}");
    let named = format!("{by_ip}&tls-hostname=localhost");
    let m = open(&named, &OpenOptions::default()).unwrap();
    m.write_at(b"over tcp", 512).unwrap();
    assert_eq!(read(m.as_ref(), 512, 8), b"over tcp");
    let by_name = format!(
        "nbds://localhost:{port}/?tls-certificates={}",
        certs.display()
    );
    let m = open(&by_name, &OpenOptions::default()).unwrap();
    assert_eq!(read(m.as_ref(), 512, 8), b"over tcp");
}

#[test]
fn a_server_certificate_from_another_ca_is_refused() {
    let Some((_dir, disk, sock, pki)) = setup() else {
        return;
    };
    let _server = tls_nbdkit(&sock, &pki.dir("server"), &disk, &[]);
    let text = open_err(&unix_uri(&sock, &pki.dir("other")));
    let ca = pki.dir("other").join("ca-cert.pem");
    assert!(
        text.contains("not signed by the CA in") && text.contains(&ca.display().to_string()),
        "{text}"
    );
    // Without verification the same directory encrypts, not knowing who the server is.
    let unverified = format!(
        "{}&tls-verify-peer=false",
        unix_uri(&sock, &pki.dir("other"))
    );
    let m = open(&unverified, &OpenOptions::default()).unwrap();
    m.write_at(b"unverified", 0).unwrap();
    assert_eq!(read(m.as_ref(), 0, 10), b"unverified");
}

#[test]
fn an_expired_server_certificate_is_refused() {
    let Some((_dir, disk, sock, pki)) = setup() else {
        return;
    };
    let _server = tls_nbdkit(&sock, &pki.dir("expired"), &disk, &[]);
    let text = open_err(&unix_uri(&sock, &pki.dir("client")));
    assert!(
        text.contains("certificate expired") && text.contains("days ago"),
        "{text}"
    );
    assert!(text.contains("renewed certificate"), "{text}");
}

#[test]
fn a_server_without_tls_is_refused_for_nbds_and_plaintext_is_refused_by_a_tls_server() {
    let Some((_dir, disk, sock, pki)) = setup() else {
        return;
    };
    let mut plain = nbdkit(&sock, &["file", disk.to_str().unwrap()]);
    let text = open_err(&unix_uri(&sock, &pki.dir("client")));
    assert!(
        text.contains("does not offer TLS") && text.contains("NBD_OPT_STARTTLS"),
        "{text}"
    );
    assert!(text.contains("never falls back to plaintext"), "{text}");
    plain.kill();
    let _server = tls_nbdkit(&sock, &pki.dir("server"), &disk, &[]);
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let text = open_err(&uri);
    assert!(
        text.contains("requires TLS") && text.contains("nbds"),
        "{text}"
    );
}

#[test]
fn a_server_verifying_clients_needs_our_certificate() {
    let Some((_dir, disk, sock, pki)) = setup() else {
        return;
    };
    let _server = tls_nbdkit(&sock, &pki.dir("server"), &disk, &["--tls-verify-peer"]);
    let text = open_err(&unix_uri(&sock, &pki.dir("anonymous")));
    assert!(
        text.contains("client certificate") && text.contains("client-cert.pem"),
        "{text}"
    );
    let m = open(
        &unix_uri(&sock, &pki.dir("client")),
        &OpenOptions::default(),
    )
    .unwrap();
    m.write_at(b"authenticated", 7).unwrap();
    assert_eq!(read(m.as_ref(), 7, 13), b"authenticated");
}

#[test]
fn a_bad_certificate_directory_is_refused_before_connecting() {
    let Some((dir, disk, sock, pki)) = setup() else {
        return;
    };
    let _server = tls_nbdkit(&sock, &pki.dir("server"), &disk, &[]);
    let missing = dir.path().join("no-such-dir");
    let text = open_err(&unix_uri(&sock, &missing));
    assert!(
        text.contains(&missing.join("ca-cert.pem").display().to_string()),
        "{text}"
    );
    let half = pki.dir("anonymous");
    std::fs::copy(
        pki.dir("client").join("client-cert.pem"),
        half.join("client-cert.pem"),
    )
    .unwrap();
    let text = open_err(&unix_uri(&sock, &half));
    assert!(
        text.contains("client-key.pem") && text.contains("go together"),
        "{text}"
    );
}

#[test]
fn reconnect_over_tls_after_the_server_restarts() {
    let Some((_dir, disk, sock, pki)) = setup() else {
        return;
    };
    let mut server = tls_nbdkit(&sock, &pki.dir("server"), &disk, &[]);
    let m = open(
        &unix_uri(&sock, &pki.dir("client")),
        &OpenOptions::default(),
    )
    .unwrap();
    m.write_at(b"before", 100).unwrap();
    m.flush().unwrap();
    server.kill();
    assert!(m.write_at(b"x", 0).is_err());
    assert!(m.reconnect().is_err(), "nobody listens yet");
    // A plaintext server on the same socket is not taken instead.
    let mut plain = nbdkit(&sock, &["file", disk.to_str().unwrap()]);
    let err = m.reconnect().unwrap_err();
    assert!(err.to_string().contains("does not offer TLS"), "{err}");
    plain.kill();
    let _server = tls_nbdkit(&sock, &pki.dir("server"), &disk, &[]);
    m.reconnect().unwrap();
    assert_eq!(read(m.as_ref(), 100, 6), b"before");
    m.write_at(b"after", 200).unwrap();
    assert_eq!(read(m.as_ref(), 200, 5), b"after");
}
