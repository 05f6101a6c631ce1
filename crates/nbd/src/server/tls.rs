//! TLS for clients (NBD_OPT_STARTTLS) with rustls: the certificates of a directory in
//! nbdkit's layout, and the acceptor every connection of a listener shares.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use tokio_rustls::TlsAcceptor;

/// How a listener treats TLS (`raidkit serve --tls`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// STARTTLS is refused (`NBD_REP_ERR_UNSUP`); everything is plaintext.
    Off,
    /// Clients may upgrade with STARTTLS or stay in plaintext.
    On,
    /// Every option but STARTTLS and ABORT gets `NBD_REP_ERR_TLS_REQD` until TLS is up; no
    /// data moves in plaintext (the spec's FORCEDTLS mode).
    Require,
}

/// The TLS side of a listener: its rustls configuration and whether TLS is required.
#[derive(Clone)]
pub struct Tls {
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) require: bool,
    pub(crate) verify_peer: bool,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("require", &self.require)
            .field("verify_peer", &self.verify_peer)
            .finish_non_exhaustive()
    }
}

/// Certificates that cannot be used, with the file and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

impl Tls {
    /// Loads `dir/server-cert.pem` (the chain, server first) and `dir/server-key.pem`, and with
    /// `verify_peer` `dir/ca-cert.pem`, the CA client certificates must be signed by (a client
    /// without one is refused). `mode` must not be [`TlsMode::Off`].
    pub fn load(dir: &Path, mode: TlsMode, verify_peer: bool) -> Result<Tls, TlsError> {
        let file = |name: &str| dir.join(name);
        let certs = read_certs(&file("server-cert.pem"))?;
        let key_path = file("server-key.pem");
        let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| {
            TlsError(format!(
                "cannot read the private key {}: {e} (a PEM key, as certtool --generate-privkey writes)",
                key_path.display()
            ))
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("TLS setup: {e}")))?;
        let builder = if verify_peer {
            let ca_path = file("ca-cert.pem");
            let mut roots = RootCertStore::empty();
            for cert in read_certs(&ca_path)? {
                roots.add(cert).map_err(|e| {
                    TlsError(format!(
                        "unusable CA certificate in {}: {e}",
                        ca_path.display()
                    ))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError(format!("{}: {e}", ca_path.display())))?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let config = builder.with_single_cert(certs, key).map_err(|e| {
            TlsError(format!(
                "{} and {} do not make a usable server identity: {e}",
                file("server-cert.pem").display(),
                key_path.display()
            ))
        })?;
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            require: mode == TlsMode::Require,
            verify_peer,
        })
    }

    /// The acceptor of this configuration, for another TLS listener of the process with the
    /// same certificates and rules (the admin API on TCP).
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }
}

/// Every certificate of a PEM file; an empty or missing file is an error naming it.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    member::pem_certificates(
        path,
        "the --tls-certificates directory holds ca-cert.pem, server-cert.pem and \
         server-key.pem, as nbdkit's does",
    )
    .map_err(TlsError)
}
