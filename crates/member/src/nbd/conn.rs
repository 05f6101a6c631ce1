//! One NBD connection in the transmission phase, shared by many threads.
//!
//! Sending: a thread registers its request (cookie → reply channel) and then sends the whole
//! request while it holds the send turn (`State::sending`), so requests never interleave on the
//! wire. Receiving: one reader thread reads simple replies and hands each to the waiter with that
//! cookie. Bounds: at most `max_in_flight` requests are registered; callers wait for a slot.
//! Every wait (slot, send turn, reply) ends at the request's deadline; a missed deadline or any
//! transport error breaks the connection: every waiter fails at once, later requests fail fast.
//! Over TLS (`nbds` URIs) the same, with the session shared as `tls.rs` describes.

use std::collections::HashMap;
use std::io::{self, IoSlice, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nbd_codec::consts::{CMD_DISC, CMD_READ, CMD_WRITE, STRUCTURED_REPLY_MAGIC};
use nbd_codec::{DecodeError, Request, SimpleReply};

use super::handshake::{self, ExportInfo};
use super::stream::Stream;
use super::tls;
use super::uri::NbdAddress;

/// Why a request failed below the member layer.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The server answered with this NBD error number.
    Errno(u32),
    /// The connection is broken (or the deadline passed, which broke it).
    Broken { kind: io::ErrorKind, reason: String },
}

type Reply = Result<Vec<u8>, Failure>;

struct Pending {
    /// Payload bytes expected with a successful reply (reads only).
    read_len: u32,
    /// The reply, and when it came.
    tx: SyncSender<(Reply, Instant)>,
}

impl Pending {
    /// Hands `reply` to the waiter (if it still waits).
    fn answer(&self, reply: Reply) {
        let _ = self.tx.try_send((reply, Instant::now()));
    }
}

#[derive(Default)]
struct State {
    pending: HashMap<u64, Pending>,
    broken: Option<(io::ErrorKind, String)>,
    sending: bool,
}

struct Shared {
    /// The socket (its ciphertext, over TLS).
    stream: Stream,
    /// The TLS session of an `nbds` connection.
    tls: Option<tls::Session>,
    state: Mutex<State>,
    /// Signalled (to all) whenever a slot frees, the send turn is released or the connection
    /// breaks; one condition variable for all three keeps wake-ups simple and never lost.
    changed: Condvar,
    next_cookie: AtomicU64,
    max_in_flight: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // State stays consistent at every unlock point (a panic mid-update is a bug that has
        // already stopped the caller), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the connection broken (first reason wins), fails every waiter, closes the socket.
    fn break_with(&self, kind: io::ErrorKind, reason: String) {
        let mut state = self.lock();
        if state.broken.is_none() {
            state.broken = Some((kind, reason));
        }
        let (kind, reason) = state.broken.clone().unwrap_or((kind, String::new()));
        for (_, p) in state.pending.drain() {
            p.answer(Err(Failure::Broken {
                kind,
                reason: reason.clone(),
            }));
        }
        drop(state);
        self.changed.notify_all();
        self.stream.shutdown();
    }
}

/// A request that was sent and waits for its reply.
pub struct Ticket {
    rx: Receiver<(Reply, Instant)>,
    started: Instant,
    deadline: Instant,
}

/// An NBD connection in the transmission phase.
pub struct Connection {
    shared: Arc<Shared>,
    info: ExportInfo,
    reader: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("info", &self.info)
            .field("broken", &self.broken())
            .finish()
    }
}

