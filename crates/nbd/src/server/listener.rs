//! TCP or Unix-domain listening sockets, and the URI clients use to reach them.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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

    /// Listens on a Unix socket at `path`, which must not exist. Must run inside a runtime.
    pub fn bind_unix(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
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
        match &self.inner {
            Inner::Tcp(l) => match l.local_addr() {
                Ok(SocketAddr::V6(a)) => format!("nbd://[{}]:{}/{export_name}", a.ip(), a.port()),
                Ok(a) => format!("nbd://{a}/{export_name}"),
                Err(_) => format!("nbd://?/{export_name}"),
            },
            Inner::Unix { path, .. } => {
                format!("nbd+unix:///{export_name}?socket={}", path.display())
            }
        }
    }

    pub(crate) async fn accept(&self) -> io::Result<Stream> {
        match &self.inner {
            Inner::Tcp(l) => {
                let (stream, _) = l.accept().await?;
                // Nagle's algorithm delays small replies behind large ones; the spec asks
                // servers to disable it.
                stream.set_nodelay(true)?;
                Ok(Stream::Tcp(stream))
            }
            Inner::Unix { listener, .. } => Ok(Stream::Unix(listener.accept().await?.0)),
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
