//! The operator's side of the admin endpoint (the server is the `admin` crate): one HTTP
//! request per call over the server's Unix socket, or over TLS to its TCP admin listener with
//! the operator's token, with errors that name the socket or address.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use admin::status::Status;

/// Largest reply accepted (a status with many members and mismatches is far smaller).
const REPLY_BYTES_MAX: usize = 16 << 20;
/// Longest time one request may take (a wait request blocks at most `api::WAIT_SECS_MAX`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

/// Where the admin API is: a Unix socket, or a TCP admin listener over TLS.
enum Target {
    Unix(PathBuf),
    Tls(Box<TlsTarget>),
}

/// A TCP admin listener (`--admin https://HOST:PORT`) and what reaching it takes.
struct TlsTarget {
    /// As given, for messages.
    url: String,
    /// `HOST:PORT` to connect to.
    address: String,
    /// The name the server's certificate must carry.
    name: rustls::pki_types::ServerName<'static>,
    connector: tokio_rustls::TlsConnector,
    /// `Bearer TOKEN`.
    authorization: hyper::header::HeaderValue,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Unix(path) => write!(f, "admin socket {}", path.display()),
            Target::Tls(tls) => write!(f, "admin API {}", tls.url),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `https://HOST:PORT[/]` as `(HOST:PORT, HOST)` (brackets of an IPv6 host kept in the first,
/// dropped in the second); `None` if `text` is not an https URL of that form.
fn https_address(text: &str) -> Option<(String, String)> {
    let rest = text.strip_prefix("https://")?.trim_end_matches('/');
    let (host, port) = rest.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    (!bare.is_empty() && !rest.contains('/')).then(|| (rest.to_string(), bare.to_string()))
}

impl TlsTarget {
    fn new(
        url: &str,
        token_file: Option<&Path>,
        ca: Option<&Path>,
        client_certificates: Option<&Path>,
    ) -> anyhow::Result<TlsTarget> {
        let (address, host) = https_address(url).with_context(|| {
            format!("--admin {url:?}: not https://HOST:PORT (or the path of a Unix socket)")
        })?;
        let ca = ca.with_context(|| {
            format!(
                "--admin {url} needs --admin-ca FILE, the CA certificate that signed the \
                 server's (its --admin-tls-certificates DIR/ca-cert.pem)"
            )
        })?;
        let token_file = token_file.with_context(|| {
            format!("--admin {url} needs --admin-token-file FILE, the server's admin token")
        })?;
        let token = admin::token::Token::from_file(token_file, "the admin token file")
            .map_err(anyhow::Error::msg)?;
        let bearer = [b"Bearer ".as_slice(), token.expose()].concat();
        let mut authorization = hyper::header::HeaderValue::from_bytes(&bearer)
            .context("the admin token is not a valid HTTP header value")?;
        authorization.set_sensitive(true);
        let mut roots = rustls::RootCertStore::empty();
        let layout = "--admin-ca is a PEM file with the CA certificate";
        for cert in member::pem_certificates(ca, layout).map_err(anyhow::Error::msg)? {
            (roots.add(cert))
                .with_context(|| format!("unusable CA certificate in {}", ca.display()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS setup")?
            .with_root_certificates(roots);
        let config = match client_certificates {
            None => builder.with_no_client_auth(),
            Some(dir) => {
                let identity = member::client_identity(dir).map_err(anyhow::Error::msg)?;
                let (certs, key) = identity.with_context(|| {
                    format!(
                        "--admin-client-certificates {}: no client-cert.pem and client-key.pem                          there (the certificate the listener's ca-cert.pem signed, and its key)",
                        dir.display()
                    )
                })?;
                builder.with_client_auth_cert(certs, key).with_context(|| {
                    format!(
                        "--admin-client-certificates {}: client-cert.pem and client-key.pem do                          not make a usable identity",
                        dir.display()
                    )
                })?
            }
        };
        let name = rustls::pki_types::ServerName::try_from(host)
            .with_context(|| format!("--admin {url}: the host is not a DNS name or address"))?;
        Ok(TlsTarget {
            url: url.to_string(),
            address,
            name,
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            authorization,
        })
    }
}

/// A connection target: the admin API of one `raidkit serve` or daemon.
#[derive(Debug)]
pub struct Client {
    target: Target,
    /// The array a daemon serving several is asked about (`/v1/arrays/NAME/...`).
    array: Option<String>,
    runtime: tokio::runtime::Runtime,
}

impl Client {
    /// A client of the admin socket `socket`.
    pub fn new(socket: &Path, array: Option<&str>) -> anyhow::Result<Client> {
        Client::to(Target::Unix(socket.to_path_buf()), array)
    }

    fn to(target: Target, array: Option<&str>) -> anyhow::Result<Client> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(Client {
            target,
            array: array.map(str::to_string),
            runtime,
        })
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(self.array.as_deref(), "GET", path, None)
    }

    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.call(self.array.as_deref(), "POST", path, Some(body))
    }

    /// GETs the endpoint `path` of the array `array` (whichever `--array` said).
    pub fn get_from(&self, array: &str, path: &str) -> anyhow::Result<Value> {
        self.call(Some(array), "GET", path, None)
    }

    /// POSTs to the endpoint `path` of the array `array` (whichever `--array` said).
    pub fn post_to(&self, array: &str, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.call(Some(array), "POST", path, Some(body))
    }

    /// A request about the whole server, not one array (`/v1/arrays`, `/v1/monitor/test`).
    pub fn process(&self, method: &str, path: &str) -> anyhow::Result<Value> {
        self.call(None, method, path, None)
    }

    /// Fetches the status from the server and decodes it.
    pub fn status(&self) -> anyhow::Result<Status> {
        let value = self.get("/v1/status")?;
        serde_json::from_value(value).context("the server's status does not decode")
    }

    /// Every array's status, by name (`GET /v1/arrays`), decoded.
    pub fn statuses(&self) -> anyhow::Result<BTreeMap<String, Status>> {
        decode_statuses(self.process("GET", admin::api::ALL_STATUS_PATH)?)
    }

    /// Sends one request, to the array `array` when given (`/v1/X` becomes
    /// `/v1/arrays/NAME/X`); a non-2xx reply becomes an error carrying the server's message.
    fn call(
        &self,
        array: Option<&str>,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let named;
        let path = match (array, path.strip_prefix("/v1/")) {
            (Some(array), Some(endpoint)) => {
                named = format!("{}{array}/{endpoint}", admin::api::ARRAY_PATH_PREFIX);
                named.as_str()
            }
            _ => path,
        };
        let target = &self.target;
        let fut = send(target, method, path, body);
        let (status, bytes) = self
            .runtime
            .block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, fut).await })
            .map_err(|_| {
                anyhow!("{target}: no reply to {method} {path} within {REQUEST_TIMEOUT:?}")
            })??;
        let value: Value = serde_json::from_slice(&bytes).with_context(|| {
            format!("{target}: {method} {path}: the reply (HTTP {status}) is not JSON")
        })?;
        if !(200..300).contains(&status) {
            let message = value
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            return Err(anyhow!("{message}"));
        }
        Ok(value)
    }
}