impl Connection {
    /// Connects, negotiates (TLS first for an `nbds` address) and starts the reader thread.
    pub fn open(address: &NbdAddress, timeout: Duration, max_in_flight: usize) -> io::Result<Self> {
        assert!(max_in_flight > 0);
        // The certificates are read before connecting: a bad directory is not the server's fault.
        let client = match &address.tls {
            Some(settings) => Some(tls::Client::new(settings, &address.target)?),
            None => None,
        };
        let mut stream = Stream::connect(address, timeout)?;
        stream.set_timeouts(Some(timeout), Some(timeout))?;
        let timed_out = |e: io::Error| match e.kind() {
            // A socket timeout shows as EAGAIN; say what it is.
            io::ErrorKind::WouldBlock => io::Error::new(
                io::ErrorKind::TimedOut,
                format!("handshake took longer than {} ms", timeout.as_millis()),
            ),
            _ => e,
        };
        let greeted = handshake::greet(&mut stream).map_err(timed_out)?;
        let (info, session) = match client {
            None => {
                let info = handshake::choose_export(&mut stream, &address.export, greeted)
                    .map_err(timed_out)?;
                (info, None)
            }
            Some(client) => {
                handshake::start_tls(&mut stream, greeted).map_err(timed_out)?;
                let conn = client.handshake(&mut stream).map_err(timed_out)?;
                let mut over_tls = rustls::StreamOwned::new(conn, stream);
                let info = handshake::choose_export(&mut over_tls, &address.export, greeted)
                    .map_err(|e| timed_out(client.explain(e)))?;
                stream = over_tls.sock;
                (info, Some(Arc::new(Mutex::new(over_tls.conn))))
            }
        };
        stream.set_timeouts(None, Some(timeout))?;
        let mut reader_stream: Box<dyn Read + Send> = match &session {
            None => Box::new(stream.try_clone()?),
            Some(session) => Box::new(tls::Reader::new(stream.try_clone()?, Arc::clone(session))),
        };
        let shared = Arc::new(Shared {
            stream,
            tls: session,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            next_cookie: AtomicU64::new(1),
            max_in_flight,
        });
        let for_reader = Arc::clone(&shared);
        let reader = std::thread::Builder::new()
            .name("nbd-member-reader".into())
            .spawn(move || read_replies(&for_reader, &mut *reader_stream))?;
        Ok(Connection {
            shared,
            info,
            reader: Mutex::new(Some(reader)),
        })
    }

    pub fn info(&self) -> &ExportInfo {
        &self.info
    }

    /// Why the connection is broken, if it is.
    pub fn broken(&self) -> Option<(io::ErrorKind, String)> {
        self.shared.lock().broken.clone()
    }

    /// Requests in flight (for tests and status).
    pub fn in_flight(&self) -> usize {
        self.shared.lock().pending.len()
    }

    /// Registers and sends one request; `payload` only for writes.
    pub fn submit(
        &self,
        cmd: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[&[u8]],
        timeout: Duration,
    ) -> Result<Ticket, Failure> {
        let payload_len: usize = payload.iter().map(|p| p.len()).sum();
        if cmd == CMD_WRITE {
            assert_eq!(payload_len, len as usize, "write payload length");
        } else {
            assert_eq!(payload_len, 0, "only writes carry a payload");
        }
        // The thread's batch deadline applies too: the members of one engine batch are called
        // one after the other, and their deadlines must not add up.
        let started = Instant::now();
        let deadline = crate::detached::call_deadline(started, timeout);
        let read_len = if cmd == CMD_READ { len } else { 0 };
        let (cookie, rx) = self.register(read_len, deadline)?;
        let header = Request {
            flags,
            kind: cmd,
            cookie,
            offset,
            length: len,
        }
        .encode();
        let sent = self.send(&header, payload, deadline);
        let mut state = self.shared.lock();
        assert!(state.sending);
        state.sending = false;
        drop(state);
        self.shared.changed.notify_all();
        if let Err(e) = sent {
            let kind = match e.kind() {
                io::ErrorKind::WouldBlock => io::ErrorKind::TimedOut,
                k => k,
            };
            self.shared
                .break_with(kind, format!("sending a request failed: {e}"));
        }
        Ok(Ticket {
            rx,
            started,
            deadline,
        })
    }

    /// Waits for a slot and the send turn; registers the reply channel. Returns with the send
    /// turn held.
    fn register(
        &self,
        read_len: u32,
        deadline: Instant,
    ) -> Result<(u64, Receiver<(Reply, Instant)>), Failure> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        loop {
            if let Some((_, reason)) = &state.broken {
                return Err(Failure::Broken {
                    kind: io::ErrorKind::NotConnected,
                    reason: format!("not connected ({reason})"),
                });
            }
            if state.pending.len() < shared.max_in_flight && !state.sending {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                drop(state);
                let reason = "timed out waiting to send a request".to_string();
                shared.break_with(io::ErrorKind::TimedOut, reason.clone());
                return Err(Failure::Broken {
                    kind: io::ErrorKind::TimedOut,
                    reason,
                });
            }
            state = shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let cookie = shared.next_cookie.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        let old = state.pending.insert(cookie, Pending { read_len, tx });
        assert!(old.is_none(), "cookie {cookie} reused");
        assert!(state.pending.len() <= shared.max_in_flight);
        state.sending = true;
        Ok((cookie, rx))
    }

