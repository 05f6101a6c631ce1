//! The transmission phase of one connection, on blocking threads (the nbdkit model).
//!
//! Each of the connection's request threads loops: take the reader lock, read one request
//! (header and write payload) from the buffered socket, let go of the lock, run the export
//! call, and write the reply under the writer lock. A request therefore never changes thread:
//! no task spawn, no channel, no wake-up of another thread on its way, which on a 2-core
//! machine is most of the cost of a small request. Replies still go out as requests complete
//! (out of order), whole (one `writev` per reply, under the writer lock).
//!
//! Threads are started lazily: one at first, another whenever a thread takes a request and
//! none is left waiting for the next, up to `max_in_flight_per_conn`. The thread count is
//! thus the number of requests in flight, and at the limit nobody reads, which pushes back on
//! the client. Export calls over all connections are bounded by `Shared::blocking`, buffer
//! bytes by `Shared::buffers`.
//!
//! Idle: with an idle timeout, a connection with no request in flight that took none for that
//! long is stopped as below and ends with `ConnError::Idle` (a request read but refused counts
//! as activity; a request whose header or payload is still arriving does not).
//!
//! Replies: with a reply timeout, a reply write that makes no progress for that long (the
//! client reads none of it: each blocked `writev` waits until the socket buffer has room again)
//! fails and cuts the connection, so a client that sends requests and never reads the replies
//! cannot hold buffer budget and request threads for ever.
//!
//! Stopping: `Conn::stop_reading` makes every thread stop taking requests (a `shutdown(Read)`
//! wakes the one blocked in `recv`); requests already read are answered; the last thread out
//! reports to the async side. A client error (bad magic, truncated request, a failed reply
//! write) stops the connection the same way.

