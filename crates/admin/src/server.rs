//! The admin HTTP server on a Unix socket, for the arrays in an [`Arrays`].
//!
//! Bounds: at most [`CONNECTIONS_MAX`] connections at once (more are answered 503 and closed),
//! request bodies of at most [`BODY_BYTES_MAX`] (413), headers within
//! [`HEADER_READ_TIMEOUT`], and a whole connection within [`CONNECTION_TIMEOUT`]. Handlers run
//! on tokio's blocking pool, so a slow member operation (opening a remote member) never stalls
//! the runtime that serves NBD. A panicking handler becomes a 500 reply.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request as HttpRequest, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

use crate::api::{self, ApiError, ProcessRequest, Request};
use crate::status::Status;
use crate::Log;

/// Admin connections served at once.
pub const CONNECTIONS_MAX: usize = 8;
/// Largest request body accepted.
pub const BODY_BYTES_MAX: usize = 64 * 1024;
/// Time allowed to send the request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest life of one connection (a `/v1/wait` blocks at most `api::WAIT_SECS_MAX`).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(120);

/// What the admin API acts on. `handle` is called on a blocking thread and may block.
pub trait Control: Send + Sync + 'static {
    fn handle(&self, request: Request) -> Result<Value, ApiError>;

    /// The array's counters and status now (what the metrics listener encodes). Default: a
    /// control that keeps no counters.
    fn snapshot(&self) -> Result<crate::stats::Snapshot, ApiError> {
        Err(ApiError::new(404, "this array keeps no I/O counters"))
    }
}

/// Raises a `TestMessage` alert for each array named and answers what was sent (a daemon's
/// alerter; `POST /v1/monitor/test`). Called on a blocking thread.
pub type TestAlerts = Box<dyn Fn(&[String]) -> Result<Value, ApiError> + Send + Sync>;

/// Re-reads the daemon's configuration file and applies it, answering what changed or (422)
/// the file's problems (`POST /v1/reload`). Called on a blocking thread; may block long (arrays
/// started and drained).
pub type Reload = Box<dyn Fn() -> Result<Value, ApiError> + Send + Sync>;

/// The arrays one admin socket serves, by name (`/v1/arrays/NAME/...`); a path without a
/// name addresses the only one. Arrays may be added and removed while the socket serves.
#[derive(Default)]
pub struct Arrays {
    by_name: RwLock<BTreeMap<String, Arc<dyn Control>>>,
    /// Set by a process that raises alerts (the daemon); `serve` has none.
    test_alerts: OnceLock<TestAlerts>,
    /// Set by a process that reads a configuration file (the daemon).
    reload: OnceLock<Reload>,
}

impl Arrays {
    /// Serves `control` as array `name`; false (and nothing changes) if the name is taken.
    pub fn insert(&self, name: &str, control: Arc<dyn Control>) -> bool {
        let mut by_name = self.by_name.write().unwrap_or_else(|e| e.into_inner());
        if by_name.contains_key(name) {
            return false;
        }
        by_name.insert(name.to_string(), control);
        true
    }

    /// Stops serving array `name` (requests already running finish).
    pub fn remove(&self, name: &str) -> Option<Arc<dyn Control>> {
        let mut by_name = self.by_name.write().unwrap_or_else(|e| e.into_inner());
        by_name.remove(name)
    }

    /// Answers `POST /v1/monitor/test` with `raise` from now on (once; false if already set).
    pub fn set_test_alerts(&self, raise: TestAlerts) -> bool {
        self.test_alerts.set(raise).is_ok()
    }

    /// Answers `POST /v1/reload` with `reload` from now on (once; false if already set).
    pub fn set_reload(&self, reload: Reload) -> bool {
        self.reload.set(reload).is_ok()
    }

    /// The names and controls of every array, in name order.
    pub fn all(&self) -> Vec<(String, Arc<dyn Control>)> {
        let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        by_name
            .iter()
            .map(|(name, control)| (name.clone(), Arc::clone(control)))
            .collect()
    }

