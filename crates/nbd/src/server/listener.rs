//! TCP or Unix-domain listening sockets, and the URI clients use to reach them.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use socket2::SockRef;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// Where [`serve`](super::serve) accepts connections. A Unix socket file created by
/// [`Listener::bind_unix`] is removed when the listener is dropped.
#[derive(Debug)]
pub struct Listener {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Tcp(TcpListener),
    Unix {
        listener: UnixListener,
        path: PathBuf,
    },
}

/// Where a [`Listener`] is reached, kept after the listener itself went to its server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Address {
    /// The NBD URI of `export_name` here (`nbd://host:port/name` or
    /// `nbd+unix:///name?socket=path`).
    pub fn uri(&self, export_name: &str) -> String {
        match self {
            Address::Tcp(SocketAddr::V6(a)) => {
                format!("nbd://[{}]:{}/{export_name}", a.ip(), a.port())
            }
            Address::Tcp(a) => format!("nbd://{a}/{export_name}"),
            Address::Unix(path) => format!("nbd+unix:///{export_name}?socket={}", path.display()),
        }
    }
}

/// An accepted connection.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Listener {
    /// Listens on a TCP address (use port 0 for any free port). Must run inside a runtime.
    pub async fn bind_tcp(addr: SocketAddr) -> io::Result<Self> {
        Ok(Listener {
            inner: Inner::Tcp(TcpListener::bind(addr).await?),
        })
    }

    /// Listens on a Unix socket at `path`. Must run inside a runtime.
    ///
    /// A socket file left behind by a server that died (nothing accepts on it) is replaced, as
    /// an operator would do by hand after `kill -9`. A live socket (another server answers) or
    /// any other kind of file at `path` is refused with `AddrInUse`/`AlreadyExists`.
    pub fn bind_unix(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        remove_stale_socket(&path)?;
        let listener = UnixListener::bind(&path)?;
        Ok(Listener {
            inner: Inner::Unix { listener, path },
        })
    }

    /// Wraps an already bound TCP listener.
    pub fn from_tcp(listener: TcpListener) -> Self {
        Listener {
            inner: Inner::Tcp(listener),
        }
    }

    /// The TCP address, if this is a TCP listener.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match &self.inner {
            Inner::Tcp(l) => l.local_addr().ok(),
            Inner::Unix { .. } => None,
        }
    }

    /// The Unix socket path, if this is a Unix listener.
    pub fn unix_path(&self) -> Option<&Path> {
        match &self.inner {
            Inner::Tcp(_) => None,
            Inner::Unix { path, .. } => Some(path),
        }
    }

    /// The NBD URI of `export_name` on this listener (`nbd://host:port/name` or
    /// `nbd+unix:///name?socket=path`).
    pub fn uri(&self, export_name: &str) -> String {
        match self.address() {
            Some(address) => address.uri(export_name),
            None => format!("nbd://?/{export_name}"),
        }
    }

    /// Where clients reach this listener (`None`: its TCP address cannot be read).
    pub fn address(&self) -> Option<Address> {
        match &self.inner {
            Inner::Tcp(l) => l.local_addr().ok().map(Address::Tcp),
            Inner::Unix { path, .. } => Some(Address::Unix(path.clone())),
        }
    }

    /// The next connection, with its peer's address if it is a TCP one.
    pub(crate) async fn accept(&self) -> io::Result<(Stream, Option<SocketAddr>)> {
        match &self.inner {
            Inner::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                // Nagle's algorithm delays small replies behind large ones; the spec asks
                // servers to disable it.
                stream.set_nodelay(true)?;
                set_send_buffer(&stream);
                Ok((Stream::Tcp(stream), Some(peer)))
            }
            Inner::Unix { listener, .. } => {
                let stream = listener.accept().await?.0;
                set_send_buffer(&stream);
                Ok((Stream::Unix(stream), None))
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Inner::Unix { path, .. } = &self.inner {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Removes `path` if it is a Unix socket nobody listens on; leaves everything else alone.
fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            ),
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "{} is in use: another server accepts connections on it",
                path.display()
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path),
        Err(e) => Err(e),
    }
}

/// Send buffer asked for on every connection (the kernel doubles it for bookkeeping and caps
/// it at `net.core.wmem_max`). The default (~208 KiB) is a fifth of a 1 MiB read reply: the
/// request thread then sleeps and is woken about ten times per reply while the client drains
/// the socket. With 1 MiB, 1 MiB sequential reads went from 5.0 to 7.1 GB/s (-15 % server
/// CPU per request) on a Unix socket, measured in docs/PERFORMANCE.md. Kernel memory, charged
/// only while replies wait for the client.
const SEND_BUFFER_BYTES: usize = 1 << 20;

/// Raises the socket's send buffer; a refusal only costs speed, so it is logged, not fatal.
fn set_send_buffer(socket: &impl AsFd) {
    if let Err(e) = SockRef::from(socket).set_send_buffer_size(SEND_BUFFER_BYTES) {
        log::debug!("nbd: cannot raise the socket send buffer: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn stale_socket_is_replaced_live_one_and_plain_file_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nbd.sock");
        runtime().block_on(async {
            // A socket whose listener is gone: what `kill -9` leaves behind.
            drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
            assert!(path.exists());
            let live = Listener::bind_unix(&path).expect("stale socket replaced");

            let err = Listener::bind_unix(&path).expect_err("live socket must not be stolen");
            assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
            drop(live);

            let file = dir.path().join("not-a-socket");
            std::fs::write(&file, b"keep me").expect("write");
            let err = Listener::bind_unix(&file).expect_err("plain file refused");
            assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
            assert_eq!(std::fs::read(&file).expect("read"), b"keep me");
        });
    }

    #[test]
    fn accepted_connections_get_the_larger_send_buffer() {
        let wmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
            .expect("read wmem_max")
            .trim()
            .parse()
            .expect("wmem_max is a number");
        // Linux doubles the value asked for, capped by wmem_max.
        let expected = 2 * SEND_BUFFER_BYTES.min(wmem_max);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nbd.sock");
        runtime().block_on(async {
            let listener = Listener::bind_unix(&path).expect("bind");
            let _client = UnixStream::connect(&path).await.expect("connect");
            let (Stream::Unix(accepted), None) = listener.accept().await.expect("accept") else {
                panic!("a Unix listener accepted a TCP stream");
            };
            let size = SockRef::from(&accepted)
                .send_buffer_size()
                .expect("SO_SNDBUF");
            assert_eq!(size, expected, "wmem_max {wmem_max}");
        });
    }
}