    fn send(&self, header: &[u8], payload: &[&[u8]], deadline: Instant) -> io::Result<()> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.shared.stream.set_write_timeout(remaining)?;
        if let Some(session) = &self.shared.tls {
            let bufs: Vec<&[u8]> = std::iter::once(header)
                .chain(payload.iter().copied())
                .collect();
            return tls::send(session, &self.shared.stream, &bufs);
        }
        let mut bufs: Vec<IoSlice<'_>> = std::iter::once(header)
            .chain(payload.iter().copied())
            .map(IoSlice::new)
            .collect();
        self.shared.stream.write_vectored_all(&mut bufs)
    }

    /// Waits for the reply of `ticket` until its deadline; a missed deadline breaks the
    /// connection.
    pub fn wait(&self, ticket: Ticket, timeout: Duration) -> Result<Vec<u8>, Failure> {
        self.wait_timed(ticket, timeout).0
    }

    /// [`Connection::wait`], and how long the request took: until its reply came (not until
    /// it was waited for), or until the wait ended without one.
    pub fn wait_timed(&self, ticket: Ticket, timeout: Duration) -> (Reply, Duration) {
        let started = ticket.started;
        match self.wait_reply(ticket, timeout) {
            Ok((reply, at)) => (reply, at.saturating_duration_since(started)),
            Err(failure) => (Err(failure), started.elapsed()),
        }
    }

    fn wait_reply(&self, ticket: Ticket, timeout: Duration) -> Result<(Reply, Instant), Failure> {
        let remaining = ticket.deadline.saturating_duration_since(Instant::now());
        match ticket.rx.recv_timeout(remaining) {
            Ok(answer) => Ok(answer),
            Err(RecvTimeoutError::Timeout) => {
                let reason = format!("no reply within {} ms", timeout.as_millis());
                self.shared
                    .break_with(io::ErrorKind::TimedOut, reason.clone());
                Err(Failure::Broken {
                    kind: io::ErrorKind::TimedOut,
                    reason,
                })
            }
            Err(RecvTimeoutError::Disconnected) => {
                let (kind, reason) = self.broken().unwrap_or((
                    io::ErrorKind::ConnectionAborted,
                    "connection closed".to_string(),
                ));
                Err(Failure::Broken { kind, reason })
            }
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if self.broken().is_none() {
            // Polite goodbye; best effort, bounded by the write timeout.
            let disconnect = Request {
                flags: 0,
                kind: CMD_DISC,
                cookie: 0,
                offset: 0,
                length: 0,
            };
            let header = disconnect.encode();
            let stream = &self.shared.stream;
            let _ = stream.set_write_timeout(Duration::from_secs(1));
            let _ = match &self.shared.tls {
                Some(session) => tls::send(session, stream, &[&header])
                    .and_then(|()| tls::close(session, stream)),
                None => stream.write_all_shared(&header),
            };
        }
        self.shared
            .break_with(io::ErrorKind::NotConnected, "member closed".to_string());
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = reader {
            let _ = handle.join();
        }
    }
}

/// The reader thread: hands each reply to its waiter until the connection breaks.
fn read_replies(shared: &Shared, stream: &mut dyn Read) {
    loop {
        if let Err((kind, reason)) = read_one_reply(shared, stream) {
            shared.break_with(kind, reason);
            return;
        }
    }
}

fn read_one_reply(shared: &Shared, stream: &mut dyn Read) -> Result<(), (io::ErrorKind, String)> {
    let lost = |e: io::Error| match e.kind() {
        io::ErrorKind::UnexpectedEof => (
            io::ErrorKind::ConnectionAborted,
            "server closed the connection".to_string(),
        ),
        k => (k, format!("connection lost: {e}")),
    };
    let mut header = [0u8; SimpleReply::SIZE];
    stream.read_exact(&mut header).map_err(lost)?;
    let bad = |reason: String| (io::ErrorKind::InvalidData, reason);
    let SimpleReply {
        error: errno,
        cookie,
    } = SimpleReply::decode(&header).map_err(|e| match e {
        DecodeError::BadMagic { found, .. } if found == u64::from(STRUCTURED_REPLY_MAGIC) => {
            bad("protocol error: structured reply that was never negotiated".into())
        }
        e => bad(format!("protocol error: {e}")),
    })?;
    let pending = shared.lock().pending.remove(&cookie);
    shared.changed.notify_all();
    let Some(pending) = pending else {
        return Err(bad(format!(
            "protocol error: reply for unknown cookie {cookie}"
        )));
    };
    if errno != 0 {
        pending.answer(Err(Failure::Errno(errno)));
        return Ok(());
    }
    let mut data = vec![0u8; pending.read_len as usize];
    if let Err(e) = stream.read_exact(&mut data) {
        let (kind, reason) = lost(e);
        let failure = Failure::Broken {
            kind,
            reason: reason.clone(),
        };
        pending.answer(Err(failure));
        return Err((kind, reason));
    }
    // The waiter may have given up (deadline); then the reply is dropped.
    pending.answer(Ok(data));
    Ok(())
}