    /// Every array's status by name, as `GET /v1/arrays` serves them, decoded; may block as a
    /// status request may.
    pub fn statuses(&self) -> Result<BTreeMap<String, Status>, ApiError> {
        let mut statuses = BTreeMap::new();
        for (name, control) in self.all() {
            let value = control.handle(Request::Status)?;
            let status = serde_json::from_value(value).map_err(|e| {
                ApiError::new(
                    500,
                    format!("the status of array {name:?} does not decode: {e}"),
                )
            })?;
            statuses.insert(name, status);
        }
        Ok(statuses)
    }

    /// A request about the whole process; may block (run on a blocking thread).
    fn handle_process(&self, request: ProcessRequest) -> Result<Value, ApiError> {
        let arrays = self.all();
        match request {
            ProcessRequest::AllStatus => {
                let mut statuses = serde_json::Map::new();
                for (name, control) in arrays {
                    statuses.insert(name, control.handle(Request::Status)?);
                }
                Ok(json!({ "arrays": statuses }))
            }
            ProcessRequest::TestAlerts => {
                let raise = self.test_alerts.get().ok_or_else(|| {
                    ApiError::new(
                        404,
                        "this server raises no alerts (`raidkit serve` has none: alerts are \
                         `raidkit daemon`'s [alerts])",
                    )
                })?;
                if arrays.is_empty() {
                    return Err(ApiError::new(503, "no array is served here"));
                }
                let names: Vec<String> = arrays.into_iter().map(|(name, _)| name).collect();
                raise(&names)
            }
            ProcessRequest::Reload => {
                let reload = self.reload.get().ok_or_else(|| {
                    ApiError::new(
                        404,
                        "this server reads no configuration file to reload (`raidkit serve` \
                         takes flags; reload is `raidkit daemon`'s)",
                    )
                })?;
                reload()
            }
        }
    }

    /// The control of the array a request names, or of the only one.
    pub fn pick(&self, name: Option<&str>) -> Result<Arc<dyn Control>, ApiError> {
        let by_name = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        if let Some(name) = name {
            return (by_name.get(name).cloned())
                .ok_or_else(|| ApiError::new(404, format!("no array {name:?} is served here")));
        }
        let mut arrays = by_name.values();
        match (arrays.next(), arrays.next()) {
            (Some(only), None) => Ok(Arc::clone(only)),
            (None, _) => Err(ApiError::new(503, "no array is served here")),
            (Some(_), Some(_)) => {
                let names: Vec<&str> = by_name.keys().map(String::as_str).collect();
                Err(ApiError::bad_request(format!(
                    "{} arrays are served here ({}): name one (raidkit --array NAME; {}NAME/status)",
                    names.len(),
                    names.join(", "),
                    api::ARRAY_PATH_PREFIX
                )))
            }
        }
    }
}

/// The bound admin socket. The socket file is created with mode 0600 and removed on drop (if
/// it is still the one we created).
pub struct AdminSocket {
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    inode: u64,
}

