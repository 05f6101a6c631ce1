//! One client connection: the handshake on the async runtime (cheap, bounded by a timeout
//! and by shutdown), then the socket goes back to blocking mode and the transmission phase
//! runs on the connection's own request threads (see `transmission`).

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::watch;

use super::conn_error::ConnError;
use super::handshake::{self, Outcome};
use super::listener::Stream;
use super::transmission::{self, Socket};
use super::Listening;

/// Large enough for any option; bytes read past the handshake are handed to transmission.
const HANDSHAKE_BUFFER_BYTES: usize = 64 << 10;

/// Serves one accepted connection to the end; errors are logged here.
pub(crate) async fn run(stream: Stream, listening: Arc<Listening>, stop: watch::Receiver<bool>) {
    let result = match stream {
        Stream::Tcp(s) => {
            let (r, w) = s.into_split();
            let into_socket = |r: tokio::net::tcp::OwnedReadHalf, w| {
                let s = r.reunite(w).map_err(io::Error::other)?.into_std()?;
                s.set_nonblocking(false)?;
                Ok(Socket::Tcp(s))
            };
            serve_halves(r, w, into_socket, listening, stop).await
        }
        Stream::Unix(s) => {
            let (r, w) = s.into_split();
            let into_socket = |r: tokio::net::unix::OwnedReadHalf, w| {
                let s = r.reunite(w).map_err(io::Error::other)?.into_std()?;
                s.set_nonblocking(false)?;
                Ok(Socket::Unix(s))
            };
            serve_halves(r, w, into_socket, listening, stop).await
        }
    };
    match result {
        Ok(()) => log::debug!("nbd: connection closed"),
        Err(ConnError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
            log::debug!("nbd: client closed the connection")
        }
        Err(e) => log::warn!("nbd: closing connection: {e}"),
    }
}

/// Negotiates on the async halves, then serves transmission on the blocking socket that
/// `into_socket` makes of them (with the bytes already buffered past the handshake).
async fn serve_halves<R, W>(
    r: R,
    mut w: W,
    into_socket: impl FnOnce(R, W) -> io::Result<Socket>,
    listening: Arc<Listening>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut r = BufReader::with_capacity(HANDSHAKE_BUFFER_BYTES, r);
    let timeout = listening.config.handshake_timeout;
    let handshake_stop = stop.clone();
    let negotiation = handshake::run(&mut r, &mut w, &listening, &handshake_stop);
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(timeout, negotiation) => {
            outcome.map_err(|_| ConnError::HandshakeTimeout)??
        }
        _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
    };
    let (selected, session) = match outcome {
        Outcome::Closed => return Ok(()),
        Outcome::Transmission(selected, session) => (selected, session),
    };
    let leftover = r.buffer().to_vec();
    let socket = into_socket(r.into_inner(), w)?;
    transmission::serve(socket, leftover, selected, session).await
}