use std::io::{self, BufRead, BufReader, IoSlice, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::buffers::Buffer;
use super::conn_error::ConnError;
use super::exports::Selected;
use super::gate::Permit;
use super::request::{self, Command, Session};
use super::shared::Shared;
use crate::codec::consts::*;
use crate::codec::Request;
use crate::qos::Admitted;

const READ_BUFFER_BYTES: usize = 64 << 10;

/// A connected socket in blocking mode.
pub(crate) enum Socket {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Socket {
    fn try_clone(&self) -> io::Result<Socket> {
        Ok(match self {
            Socket::Tcp(s) => Socket::Tcp(s.try_clone()?),
            Socket::Unix(s) => Socket::Unix(s.try_clone()?),
        })
    }

    fn set_write_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(limit),
            Socket::Unix(s) => s.set_write_timeout(limit),
        }
    }

    fn shutdown(&self, how: Shutdown) {
        // NotConnected once the peer is gone: nothing left to shut.
        let _ = match self {
            Socket::Tcp(s) => s.shutdown(how),
            Socket::Unix(s) => s.shutdown(how),
        };
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            Socket::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            Socket::Unix(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write_vectored(bufs),
            Socket::Unix(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The listener's limits on a connection in transmission.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// No request in flight and none taken for this long ends the connection.
    pub idle: Option<Duration>,
    /// A reply write that makes no progress for this long (the client takes none of it) ends
    /// the connection (`SO_SNDTIMEO` on the socket the replies are written to).
    pub reply: Option<Duration>,
}

/// Bytes already read past the handshake, then the socket.
type Input = BufReader<io::Chain<io::Cursor<Vec<u8>>, Socket>>;

/// Thread accounting: `busy <= threads <= max_in_flight_per_conn`.
struct Counts {
    threads: usize,
    busy: usize,
    /// When a request was last taken or answered (for the idle timeout).
    last_active: Instant,
    done: Option<oneshot::Sender<()>>,
}

/// One connection in transmission, shared by its request threads.
struct Conn {
    shared: Arc<Shared>,
    session: Session,
    reader: Mutex<Input>,
    writer: Mutex<Socket>,
    /// For shutdowns from outside the locks.
    control: Socket,
    /// No more requests are taken (stop, disconnect, client error).
    stopping: AtomicBool,
    counts: Mutex<Counts>,
    /// The first error that ended the connection.
    error: Mutex<Option<ConnError>>,
    /// Set on the writer: a reply write stalled this long fails.
    reply_timeout: Option<Duration>,
}

/// What one turn at the reader produced.
enum Next<'a> {
    Work {
        request: Request,
        command: Command,
        payload: Buffer,
        /// A write's buffer budget, taken before its payload was read.
        budget: Option<Permit<'a>>,
        /// The export's QoS admission, taken before the payload was read.
        admitted: Option<Admitted<'a>>,
    },
    /// A refused request (its payload skipped): the error reply to send.
    Refused(Vec<u8>),
    End,
}

/// Serves requests on `socket` until the client disconnects, a client error, the export's
/// stop (removed, or the listener shutting down), `limits.idle` passing with no request in
/// flight and none taken, or a reply write stalled for `limits.reply`; then answers the requests already read and returns. `selected`
/// holds the export for as long as the connection lives.
pub(crate) async fn serve(
    socket: Socket,
    leftover: Vec<u8>,
    selected: Selected,
    session: Session,
    limits: Limits,
) -> Result<(), ConnError> {
    let mut stop = selected.shared.stop.subscribe();
    let (done_tx, mut done_rx) = oneshot::channel();
    let shared = Arc::clone(&selected.shared);
    let conn = Arc::new(Conn::new(
        socket, leftover, shared, session, limits, done_tx,
    )?);
    let _cut = CutOnDrop(Arc::clone(&conn));
    if let Err(e) = Conn::start_thread(&conn) {
        conn.lock_counts().threads = 0;
        return Err(ConnError::Io(e));
    }
    let mut idled = None;
    let stopped = tokio::select! {
        _ = &mut done_rx => false,
        _ = stop.wait_for(|stopped| *stopped) => true,
        limit = idle_for(&conn, limits.idle) => {
            idled = Some(limit);
            true
        }
    };
    if stopped {
        conn.stop_reading();
        // Replies a client does not read would hold the stop (and an export's drain) forever:
        // after the grace the connection is cut, so writes blocked on it fail; export calls
        // still running end by themselves (members have deadlines) and are waited for.
        let grace = selected.shared.config.shutdown_grace;
        if tokio::time::timeout(grace, &mut done_rx).await.is_err() {
            log::warn!(
                "nbd: a connection to export {:?} still had replies to send {grace:?} after \
                 its stop; cutting it",
                selected.shared.config.export_name
            );
            conn.cut();
            let _ = done_rx.await;
        }
    }
    let error = conn.error.lock().unwrap_or_else(|p| p.into_inner()).take();
    match (error, idled) {
        (Some(e), _) => Err(e),
        (None, Some(limit)) => Err(ConnError::Idle(limit)),
        (None, None) => Ok(()),
    }
}

/// Completes (with the limit) once `conn` has had no request in flight and taken none for
/// `limit`; never without a limit.
async fn idle_for(conn: &Conn, limit: Option<Duration>) -> Duration {
    let Some(limit) = limit else {
        return std::future::pending().await;
    };
    loop {
        let idle_since = conn.idle_since();
        let wake = match idle_since {
            Some(since) if since.elapsed() >= limit => return limit,
            Some(since) => since + limit,
            None => Instant::now() + limit,
        };
        tokio::time::sleep_until(wake.into()).await;
    }
}

/// If the async side is dropped before the threads finish (shutdown grace exceeded), cuts
/// the connection so that threads blocked on the socket end.
struct CutOnDrop(Arc<Conn>);

impl Drop for CutOnDrop {
    fn drop(&mut self) {
        if self.0.lock_counts().threads > 0 {
            self.0.cut();
        }
    }
}

impl Conn {
    fn new(
        socket: Socket,
        leftover: Vec<u8>,
        shared: Arc<Shared>,
        session: Session,
        limits: Limits,
        done: oneshot::Sender<()>,
    ) -> io::Result<Conn> {
        let writer = socket.try_clone()?;
        // The socket option is shared by every handle of the socket; only writes use it.
        writer.set_write_timeout(limits.reply)?;
        let control = socket.try_clone()?;
        let input = io::Cursor::new(leftover).chain(socket);
        Ok(Conn {
            shared,
            session,
            reader: Mutex::new(BufReader::with_capacity(READ_BUFFER_BYTES, input)),
            writer: Mutex::new(writer),
            control,
            stopping: AtomicBool::new(false),
            counts: Mutex::new(Counts {
                threads: 1,
                busy: 0,
                last_active: Instant::now(),
                done: Some(done),
            }),
            error: Mutex::new(None),
            reply_timeout: limits.reply,
        })
    }

    fn lock_counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Since when no request has been in flight (`None`: one is).
    fn idle_since(&self) -> Option<Instant> {
        let counts = self.lock_counts();
        (counts.busy == 0).then_some(counts.last_active)
    }

    /// A request answered: it counts as activity and is no longer in flight.
    fn finished_request(&self) {
        let mut counts = self.lock_counts();
        counts.busy -= 1;
        counts.last_active = Instant::now();
    }

    /// Starts a request thread, already counted in `counts.threads`.
    fn start_thread(conn: &Arc<Conn>) -> io::Result<()> {
        let conn = Arc::clone(conn);
        std::thread::Builder::new()
            .name("nbd-request".into())
            .spawn(move || conn.run_thread())
            .map(drop)
    }

    /// Stops the connection both ways: threads blocked on the socket end.
    fn cut(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.control.shutdown(Shutdown::Both);
    }

    fn stop_reading(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.control.shutdown(Shutdown::Read);
    }

    /// Records the first error and stops the connection (both directions on a write error).
    fn fail(&self, e: ConnError, both: bool) {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
        self.stopping.store(true, Ordering::SeqCst);
        let how = if both { Shutdown::Both } else { Shutdown::Read };
        self.control.shutdown(how);
    }

    fn run_thread(self: Arc<Self>) {
        if let Some(nice) = self.shared.config.thread_nice {
            // Checked when the export was configured (`check_thread_nice`); a failure here
            // leaves the thread at the process's niceness, said once per process.
            if let Err(e) = super::config::set_thread_nice(nice) {
                static SAID: AtomicBool = AtomicBool::new(false);
                if !SAID.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "nbd: export {:?}: cannot set its request threads' niceness to {nice}: \
                         {e}; they run at the process's",
                        self.shared.config.export_name
                    );
                }
            }
        }
        loop {
            match self.next() {
                Next::End => break,
                Next::Refused(head) => {
                    self.send(&head, None);
                    self.lock_counts().last_active = Instant::now();
                }
                Next::Work {
                    request,
                    command,
                    payload,
                    budget,
                    admitted,
                } => {
                    self.took_request();
                    self.work(request, command, payload, budget);
                    if let Some(admitted) = admitted {
                        // After the reply: the latency a protected export records, and the
                        // pause a throttled one takes (its slot held, its client waiting).
                        admitted.finish();
                    }
                    self.finished_request();
                }
            }
        }
        self.thread_exit();
    }

    /// Counts this thread busy; starts another if none is left to read the next request.
    fn took_request(self: &Arc<Self>) {
        let mut counts = self.lock_counts();
        counts.busy += 1;
        counts.last_active = Instant::now();
        assert!(counts.busy <= counts.threads);
        let grow = counts.busy == counts.threads
            && counts.threads < self.shared.config.max_in_flight_per_conn
            && !self.stopping.load(Ordering::SeqCst);
        if !grow {
            return;
        }
        counts.threads += 1;
        drop(counts);
        if let Err(e) = Conn::start_thread(self) {
            log::warn!("nbd: cannot start another request thread: {e}");
            self.lock_counts().threads -= 1;
        }
    }

    fn thread_exit(&self) {
        let mut counts = self.lock_counts();
        assert!(counts.threads > counts.busy);
        counts.threads -= 1;
        if counts.threads == 0 {
            if let Some(done) = counts.done.take() {
                let _ = done.send(());
            }
        }
    }

    /// One turn at the reader: the next request, or the end of the connection.
    fn next(&self) -> Next<'_> {
        let mut input = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        if self.stopping.load(Ordering::SeqCst) {
            return Next::End;
        }
        match self.read_request(&mut input) {
            Ok(next) => {
                if matches!(next, Next::End) {
                    self.stop_reading();
                }
                next
            }
            Err(e) => {
                // Shut down for a stop while blocked in recv: not the client's fault.
                if !self.stopping.load(Ordering::SeqCst) {
                    self.fail(e, false);
                }
                Next::End
            }
        }
    }

    fn read_request(&self, input: &mut Input) -> Result<Next<'_>, ConnError> {
        let mut header = [0u8; Request::SIZE];
        input.read_exact(&mut header)?;
        let request = Request::decode(&header)?;
        let command = match request::validate(&request, &self.session) {
            Ok(Command::Disconnect) => return Ok(Next::End),
            Ok(command) => command,
            Err(refusal) => {
                discard(input, request.payload_len())?;
                let head = request::error_reply(
                    request.cookie,
                    refusal.errno,
                    refusal.message,
                    self.session.structured,
                );
                return Ok(Next::Refused(head));
            }
        };
        // A throttled export's request waits here, before its payload is read: its connection
        // reads nothing more meanwhile, so its client is held back too.
        let admitted =
            (self.shared.config.qos.as_ref()).map(|class| class.admit(data_bytes(&command)));
        let (payload, budget) = match command {
            Command::Write { length, .. } => {
                // Within the buffer budget before the bytes arrive (pushes back on reading).
                let budget = self.shared.reserve_buffer(length);
                let mut payload = self.shared.pool.take(length as usize);
                if let Err(e) = input.read_exact(&mut payload) {
                    self.shared.pool.give(payload);
                    return Err(e.into());
                }
                (payload, Some(budget))
            }
            _ => (Buffer::default(), None),
        };
        Ok(Next::Work {
            request,
            command,
            payload,
            budget,
            admitted,
        })
    }

    /// Runs one command within the server's bounds and sends its reply.
    fn work(&self, request: Request, command: Command, payload: Buffer, budget: Option<Permit>) {
        let shared = &*self.shared;
        let _buffer = match command {
            Command::Read { length, .. } => Some(shared.reserve_buffer(length)),
            _ => budget,
        };
        let slot = shared.blocking.acquire(1);
        let structured = self.session.structured;
        let (head, data) = run_command(shared, request, command, &payload, structured);
        drop(slot);
        shared.pool.give(payload);
        self.send(&head, data.as_deref());
        if let Some(data) = data {
            shared.pool.give(data);
        }
    }

    /// Writes one whole reply; a failure ends the connection.
    fn send(&self, head: &[u8], data: Option<&[u8]>) {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = write_all_parts(&mut *w, head, data.unwrap_or(&[])) {
            drop(w);
            let stalled = matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            );
            let error = match self.reply_timeout {
                Some(limit) if stalled => ConnError::ReplyTimeout(limit),
                _ => ConnError::Io(e),
            };
            self.fail(error, true);
        }
    }
}

