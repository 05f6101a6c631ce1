//! The admin HTTP server on a Unix socket.
//!
//! Bounds: at most [`CONNECTIONS_MAX`] connections at once (more are answered 503 and closed),
//! request bodies of at most [`BODY_BYTES_MAX`] (413), headers within
//! [`HEADER_READ_TIMEOUT`], and a whole connection within [`CONNECTION_TIMEOUT`]. Handlers run
//! on tokio's blocking pool, so a slow member operation (opening a remote member) never stalls
//! the runtime that serves NBD. A panicking handler becomes a 500 reply.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
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

use super::api::{self, ApiError, Request};

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
    /// that is gone (nothing accepts on it), which is removed first.
    pub fn bind(path: &Path) -> io::Result<AdminSocket> {
        remove_stale(path)?;
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
fn remove_stale(path: &Path) -> io::Result<()> {
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
            eprintln!(
                "raidkit: removing stale admin socket {} (no server listens on it)",
                path.display()
            );
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

/// Serves the admin API until `shutdown` completes, then returns (connections in progress are
/// dropped). Must run inside a tokio runtime.
pub async fn serve(
    socket: &AdminSocket,
    control: Arc<dyn Control>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let listener = tokio::net::UnixListener::from_std(socket.listener.try_clone()?)?;
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    eprintln!("raidkit: admin socket: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            tokio::spawn(refuse_busy(stream));
            continue;
        };
        let control = Arc::clone(&control);
        tokio::spawn(async move {
            let _permit = permit;
            serve_connection(stream, control).await;
        });
    }
}

async fn serve_connection(stream: tokio::net::UnixStream, control: Arc<dyn Control>) {
    let service = service_fn(move |req| handle(req, Arc::clone(&control)));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(BODY_BYTES_MAX)
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.is_incomplete_message() => {}
        Ok(Err(e)) => eprintln!("raidkit: admin connection: {e}"),
        Err(_) => eprintln!("raidkit: admin connection closed after {CONNECTION_TIMEOUT:?}"),
    }
}

/// Answers a connection over the bound with 503 and closes it.
async fn refuse_busy(mut stream: tokio::net::UnixStream) {
    let body = json!({"error": format!("too many admin connections (at most {CONNECTIONS_MAX})")})
        .to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(reply.as_bytes())).await;
}

async fn handle(
    req: HttpRequest<Incoming>,
    control: Arc<dyn Control>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let result = match read_body(req.into_body()).await {
        Ok(body) => match api::parse(&method, &path, &body) {
            Ok(request) => run(control, request).await,
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    Ok(reply(result))
}

async fn read_body(body: Incoming) -> Result<Bytes, ApiError> {
    match Limited::new(body, BODY_BYTES_MAX).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::new(
            413,
            format!("request body over {BODY_BYTES_MAX} bytes"),
        )),
        Err(e) => Err(ApiError::bad_request(format!(
            "cannot read the request body: {e}"
        ))),
    }
}

async fn run(control: Arc<dyn Control>, request: Request) -> Result<Value, ApiError> {
    let joined = tokio::task::spawn_blocking(move || control.handle(request)).await;
    joined.unwrap_or_else(|e| Err(ApiError::new(500, format!("admin handler failed: {e}"))))
}

fn reply(result: Result<Value, ApiError>) -> Response<Full<Bytes>> {
    let (status, body) = match result {
        Ok(value) => (200, value),
        Err(e) => (e.status, json!({ "error": e.message })),
    };
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
