//! Certificates for TLS tests, made with rcgen (no tool needed).

use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// A new CA and a server certificate it signed for "localhost", written in nbdkit's layout
/// under `dir` (ca-cert.pem, server-cert.pem, server-key.pem); returns the CA certificate
/// (PEM) a client trusts.
pub fn server_in(dir: &Path) -> String {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::write(dir.join("ca-cert.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server-cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server-key.pem"), key.serialize_pem()).unwrap();
    ca.pem()
}
