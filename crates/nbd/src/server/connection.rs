//! One client connection: the handshake on the async runtime (cheap, bounded by a timeout
//! and by shutdown), then the socket goes back to blocking mode and the transmission phase
//! runs on the connection's own request threads (see `transmission`).
//!
//! After STARTTLS the TLS session lives on the async side (tokio-rustls): its transmission
//! phase runs on the same request threads over one end of a Unix socket pair, and a relay
//! task moves the bytes between the other end and the TLS stream. Plaintext connections are
//! untouched by this: their request threads still read and write the client's socket.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;

use super::conn_error::ConnError;
use super::exports::Selected;
use super::handshake::{self, Outcome};
use super::listener::Stream;
use super::request::Session;
use super::transmission::{self, Socket};
use super::Listening;

/// Large enough for any option; bytes read past the handshake are handed to transmission.
const HANDSHAKE_BUFFER_BYTES: usize = 64 << 10;

/// Buffer of the TLS relay, each way: a 1 MiB reply crosses it in a few pieces.
const RELAY_BUFFER_BYTES: usize = 256 << 10;

/// Serves one accepted connection (from `peer`, if it is a TCP one) to the end; errors are
/// logged here.
pub(crate) async fn run(
    stream: Stream,
    peer: Option<SocketAddr>,
    listening: Arc<Listening>,
    stop: watch::Receiver<bool>,
) {
    let result = match stream {
        Stream::Tcp(s) => {
            let into_socket = |s: tokio::net::TcpStream| {
                let s = s.into_std()?;
                s.set_nonblocking(false)?;
                Ok(Socket::Tcp(s))
            };
            serve_stream(s, into_socket, listening, stop).await
        }
        Stream::Unix(s) => {
            let into_socket = |s: tokio::net::UnixStream| {
                let s = s.into_std()?;
                s.set_nonblocking(false)?;
                Ok(Socket::Unix(s))
            };
            serve_stream(s, into_socket, listening, stop).await
        }
    };
    let from = match peer {
        Some(peer) => format!(" from {peer}"),
        None => String::new(),
    };
    match result {
        Ok(()) => log::debug!("nbd: connection{from} closed"),
        Err(ConnError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
            log::debug!("nbd: client{from} closed the connection")
        }
        Err(e) => log::warn!("nbd: closing connection{from}: {e}"),
    }
}

/// Where the negotiation left the connection.
enum Ready<S> {
    Closed,
    Plain(S, Vec<u8>, Selected, Session),
    Tls(Box<TlsStream<S>>, Vec<u8>, Selected, Session),
}

/// Negotiates (bounded by the handshake timeout and by shutdown), then serves transmission:
/// on the blocking socket `into_socket` makes of the stream, or through the TLS relay.
async fn serve_stream<S>(
    stream: S,
    into_socket: impl FnOnce(S) -> io::Result<Socket>,
    listening: Arc<Listening>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let timeout = listening.config.handshake_timeout;
    let handshake_stop = stop.clone();
    let negotiation = negotiate(stream, &listening, &handshake_stop);
    let ready = tokio::select! {
        ready = tokio::time::timeout(timeout, negotiation) => {
            ready.map_err(|_| ConnError::HandshakeTimeout(timeout))??
        }
        _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
    };
    let limits = transmission::Limits {
        idle: listening.config.idle_timeout,
        reply: listening.config.reply_timeout,
    };
    match ready {
        Ready::Closed => Ok(()),
        Ready::Plain(stream, leftover, selected, session) => {
            let socket = into_socket(stream)?;
            transmission::serve(socket, leftover, selected, session, limits).await
        }
        Ready::Tls(tls, leftover, selected, session) => {
            serve_tls(*tls, leftover, selected, session, limits).await
        }
    }
}

async fn negotiate<S>(
    stream: S,
    listening: &Listening,
    stop: &watch::Receiver<bool>,
) -> Result<Ready<S>, ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (r, mut w) = tokio::io::split(stream);
    let mut r = BufReader::with_capacity(HANDSHAKE_BUFFER_BYTES, r);
    let no_zeroes = handshake::greet(&mut r, &mut w).await?;
    match handshake::options(&mut r, &mut w, listening, stop, no_zeroes, false).await? {
        Outcome::Closed => Ok(Ready::Closed),
        Outcome::Transmission(selected, session) => {
            let leftover = r.buffer().to_vec();
            let stream = r.into_inner().unsplit(w);
            Ok(Ready::Plain(stream, leftover, selected, session))
        }
        Outcome::StartTls => {
            if !r.buffer().is_empty() {
                return Err(ConnError::Protocol(
                    "client sent data after NBD_OPT_STARTTLS before its reply".into(),
                ));
            }
            let Some(tls) = &listening.config.tls else {
                unreachable!("STARTTLS is acknowledged only with TLS configured")
            };
            let stream = r.into_inner().unsplit(w);
            let tls = tls.acceptor.accept(stream).await.map_err(ConnError::Tls)?;
            let (r, mut w) = tokio::io::split(tls);
            let mut r = BufReader::with_capacity(HANDSHAKE_BUFFER_BYTES, r);
            match handshake::options(&mut r, &mut w, listening, stop, no_zeroes, true).await? {
                Outcome::Closed => {
                    let _ = w.shutdown().await;
                    Ok(Ready::Closed)
                }
                Outcome::StartTls => unreachable!("a second STARTTLS is refused"),
                Outcome::Transmission(selected, session) => {
                    let leftover = r.buffer().to_vec();
                    let tls = r.into_inner().unsplit(w);
                    Ok(Ready::Tls(Box::new(tls), leftover, selected, session))
                }
            }
        }
    }
}

/// Transmission over TLS: the request threads serve one end of a socket pair; this task
/// relays between the other end and the TLS stream until the threads closed their end (all
/// replies sent) or either side failed.
async fn serve_tls<S>(
    tls: TlsStream<S>,
    leftover: Vec<u8>,
    selected: Selected,
    session: Session,
    limits: transmission::Limits,
) -> Result<(), ConnError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    theirs.set_nonblocking(true)?;
    let theirs = tokio::net::UnixStream::from_std(theirs)?;
    let (pair_r, mut pair_w) = theirs.into_split();
    let (tls_r, mut tls_w) = tokio::io::split(tls);
    let mut pair_r = BufReader::with_capacity(RELAY_BUFFER_BYTES, pair_r);
    let mut tls_r = BufReader::with_capacity(RELAY_BUFFER_BYTES, tls_r);
    // Replies: until the request threads closed their end, then close_notify to the client.
    let down = async {
        let copied = tokio::io::copy_buf(&mut pair_r, &mut tls_w).await;
        let _ = tls_w.shutdown().await;
        copied
    };
    // Requests: until the client closes, then end of input for the request threads.
    let up = async {
        let _ = tokio::io::copy_buf(&mut tls_r, &mut pair_w).await;
        let _ = pair_w.shutdown().await;
        std::future::pending::<()>().await
    };
    let relay = async {
        tokio::select! {
            copied = down => copied,
            _ = up => unreachable!("the request direction never ends the relay"),
        }
    };
    let served = transmission::serve(Socket::Unix(ours), leftover, selected, session, limits);
    let (served, relayed) = tokio::join!(served, relay);
    if let Err(e) = relayed {
        log::debug!("nbd: TLS relay ended: {e}");
    }
    served
}
