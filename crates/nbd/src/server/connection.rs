//! One client connection: handshake, then the transmission loop.
//!
//! The reader (this task) decodes and validates requests and spawns one task per request;
//! each task runs its export call on the blocking pool and hands the encoded reply to the
//! writer task, which sends whole replies one after another as they complete (so replies go
//! out of order, never interleaved). A per-connection semaphore bounds requests in flight: at
//! the limit the reader stops reading, which pushes back on the client.

use std::fmt;
use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use super::handshake::{self, Outcome};
use super::listener::Stream;
use super::request::{self, Command, Session};
use super::shared::Shared;
use crate::codec::consts::*;
use crate::codec::{DecodeError, Request};

const READ_BUFFER_BYTES: usize = 64 << 10;
const WRITE_BUFFER_BYTES: usize = 256 << 10;

/// Why a connection ended abnormally (logged, never shown to other clients).
#[derive(Debug)]
pub(crate) enum ConnError {
    Io(io::Error),
    Decode(DecodeError),
    Protocol(String),
    HandshakeTimeout,
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnError::Io(e) => write!(f, "I/O error: {e}"),
            ConnError::Decode(e) => write!(f, "malformed message: {e}"),
            ConnError::Protocol(m) => write!(f, "protocol violation: {m}"),
            ConnError::HandshakeTimeout => write!(f, "handshake took too long"),
        }
    }
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        ConnError::Io(e)
    }
}

impl From<DecodeError> for ConnError {
    fn from(e: DecodeError) -> Self {
        ConnError::Decode(e)
    }
}

/// Serves one accepted connection to the end; errors are logged here.
pub(crate) async fn run(stream: Stream, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let result = match stream {
        Stream::Tcp(s) => {
            let (r, w) = s.into_split();
            serve_halves(r, w, shared, stop).await
        }
        Stream::Unix(s) => {
            let (r, w) = s.into_split();
            serve_halves(r, w, shared, stop).await
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

async fn serve_halves<R, W>(
    r: R,
    mut w: W,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut r = BufReader::with_capacity(READ_BUFFER_BYTES, r);
    let timeout = shared.config.handshake_timeout;
    let handshake_stop = stop.clone();
    let negotiation = handshake::run(&mut r, &mut w, &shared, &handshake_stop);
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(timeout, negotiation) => {
            outcome.map_err(|_| ConnError::HandshakeTimeout)??
        }
        _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
    };
    match outcome {
        Outcome::Closed => Ok(()),
        Outcome::Transmission(session) => transmission(r, w, shared, session, stop).await,
    }
}

/// A reply ready to send, with the resources it holds until it is on the wire.
struct Outgoing {
    head: Vec<u8>,
    data: Option<Vec<u8>>,
    _in_flight: OwnedSemaphorePermit,
    _buffer: Option<OwnedSemaphorePermit>,
}

async fn transmission<R, W>(
    mut r: BufReader<R>,
    w: W,
    shared: Arc<Shared>,
    session: Session,
    stop: watch::Receiver<bool>,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let limit = shared.config.max_in_flight_per_conn;
    let (tx, rx) = mpsc::channel::<Outgoing>(limit);
    let writer = tokio::spawn(write_replies(w, rx));
    let in_flight = Arc::new(Semaphore::new(limit));
    let reading = read_requests(&mut r, &shared, &session, &in_flight, &tx, stop).await;
    // Replies of requests in flight are still sent: the writer ends when every sender
    // (ours and the request tasks') is gone.
    drop(tx);
    let writing = writer
        .await
        .map_err(|e| ConnError::Protocol(format!("writer task: {e}")))?;
    reading?;
    writing.map_err(ConnError::Io)
}

async fn read_requests<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    shared: &Arc<Shared>,
    session: &Session,
    in_flight: &Arc<Semaphore>,
    tx: &mpsc::Sender<Outgoing>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConnError> {
    loop {
        // At the in-flight limit this waits (back-pressure), but still honours shutdown.
        let permit = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
            permit = in_flight.clone().acquire_owned() => permit.expect("never closed"),
        };
        let mut header = [0u8; Request::SIZE];
        tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
            read = r.read_exact(&mut header) => { read?; }
        }
        let request = Request::decode(&header)?;
        match request::validate(&request, session) {
            Ok(Command::Disconnect) => return Ok(()),
            Ok(command) => dispatch(r, shared, session, request, command, permit, tx).await?,
            Err(refusal) => {
                if request.payload_len() > 0 {
                    discard(r, request.payload_len()).await?;
                }
                let head = request::error_reply(
                    request.cookie,
                    refusal.errno,
                    refusal.message,
                    session.structured,
                );
                let out = Outgoing {
                    head,
                    data: None,
                    _in_flight: permit,
                    _buffer: None,
                };
                if tx.send(out).await.is_err() {
                    return Ok(()); // The writer failed: the connection is gone.
                }
            }
        }
    }
}

