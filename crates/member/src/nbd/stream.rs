//! The socket under an NBD member's connection: TCP or Unix, with the few calls the connection
//! and its TLS session make on it.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::uri::{NbdAddress, NbdTarget};

/// A TCP or Unix stream.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Connects to `address` within `timeout` (TCP; Unix connects do not block).
    pub fn connect(address: &NbdAddress, timeout: Duration) -> io::Result<Stream> {
        match &address.target {
            NbdTarget::Tcp { host, port } => {
                let mut last = None;
                for addr in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&addr, timeout) {
                        Ok(s) => {
                            s.set_nodelay(true)?;
                            return Ok(Stream::Tcp(s));
                        }
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address"))
                }))
            }
            NbdTarget::Unix { path } => connect_unix(path).map(Stream::Unix),
        }
    }

    pub fn try_clone(&self) -> io::Result<Stream> {
        match self {
            Stream::Tcp(s) => s.try_clone().map(Stream::Tcp),
            Stream::Unix(s) => s.try_clone().map(Stream::Unix),
        }
    }

    pub fn set_timeouts(&self, read: Option<Duration>, write: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(read).and(s.set_write_timeout(write)),
            Stream::Unix(s) => s.set_read_timeout(read).and(s.set_write_timeout(write)),
        }
    }

    pub(super) fn set_write_timeout(&self, write: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(Some(write)),
            Stream::Unix(s) => s.set_write_timeout(Some(write)),
        }
    }

    pub(super) fn shutdown(&self) {
        // Errors mean the socket is already shut down or gone: either way it is closed.
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// Writes all of `buf` through a shared reference (the socket's own `Write for &Socket`).
    pub fn write_all_shared(&self, buf: &[u8]) -> io::Result<()> {
        self.write_vectored_all(&mut [IoSlice::new(buf)])
    }

    pub(super) fn write_vectored_all(&self, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
        while !bufs.is_empty() {
            let n = match self {
                Stream::Tcp(s) => (&*s).write_vectored(bufs),
                Stream::Unix(s) => (&*s).write_vectored(bufs),
            };
            match n {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn connect_unix(path: &std::path::Path) -> io::Result<UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    match bytes.strip_prefix(b"\0") {
        Some(name) => {
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            UnixStream::connect_addr(&addr)
        }
        None => UnixStream::connect(path),
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