async fn send(
    target: &Target,
    method: &str,
    path: &str,
    body: String,
) -> anyhow::Result<(u16, Bytes)> {
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, "raidkit")
        .header(hyper::header::CONTENT_TYPE, "application/json");
    match target {
        Target::Unix(socket) => {
            let stream = tokio::net::UnixStream::connect(socket)
                .await
                .with_context(|| {
                    format!(
                        "cannot reach the admin socket {} (is `raidkit serve --admin {}` \
                         running?)",
                        socket.display(),
                        socket.display()
                    )
                })?;
            exchange(target, stream, request, method, path, body).await
        }
        Target::Tls(tls) => {
            let url = &tls.url;
            let stream = tokio::net::TcpStream::connect(&tls.address)
                .await
                .with_context(|| {
                    format!(
                        "cannot reach the admin API {url} (is a raidkit serve --admin-listen \
                         or daemon admin_listen there?)"
                    )
                })?;
            let stream = (tls.connector.connect(tls.name.clone(), stream).await)
                .with_context(|| format!("admin API {url}: TLS handshake (is --admin-ca the CA that signed its certificate? a listener with admin_tls_verify_peer also needs --admin-client-certificates)"))?;
            let request = request.header(hyper::header::AUTHORIZATION, tls.authorization.clone());
            exchange(target, stream, request, method, path, body).await
        }
    }
}