/// Reads a write payload (if any) and spawns the request's task.
async fn dispatch<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    shared: &Arc<Shared>,
    session: &Session,
    request: Request,
    command: Command,
    permit: OwnedSemaphorePermit,
    tx: &mpsc::Sender<Outgoing>,
) -> Result<(), ConnError> {
    let buffer_bytes = match command {
        Command::Read { length, .. } | Command::Write { length, .. } => u64::from(length),
        _ => 0,
    };
    let buffer = match buffer_bytes {
        0 => None,
        n => Some(shared.reserve_buffer(n).await),
    };
    let payload = match command {
        Command::Write { length, .. } => read_payload(r, length).await?,
        _ => Vec::new(),
    };
    // The slot bounds export calls over all connections; waiting for one pushes back here.
    let slot = shared
        .blocking
        .clone()
        .acquire_owned()
        .await
        .expect("never closed");
    let (shared, tx, structured) = (shared.clone(), tx.clone(), session.structured);
    tokio::task::spawn_blocking(move || {
        let (head, data) = run_command(&shared, request, command, payload, structured);
        drop(slot);
        let out = Outgoing {
            head,
            data,
            _in_flight: permit,
            _buffer: buffer,
        };
        // A send error means the writer is gone with the connection: nothing to do.
        let _ = tx.blocking_send(out);
    });
    Ok(())
}

/// Runs one command on the export (on a blocking thread) and encodes its reply. A panic in
/// the export is reported to the client as `NBD_EIO` and logged.
fn run_command(
    shared: &Shared,
    request: Request,
    command: Command,
    payload: Vec<u8>,
    structured: bool,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let export = &*shared.export;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        request::execute(export, shared.size, command, payload)
    }));
    let cookie = request.cookie;
    match result {
        Ok(Ok(done)) => request::success_reply(cookie, request.offset, done, structured),
        Ok(Err(e)) => (request::io_error_reply(cookie, &e, structured), None),
        Err(_) => {
            log::error!("nbd: export call for {command:?} panicked");
            let head = request::error_reply(cookie, EIO, "internal server error", structured);
            (head, None)
        }
    }
}

/// Reads exactly `length` payload bytes into one buffer, without zero-filling it first.
async fn read_payload<R: AsyncRead + Unpin>(r: &mut R, length: u32) -> io::Result<Vec<u8>> {
    let length = length as usize;
    let mut buf = Vec::with_capacity(length);
    while buf.len() < length {
        let want = (length - buf.len()) as u64;
        if (&mut *r).take(want).read_buf(&mut buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    assert_eq!(buf.len(), length);
    Ok(buf)
}

/// Skips the payload of a refused write so the stream stays in step.
async fn discard<R: AsyncRead + Unpin>(r: &mut R, length: u32) -> io::Result<()> {
    let skipped =
        tokio::io::copy(&mut (&mut *r).take(length.into()), &mut tokio::io::sink()).await?;
    if skipped < u64::from(length) {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Sends replies in completion order, coalescing small ones into one write.
async fn write_replies<W: AsyncWrite + Unpin>(
    w: W,
    mut rx: mpsc::Receiver<Outgoing>,
) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, w);
    while let Some(first) = rx.recv().await {
        write_one(&mut w, first).await?;
        while let Ok(next) = rx.try_recv() {
            write_one(&mut w, next).await?;
        }
        w.flush().await?;
    }
    w.shutdown().await
}

async fn write_one<W: AsyncWrite + Unpin>(w: &mut BufWriter<W>, out: Outgoing) -> io::Result<()> {
    w.write_all(&out.head).await?;
    if let Some(data) = &out.data {
        // Large data bypasses the buffer (BufWriter writes it straight through).
        w.write_all(data).await?;
    }
    Ok(())
}
