//! The operator's side of the admin endpoint (the server is the `admin` crate): one HTTP
//! request per call over the server's Unix socket, with errors that name the socket.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

/// A connection target: the admin socket of one `raidkit serve`.
#[derive(Debug)]
pub struct Client {
    socket: PathBuf,
    /// The array a daemon serving several is asked about (`/v1/arrays/NAME/...`).
    array: Option<String>,
    runtime: tokio::runtime::Runtime,
}

impl Client {
    pub fn new(socket: &Path, array: Option<&str>) -> anyhow::Result<Client> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        Ok(Client {
            socket: socket.to_path_buf(),
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
        let fut = send(&self.socket, method, path, body);
        let (status, bytes) = self
            .runtime
            .block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, fut).await })
            .map_err(|_| {
                anyhow!(
                    "admin socket {}: no reply to {method} {path} within {REQUEST_TIMEOUT:?}",
                    self.socket.display()
                )
            })??;
        let value: Value = serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "admin socket {}: {method} {path}: the reply (HTTP {status}) is not JSON",
                self.socket.display()
            )
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
    socket: &Path,
    method: &str,
    path: &str,
    body: String,
) -> anyhow::Result<(u16, Bytes)> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .with_context(|| {
            format!(
                "cannot reach the admin socket {} (is `raidkit serve --admin {}` running?)",
                socket.display(),
                socket.display()
            )
        })?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .with_context(|| format!("admin socket {}: HTTP handshake", socket.display()))?;
    let driver = tokio::spawn(conn);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, "raidkit")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .context("building the admin request")?;
    let response = sender
        .send_request(request)
        .await
        .with_context(|| format!("admin socket {}: {method} {path}", socket.display()))?;
    let status = response.status().as_u16();
    let bytes = Limited::new(response.into_body(), REPLY_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| anyhow!("admin socket {}: reading the reply: {e}", socket.display()))?
        .to_bytes();
    driver.abort();
    Ok((status, bytes))
}

/// The admin socket argument every command shares.
#[derive(Debug, clap::Args)]
pub struct Admin {
    /// The admin socket of the server (`raidkit serve --admin PATH`, or the daemon's).
    #[arg(long, value_name = "PATH")]
    pub admin: PathBuf,

    /// The array, when the server (a `raidkit daemon`) serves several.
    #[arg(long, value_name = "NAME")]
    pub array: Option<String>,
}

impl Admin {
    pub fn client(&self) -> anyhow::Result<Client> {
        Client::new(&self.admin, self.array.as_deref())
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