/// One HTTP/1.1 request over `stream`: the reply's status and body.
async fn exchange(
    target: &Target,
    stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    request: hyper::http::request::Builder,
    method: &str,
    path: &str,
    body: String,
) -> anyhow::Result<(u16, Bytes)> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .with_context(|| format!("{target}: HTTP handshake"))?;
    let driver = tokio::spawn(conn);
    let request = request
        .body(Full::new(Bytes::from(body)))
        .context("building the admin request")?;
    let response = sender
        .send_request(request)
        .await
        .with_context(|| format!("{target}: {method} {path}"))?;
    let status = response.status().as_u16();
    let bytes = Limited::new(response.into_body(), REPLY_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| anyhow!("{target}: reading the reply: {e}"))?
        .to_bytes();
    driver.abort();
    Ok((status, bytes))
}

/// The admin socket argument every command shares.
#[derive(Debug, clap::Args)]
pub struct Admin {
    /// The admin socket of the server (`raidkit serve --admin PATH`, or the daemon's), or its
    /// TCP admin listener as https://HOST:PORT (with --admin-token-file and --admin-ca).
    #[arg(long, value_name = "PATH|URL")]
    pub admin: String,

    /// The token of a TCP admin listener (a file only its owner can read).
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,

    /// The CA certificate (PEM) that signed the TCP admin listener's certificate.
    #[arg(long, value_name = "FILE")]
    pub admin_ca: Option<PathBuf>,

    /// DIR/client-cert.pem and DIR/client-key.pem: the client certificate a TCP admin listener
    /// with --admin-tls-verify-peer (admin_tls_verify_peer) requires (libnbd's layout).
    #[arg(long, value_name = "DIR")]
    pub admin_client_certificates: Option<PathBuf>,

    /// The array, when the server (a `raidkit daemon`) serves several.
    #[arg(long, value_name = "NAME")]
    pub array: Option<String>,
}

impl Admin {
    pub fn client(&self) -> anyhow::Result<Client> {
        let target = if self.admin.starts_with("https://") {
            let (token, ca) = (self.admin_token_file.as_deref(), self.admin_ca.as_deref());
            let client = self.admin_client_certificates.as_deref();
            Target::Tls(Box::new(TlsTarget::new(&self.admin, token, ca, client)?))
        } else if self.admin.starts_with("http://") {
            anyhow::bail!(
                "--admin {}: the TCP admin listener speaks TLS only: use https://",
                self.admin
            );
        } else {
            if self.admin_token_file.is_some()
                || self.admin_ca.is_some()
                || self.admin_client_certificates.is_some()
            {
                anyhow::bail!(
                    "--admin-token-file, --admin-ca and --admin-client-certificates are for a \
                     TCP admin listener (--admin https://HOST:PORT); a Unix socket needs none"
                );
            }
            Target::Unix(PathBuf::from(&self.admin))
        };
        Client::to(target, self.array.as_deref())
    }

    /// Whether `--array` named one.
    pub fn names_array(&self) -> bool {
        self.array.is_some()
    }
}

/// `{"arrays": {NAME: status}}` as the server sends it, decoded.
pub fn decode_statuses(all: serde_json::Value) -> anyhow::Result<BTreeMap<String, Status>> {
    let Some(arrays) = all.get("arrays").cloned() else {
        anyhow::bail!("the server's reply has no \"arrays\": {all}");
    };
    serde_json::from_value(arrays).context("the server's statuses do not decode")
}

#[cfg(test)]
mod tests {
    use super::https_address;

    #[test]
    fn https_admin_addresses() {
        let ok = |text: &str, address: &str, host: &str| {
            assert_eq!(
                https_address(text),
                Some((address.to_string(), host.to_string())),
                "{text}"
            );
        };
        ok("https://localhost:9470", "localhost:9470", "localhost");
        ok("https://127.0.0.1:9470/", "127.0.0.1:9470", "127.0.0.1");
        ok("https://[::1]:9470", "[::1]:9470", "::1");
        for bad in [
            "http://localhost:9470",
            "https://localhost",
            "https://:9470",
            "https://localhost:x",
            "https://localhost:9470/v1/status",
        ] {
            assert_eq!(https_address(bad), None, "{bad}");
        }
    }
}