/// Runs one command on the export and encodes its reply. A panic in the export is reported to
/// the client as `NBD_EIO` and logged.
fn run_command(
    shared: &Shared,
    request: Request,
    command: Command,
    payload: &Buffer,
    structured: bool,
) -> (Vec<u8>, Option<Buffer>) {
    let export = &*shared.export;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        request::execute(export, &shared.pool, shared.size, command, payload)
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

/// The bytes a request moves over the connection, as a bandwidth cap counts them (a read's
/// or a write's length; nothing for the others).
fn data_bytes(command: &Command) -> u64 {
    match command {
        Command::Read { length, .. } | Command::Write { length, .. } => u64::from(*length),
        _ => 0,
    }
}

/// Skips the payload of a refused write so the stream stays in step.
fn discard(input: &mut Input, length: u32) -> io::Result<()> {
    let mut left = length as usize;
    while left > 0 {
        let available = input.fill_buf()?.len();
        if available == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let n = available.min(left);
        input.consume(n);
        left -= n;
    }
    Ok(())
}

/// Writes `head` then `data` with as few system calls as the socket allows (one `writev`
/// when the socket buffer has room).
fn write_all_parts(w: &mut impl Write, head: &[u8], data: &[u8]) -> io::Result<()> {
    let mut parts = [IoSlice::new(head), IoSlice::new(data)];
    let mut rest = &mut parts[..];
    IoSlice::advance_slices(&mut rest, 0);
    while !rest.is_empty() {
        match w.write_vectored(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most `step` bytes per call.
    struct Trickle {
        out: Vec<u8>,
        step: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.step);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.step - n);
                self.out.extend_from_slice(&b[..take]);
                n += take;
                if n == self.step {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_vectored_writes_send_every_byte_in_order() {
        let head: Vec<u8> = (0..16u8).collect();
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        for step in [1, 3, 16, 17, 999, 5000] {
            let mut w = Trickle {
                out: Vec::new(),
                step,
            };
            write_all_parts(&mut w, &head, &data).unwrap();
            assert_eq!(w.out[..16], head[..], "step {step}");
            assert_eq!(w.out[16..], data[..], "step {step}");
        }
        let mut w = Trickle {
            out: Vec::new(),
            step: 4,
        };
        write_all_parts(&mut w, &head, &[]).unwrap();
        assert_eq!(w.out, head);
    }
}