impl AdminSocket {
    /// Binds `path` with mode 0600. The path must not exist, except as the socket of a server
    /// that is gone (nothing accepts on it), which is removed first (and logged).
    pub fn bind(path: &Path, log: &Log) -> io::Result<AdminSocket> {
        remove_stale(path, log)?;
        let listener = bind_private(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        let meta = path.symlink_metadata()?;
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.mode() & 0o077, 0, "admin socket readable by others");
        listener.set_nonblocking(true)?;
        Ok(AdminSocket {
            listener,
            path: path.to_path_buf(),
            inode: meta.ino(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Removes `path` if it is a socket nobody listens on (left by a killed server); refuses any
/// other existing file.
fn remove_stale(path: &Path, log: &Log) -> io::Result<()> {
    let Ok(meta) = path.symlink_metadata() else {
        return Ok(());
    };
    let exists = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already exists ({why})", path.display()),
        ))
    };
    if !meta.file_type().is_socket() {
        return exists("not a socket; remove it or choose another path");
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => exists("another server is listening on it"),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            log(&format!(
                "removing stale admin socket {} (no server listens on it)",
                path.display()
            ));
            std::fs::remove_file(path)
        }
        Err(e) => exists(&format!("cannot tell whether it is in use: {e}")),
    }
}

/// Binds with a umask that leaves no access for group and others, so the socket is never
/// reachable by them, not even between bind and chmod.
fn bind_private(path: &Path) -> io::Result<std::os::unix::net::UnixListener> {
    // SAFETY: umask only swaps the process file-mode mask; it cannot fail. Files created by
    // other threads meanwhile get stricter permissions, never looser ones.
    let old = unsafe { libc::umask(0o177) };
    let result = std::os::unix::net::UnixListener::bind(path);
    // SAFETY: as above; restores the previous mask.
    unsafe { libc::umask(old) };
    result
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        let ours = self
            .path
            .symlink_metadata()
            .is_ok_and(|m| m.ino() == self.inode && m.file_type().is_socket());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Serves the admin API of `arrays` until `shutdown` completes, then returns (connections in
/// progress are dropped). Must run inside a tokio runtime.
pub async fn serve(
    socket: &AdminSocket,
    arrays: Arc<Arrays>,
    log: Log,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let listener = tokio::net::UnixListener::from_std(socket.listener.try_clone()?)?;
    let accept = || async { listener.accept().await.map(|(stream, _)| stream) };
    let served = |stream| {
        let arrays = Arc::clone(&arrays);
        let log = Arc::clone(&log);
        async move {
            let service = move |req| handle(req, Arc::clone(&arrays));
            serve_http(stream, service, &log).await
        }
    };
    accept_bounded(
        accept,
        CONNECTIONS_MAX,
        "admin",
        &log,
        shutdown,
        served,
        refuse_busy,
    )
    .await;
    Ok(())
}

/// Accepts connections until `shutdown`, at most `max` served at once (more are handed to
/// `refuse` with a message naming `what` and the bound), each served by `serve` on a task of
/// its own; at `shutdown` the connections still open are dropped (their sockets closed) before
/// it returns.
pub(crate) async fn accept_bounded<S, A, F, R>(
    accept: impl Fn() -> A,
    max: usize,
    what: &str,
    log: &Log,
    shutdown: impl Future<Output = ()>,
    serve: impl Fn(S) -> F,
    refuse: impl Fn(S, String) -> R,
) where
    A: Future<Output = io::Result<S>>,
    S: Send + 'static,
    F: Future<Output = ()> + Send + 'static,
    R: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(max));
    // The connections being served (at most `max`, finished ones reaped as they end): at
    // shutdown each is dropped, which closes its socket, so no admin client keeps a
    // connection (and its requests) to a server that has stopped.
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => {
                connections.abort_all();
                while connections.join_next().await.is_some() {}
                return;
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = accept() => match accepted {
                Ok(stream) => stream,
                Err(e) => {
                    log(&format!("{what} listener: accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            let busy = format!("too many {what} connections (at most {max})");
            tokio::spawn(refuse(stream, busy));
            continue;
        };
        let served = serve(stream);
        connections.spawn(async move {
            let _permit = permit;
            served.await;
        });
    }
}

/// Serves the HTTP/1.1 requests of one admin connection with `service`, bounded in header
/// time, buffer size and the connection's life.
pub(crate) async fn serve_http<IO, S, F>(stream: IO, service: S, log: &Log)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: Fn(HttpRequest<Incoming>) -> F + Send + 'static,
    F: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let service = service_fn(service);
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(BODY_BYTES_MAX)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.is_incomplete_message() => {}
        Ok(Err(e)) => log(&format!("admin connection: {e}")),
        Err(_) => log(&format!(
            "admin connection closed after {CONNECTION_TIMEOUT:?}"
        )),
    }
}

/// Answers a connection over the bound with 503 (`message`) and closes it.
pub(crate) async fn refuse_busy(mut stream: impl tokio::io::AsyncWrite + Unpin, message: String) {
    let body = json!({ "error": message }).to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(reply.as_bytes())).await;
}

pub(crate) async fn handle(
    req: HttpRequest<Incoming>,
    arrays: Arc<Arrays>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let result = match read_body(req.into_body(), BODY_BYTES_MAX).await {
        Ok(body) => answer(&arrays, &method, &path, &body).await,
        Err(e) => Err(e),
    };
    Ok(reply(result))
}

/// Parses the request, then hands it to its array's control.
async fn answer(
    arrays: &Arc<Arrays>,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Value, ApiError> {
    if let Some(request) = api::parse_process(method, path) {
        let (arrays, request) = (Arc::clone(arrays), request?);
        return blocking(move || arrays.handle_process(request)).await;
    }
    let (array, endpoint) = api::route(path);
    let request = api::parse(method, &endpoint, body)?;
    run(arrays.pick(array)?, request).await
}

/// The whole request body, at most `max` bytes (413 past it, 400 if it cannot be read).
pub(crate) async fn read_body(body: Incoming, max: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::new(413, format!("request body over {max} bytes")))
        }
        Err(e) => Err(ApiError::bad_request(format!(
            "cannot read the request body: {e}"
        ))),
    }
}

async fn run(control: Arc<dyn Control>, request: Request) -> Result<Value, ApiError> {
    blocking(move || control.handle(request)).await
}

/// Runs a handler on tokio's blocking pool; a panic becomes a 500.
async fn blocking(
    handler: impl FnOnce() -> Result<Value, ApiError> + Send + 'static,
) -> Result<Value, ApiError> {
    let joined = tokio::task::spawn_blocking(handler).await;
    joined.unwrap_or_else(|e| Err(ApiError::new(500, format!("admin handler failed: {e}"))))
}

fn reply(result: Result<Value, ApiError>) -> Response<Full<Bytes>> {
    let (status, body) = match result {
        Ok(value) => (200, value),
        Err(e) => (e.status, json!({ "error": e.message })),
    };
    http_response(status, "application/json", body.to_string())
}

/// An HTTP response: `status` (500 if not a status), `content_type` and `body`.
pub(crate) fn http_response(
    status: u16,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every request with its name.
    struct Named(&'static str);

    impl Control for Named {
        fn handle(&self, _request: Request) -> Result<Value, ApiError> {
            Ok(json!({ "array": self.0 }))
        }
    }

    fn answered_by(arrays: &Arrays, name: Option<&str>) -> Result<Value, ApiError> {
        arrays.pick(name)?.handle(Request::Status)
    }

    #[test]
    fn a_request_goes_to_the_array_it_names_or_the_only_one() {
        let arrays = Arrays::default();
        assert_eq!(answered_by(&arrays, None).unwrap_err().status, 503);
        assert!(arrays.insert("home", Arc::new(Named("home"))));
        assert_eq!(answered_by(&arrays, None).unwrap()["array"], "home");
        assert!(
            !arrays.insert("home", Arc::new(Named("other"))),
            "name taken"
        );
        assert!(arrays.insert("media", Arc::new(Named("media"))));
        let several = answered_by(&arrays, None).unwrap_err();
        assert_eq!(several.status, 400);
        assert!(several.message.contains("home, media"), "{several}");
        assert_eq!(
            answered_by(&arrays, Some("media")).unwrap()["array"],
            "media"
        );
        assert_eq!(answered_by(&arrays, Some("nope")).unwrap_err().status, 404);
        assert!(arrays.remove("media").is_some());
        assert_eq!(answered_by(&arrays, None).unwrap()["array"], "home");
    }

    #[test]
    fn process_requests_cover_every_array() {
        let arrays = Arrays::default();
        assert!(arrays.insert("media", Arc::new(Named("media"))));
        assert!(arrays.insert("home", Arc::new(Named("home"))));
        let all = arrays.handle_process(ProcessRequest::AllStatus).unwrap();
        assert_eq!(
            all,
            json!({"arrays": {"home": {"array": "home"}, "media": {"array": "media"}}})
        );
        // `serve` raises no alerts: refused, and says why.
        let refused = arrays
            .handle_process(ProcessRequest::TestAlerts)
            .unwrap_err();
        assert_eq!(refused.status, 404);
        assert!(refused.message.contains("raidkit daemon"), "{refused}");
        let raise: TestAlerts = Box::new(|names| Ok(json!({ "sent": names })));
        assert!(arrays.set_test_alerts(raise));
        assert!(!arrays.set_test_alerts(Box::new(|_| Ok(json!({})))));
        let sent = arrays.handle_process(ProcessRequest::TestAlerts).unwrap();
        assert_eq!(sent, json!({"sent": ["home", "media"]}));
        let empty = Arrays::default();
        assert!(empty.set_test_alerts(Box::new(|_| Ok(json!({})))));
        let none = empty
            .handle_process(ProcessRequest::TestAlerts)
            .unwrap_err();
        assert_eq!(none.status, 503);
    }
}
