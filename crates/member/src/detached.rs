//! [`Detached`]: a local member whose system calls run on worker threads the caller can leave
//! behind. A file or block device stuck inside `pread`/`pwrite`/`fdatasync` (a dying disk, a
//! hung NFS or FUSE file) cannot be interrupted; the caller waits for the call's deadline
//! instead, gets `ErrorKind::TimedOut`, and the call is *abandoned*: its worker stays stuck
//! until the kernel returns, then exits.
//!
//! Soundness: a call that may be abandoned owns everything it touches. A read fills a buffer
//! the call owns and the caller copies it out only after the call returned; a write copies its
//! data in first. No borrowed slice ever reaches a worker.
//!
//! Bounds: at most [`STUCK_MAX`] abandoned calls still stuck per member; once there, every
//! call fails at once ("the device does not answer"). Workers are started on demand, at most
//! [`WORKERS_MAX`] per member (stuck ones included); beyond, calls wait in a queue within their
//! deadline. After the first abandoned call the member is *wedged*: every later call fails at
//! once, and one still queued is skipped, so nothing is written to it again even if the stuck
//! call later returns (the engine marks the member faulty at the same deadline), and no other
//! request waits a timeout of its own on a device already known not to answer.
//!
//! The deadline of a call is the earlier of its own start + the member's timeout and the
//! calling thread's request deadline ([`with_deadline`]; at least a quarter of the timeout from
//! the call's start): the engine sets one deadline for all the member calls of a request, which
//! it runs one after the other, so members stalled in the same request time out together.
//! Work a request hands to other threads carries its deadline along ([`carry_deadline`]).

use crate::Member;
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Abandoned calls still stuck in the kernel per member at most; at the bound every call to the
/// member fails at once.
pub const STUCK_MAX: usize = 8;
/// Worker threads per member at most, stuck ones included.
pub const WORKERS_MAX: usize = 64;
/// An idle worker exits after this long without work.
const IDLE_EXIT: Duration = Duration::from_secs(10);
/// Buffers kept for reuse per member, and the largest one kept.
const POOL_BUFFERS_MAX: usize = 8;
const POOL_BUFFER_BYTES_MAX: usize = 8 << 20;

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` with `deadline` as the latest end of every [`Detached`] call made on this thread
/// (nested calls keep the earlier deadline).
pub fn with_deadline<R>(deadline: Instant, f: impl FnOnce() -> R) -> R {
    let previous = DEADLINE.with(|d| d.get());
    let effective = previous.map_or(deadline, |p| p.min(deadline));
    DEADLINE.with(|d| d.set(Some(effective)));
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEADLINE.with(|d| d.set(self.0));
        }
    }
    let _restore = Restore(previous);
    f()
}

/// The calling thread's deadline ([`with_deadline`]), if any: work this thread hands to other
/// threads must carry it along (a thread-local does not follow): see [`carry_deadline`].
pub fn current_deadline() -> Option<Instant> {
    DEADLINE.with(|d| d.get())
}

/// Wraps `f`, to be run on another thread (a scoped thread writing one member's superblock or
/// bitmap block), so that it runs under the calling thread's deadline: a member stalled in
/// work a request fans out then costs that request no more than its own deadline.
pub fn carry_deadline<R>(f: impl FnOnce() -> R) -> impl FnOnce() -> R {
    let deadline = current_deadline();
    move || match deadline {
        Some(deadline) => with_deadline(deadline, f),
        None => f(),
    }
}

/// The deadline of a member call that starts at `started` with its own `timeout`, under the
/// calling thread's batch deadline ([`with_deadline`]): the earlier of the two, but at least a
/// quarter of the timeout from the start (so a healthy member called after a stalled one of the
/// same batch still has time to answer). Used by [`Detached`] calls and NBD requests alike.
pub(crate) fn call_deadline(started: Instant, timeout: Duration) -> Instant {
    let own = started + timeout;
    match DEADLINE.with(|d| d.get()) {
        None => own,
        Some(batch) => own.min(batch.max(started + timeout / 4)),
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A member call to start ahead of waiting for it ([`Member::start`]).
#[derive(Debug, Clone, Copy)]
pub enum StartCall<'a> {
    /// Reads `len` bytes at `offset`; [`Started::finish`] hands them over.
    Read {
        offset: u64,
        len: u64,
    },
    /// Writes `bufs` one after the other from `offset` on (copied when the call starts).
    Write {
        offset: u64,
        bufs: &'a [&'a [u8]],
    },
    Trim {
        offset: u64,
        len: u64,
    },
    WriteZeroes {
        offset: u64,
        len: u64,
    },
    Flush,
}

impl StartCall<'_> {
    /// The bytes the call touches (`None` for a flush).
    pub fn range(&self) -> Option<(u64, u64)> {
        match *self {
            StartCall::Read { offset, len }
            | StartCall::Trim { offset, len }
            | StartCall::WriteZeroes { offset, len } => Some((offset, len)),
            StartCall::Write { offset, bufs } => {
                Some((offset, crate::vectored_len(bufs.iter().map(|b| b.len()))))
            }
            StartCall::Flush => None,
        }
    }

    /// The same call `by` bytes further on (a window's view of its inner member).
    pub fn moved(mut self, by: u64) -> Self {
        match &mut self {
            StartCall::Read { offset, .. }
            | StartCall::Write { offset, .. }
            | StartCall::Trim { offset, .. }
            | StartCall::WriteZeroes { offset, .. } => *offset += by,
            StartCall::Flush => {}
        }
        self
    }
}

type Finish = Box<dyn FnOnce(&mut dyn FnMut(&[u8])) -> (io::Result<()>, Duration) + Send>;

/// A member call [`Member::start`] started on another thread. [`Started::finish`] waits for
/// it (until its deadline); one dropped unfinished is waited for all the same (its result is
/// dropped), so nothing is left running that its owner does not know about.
#[must_use = "a started call is waited for by finish"]
pub struct Started(Option<Finish>);

impl Started {
    /// A started call whose end `finish` waits for, handing a read's bytes to its argument,
    /// and returning the result and how long the call took.
    pub fn new(
        finish: impl FnOnce(&mut dyn FnMut(&[u8])) -> (io::Result<()>, Duration) + Send + 'static,
    ) -> Self {
        Started(Some(Box::new(finish)))
    }

    /// A call that failed to start: `finish` returns `e`.
    pub fn failed(e: io::Error) -> Self {
        Started::new(move |_| (Err(e), Duration::ZERO))
    }

    /// Waits for the call; a read hands its bytes to `out` (once). Returns the call's result
    /// and how long it took from its start until it returned (or was abandoned): not the time
    /// it waited for `finish` after it returned.
    pub fn finish(mut self, out: &mut dyn FnMut(&[u8])) -> (io::Result<()>, Duration) {
        let finish = self.0.take().expect("a started call is finished once");
        finish(out)
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(finish) = self.0.take() {
            let _ = finish(&mut |_| {});
        }
    }
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Started")
    }
}

/// What a worker or the member's wedging tells a waiting caller.
enum Message<T> {
    /// The call returned, at this instant.
    Done(io::Result<T>, Instant),
    /// Another call to the member was abandoned: this one is not waited for any more.
    Wedged,
}

/// What a call does, for the bounds and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    DurableWrite,
    Flush,
    Trim,
    WriteZeroes,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::DurableWrite => "durable write",
            Kind::Flush => "flush",
            Kind::Trim => "trim",
            Kind::WriteZeroes => "write-zeroes",
        }
    }
}

#[derive(Default)]
struct State {
    /// Jobs no worker has taken yet.
    queue: VecDeque<Job>,
    /// The callers waiting for a call (queued or running), by call number: woken when the
    /// member wedges. At most one per caller thread waiting.
    waiting: HashMap<u64, Box<dyn FnOnce() + Send>>,
    next_call: u64,
    threads: usize,
    /// Workers waiting for a job and not yet woken.
    idle: usize,
    /// Abandoned calls still stuck.
    stuck: usize,
    /// Calls abandoned since the member was opened.
    abandoned_total: u64,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    work: Condvar,
    /// Set at the first abandoned call: no write-type call runs any more.
    wedged: AtomicBool,
    pool: Mutex<Vec<Vec<u8>>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take_buffer(&self, len: usize) -> Vec<u8> {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = pool.pop().unwrap_or_default();
        drop(pool);
        buf.resize(len, 0);
        buf
    }

    fn recycle(&self, buf: Vec<u8>) {
        if buf.capacity() > POOL_BUFFER_BYTES_MAX {
            return;
        }
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < POOL_BUFFERS_MAX {
            pool.push(buf);
        }
    }
}

/// A member whose calls run on worker threads and can be abandoned at their deadline. See the
/// module docs.
#[derive(Debug)]
pub struct Detached {
    inner: Arc<dyn Member>,
    timeout: Duration,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Shared")
            .field("threads", &state.threads)
            .field("stuck", &state.stuck)
            .finish()
    }
}

impl Detached {
    /// Wraps `inner`; a call not returned within `timeout` (or the thread's batch deadline)
    /// fails with `ErrorKind::TimedOut` and is abandoned.
    pub fn new(inner: Arc<dyn Member>, timeout: Duration) -> Detached {
        assert!(timeout > Duration::ZERO);
        Detached {
            inner,
            timeout,
            shared: Arc::new(Shared::default()),
        }
    }

    /// Abandoned calls still stuck in the kernel, and calls abandoned in all.
    pub fn abandoned(&self) -> (usize, u64) {
        let state = self.shared.lock();
        (state.stuck, state.abandoned_total)
    }

    fn refuse(&self, kind: Kind, state: &State) -> Option<io::Error> {
        let name = self.inner.name();
        let what = kind.name();
        if state.stuck >= STUCK_MAX {
            return Some(io::Error::other(format!(
                "member {name}: {what} refused: {} calls are stuck in the kernel (abandoned, at \
                 most {STUCK_MAX}); the device does not answer: replace it",
                state.stuck
            )));
        }
        if state.abandoned_total > 0 {
            return Some(wedged_error(name, kind));
        }
        None
    }

    /// Runs `f` on a worker and waits for it until the deadline, or until another call to the
    /// member is abandoned (the member wedges: nothing waits for it any more).
    fn call<T: Send + 'static>(
        &self,
        kind: Kind,
        f: impl FnOnce(&dyn Member) -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        self.begin(kind, f)?.wait()
    }

    /// Hands `f` to a worker and returns at once; the deadline is set now, from the calling
    /// thread's request deadline.
    fn begin<T: Send + 'static>(
        &self,
        kind: Kind,
        f: impl FnOnce(&dyn Member) -> io::Result<T> + Send + 'static,
    ) -> io::Result<Pending<T>> {
        let started = Instant::now();
        let deadline = self.deadline(started);
        // Room for the result and a wedge notice: neither sender ever blocks.
        let (tx, rx) = mpsc::sync_channel::<Message<T>>(2);
        let wake = tx.clone();
        let inner = Arc::clone(&self.inner);
        let shared = Arc::clone(&self.shared);
        let make_job = move |id: u64| -> Job {
            Box::new(move || {
                // A call queued before the member wedged must not reach it afterwards.
                let result = if shared.wedged.load(Ordering::Acquire) {
                    Err(wedged_error(inner.name(), kind))
                } else {
                    f(inner.as_ref())
                };
                let mut state = shared.lock();
                state.waiting.remove(&id);
                // Under the lock: the caller decides to abandon under it too.
                if tx.send(Message::Done(result, Instant::now())).is_err() {
                    state.stuck -= 1;
                }
            })
        };
        let waiter = Box::new(move || {
            let _ = wake.try_send(Message::Wedged);
        });
        self.submit(kind, make_job, waiter)?;
        Ok(Pending {
            rx,
            kind,
            started,
            deadline,
            inner: Arc::clone(&self.inner),
            shared: Arc::clone(&self.shared),
        })
    }

    /// Queues the job `make_job` builds for its call number and makes sure a worker will take
    /// it: an idle one, or a new one while there are fewer than [`WORKERS_MAX`]. `waiter` is
    /// called if the member wedges before the job returned.
    fn submit(
        &self,
        kind: Kind,
        make_job: impl FnOnce(u64) -> Job,
        waiter: Box<dyn FnOnce() + Send>,
    ) -> io::Result<()> {
        let mut state = self.shared.lock();
        if let Some(e) = self.refuse(kind, &state) {
            return Err(e);
        }
        let id = state.next_call;
        state.next_call += 1;
        state.waiting.insert(id, waiter);
        state.queue.push_back(make_job(id));
        if state.queue.len() <= state.idle {
            self.shared.work.notify_one();
            return Ok(());
        }
        if state.threads >= WORKERS_MAX {
            return Ok(()); // taken when a worker is free, or abandoned at the deadline
        }
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("raidkit-member-io".into())
            .spawn(move || worker(&shared));
        match spawned {
            Ok(_) => {
                state.threads += 1;
                Ok(())
            }
            Err(e) => {
                state.queue.pop_back();
                state.waiting.remove(&id);
                Err(io::Error::new(
                    e.kind(),
                    format!(
                        "member {}: cannot start an I/O thread: {e}",
                        self.inner.name()
                    ),
                ))
            }
        }
    }

    /// The call's own deadline (start + timeout), or the thread's batch deadline if earlier —
    /// but never less than a grace of a quarter of the timeout from the start: a call that
    /// starts after an earlier member of the batch used up the deadline still gets time to
    /// answer if it is healthy, so k stalled members of one batch cost at most
    /// timeout + (k − 1) · timeout / 4.
    fn deadline(&self, started: Instant) -> Instant {
        call_deadline(started, self.timeout)
    }

    /// Reads `len` bytes at `offset` into an owned buffer, then hands it to `out`.
    fn read_owned(&self, len: usize, offset: u64, out: impl FnOnce(&[u8])) -> io::Result<()> {
        let buf = self.begin_read(len, offset)?.wait()?;
        out(&buf);
        self.shared.recycle(buf);
        Ok(())
    }

    /// Starts a read of `len` bytes at `offset` into an owned buffer (the call's result).
    fn begin_read(&self, len: usize, offset: u64) -> io::Result<Pending<Vec<u8>>> {
        let mut buf = self.shared.take_buffer(len);
        self.begin(Kind::Read, move |m| {
            m.read_at(&mut buf, offset)?;
            Ok(buf)
        })
    }

    fn write_owned(&self, parts: &[&[u8]], offset: u64, durable: bool) -> io::Result<()> {
        let buf = self.begin_write(parts, offset, durable)?.wait()?;
        self.shared.recycle(buf);
        Ok(())
    }

    /// Starts a write of `parts` (copied into an owned buffer, the call's result) at `offset`.
    fn begin_write(
        &self,
        parts: &[&[u8]],
        offset: u64,
        durable: bool,
    ) -> io::Result<Pending<Vec<u8>>> {
        let len = parts.iter().map(|p| p.len()).sum();
        let mut buf = self.shared.take_buffer(0);
        buf.reserve(len);
        for part in parts {
            buf.extend_from_slice(part);
        }
        let kind = if durable {
            Kind::DurableWrite
        } else {
            Kind::Write
        };
        self.begin(kind, move |m| {
            if durable {
                m.write_durable_at(&buf, offset)?;
            } else {
                m.write_at(&buf, offset)?;
            }
            Ok(buf)
        })
    }

    /// [`Member::start`]: the call handed to a worker now, waited for by [`Started::finish`].
    fn start_call(&self, call: StartCall<'_>) -> io::Result<Started> {
        let shared = Arc::clone(&self.shared);
        let recycle = move |(buf, took): (io::Result<Vec<u8>>, Duration),
                            out: &mut dyn FnMut(&[u8])| {
            match buf {
                Ok(buf) => {
                    out(&buf);
                    shared.recycle(buf);
                    (Ok(()), took)
                }
                Err(e) => (Err(e), took),
            }
        };
        Ok(match call {
            StartCall::Read { offset, len } => {
                crate::check_range(self.name(), "read", offset, len, self.len())?;
                let pending = self.begin_read(len as usize, offset)?;
                Started::new(move |out| recycle(pending.wait_timed(), out))
            }
            StartCall::Write { offset, bufs } => {
                let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
                crate::check_range(self.name(), "write", offset, len, self.len())?;
                let pending = self.begin_write(bufs, offset, false)?;
                Started::new(move |_| recycle(pending.wait_timed(), &mut |_| {}))
            }
            StartCall::Trim { offset, len } => {
                let pending = self.begin(Kind::Trim, move |m| m.trim(offset, len))?;
                Started::new(move |_| pending.wait_timed())
            }
            StartCall::WriteZeroes { offset, len } => {
                let pending =
                    self.begin(Kind::WriteZeroes, move |m| m.write_zeroes(offset, len))?;
                Started::new(move |_| pending.wait_timed())
            }
            StartCall::Flush => {
                let pending = self.begin(Kind::Flush, |m| m.flush())?;
                Started::new(move |_| pending.wait_timed())
            }
        })
    }
}

/// A call handed to a worker ([`Detached::begin`]), not yet waited for.
struct Pending<T> {
    rx: mpsc::Receiver<Message<T>>,
    kind: Kind,
    started: Instant,
    deadline: Instant,
    inner: Arc<dyn Member>,
    shared: Arc<Shared>,
}

impl<T> Pending<T> {
    /// Waits for the call until its deadline, or until another call to the member is
    /// abandoned (the member wedges: nothing waits for it any more).
    fn wait(self) -> io::Result<T> {
        self.wait_timed().0
    }

    /// [`Pending::wait`], and how long the call took: until it returned, or until it was
    /// abandoned (not until it was waited for).
    fn wait_timed(self) -> (io::Result<T>, Duration) {
        let wait = self.deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(wait) {
            Ok(Message::Done(result, returned)) => (result, returned - self.started),
            Ok(Message::Wedged) => self.abandon(false),
            Err(_) => self.abandon(true),
        }
    }

    /// Leaves a call behind: at its deadline (`timed_out`), or because another call to the
    /// member was abandoned meanwhile. The first abandonment wedges the member and wakes
    /// every other caller still waiting for it.
    fn abandon(self, timed_out: bool) -> (io::Result<T>, Duration) {
        let Pending {
            rx,
            kind,
            started,
            shared,
            inner,
            ..
        } = self;
        let mut state = shared.lock();
        while let Ok(message) = rx.try_recv() {
            if let Message::Done(result, returned) = message {
                return (result, returned - started); // returned just now
            }
        }
        drop(rx); // the worker's send now fails: it knows the call was abandoned
        state.stuck += 1;
        state.abandoned_total += 1;
        if !timed_out {
            // Counted, not logged: the abandonment that wedged the member was.
            let e = io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "member {}: {} abandoned after {} ms: another call to the member was stuck \
                     in the kernel, so it is not used again",
                    inner.name(),
                    kind.name(),
                    started.elapsed().as_millis()
                ),
            );
            return (Err(e), started.elapsed());
        }
        shared.wedged.store(true, Ordering::Release);
        for (_, wake) in state.waiting.drain() {
            wake();
        }
        let message = format!(
            "member {}: {} stuck in the kernel for {} ms: abandoned ({} call(s) still stuck, {} \
             abandoned in all; at {STUCK_MAX} stuck every call fails at once); the member is not \
             used again",
            inner.name(),
            kind.name(),
            started.elapsed().as_millis(),
            state.stuck,
            state.abandoned_total
        );
        drop(state);
        eprintln!("raidkit: {message}");
        (
            Err(io::Error::new(io::ErrorKind::TimedOut, message)),
            started.elapsed(),
        )
    }
}

/// Copies `data` into `bufs`, one after the other (a vectored read served from one buffer).
pub fn scatter(data: &[u8], bufs: &mut [&mut [u8]]) {
    let mut at = 0;
    for b in bufs.iter_mut() {
        b.copy_from_slice(&data[at..at + b.len()]);
        at += b.len();
    }
}

fn wedged_error(name: &str, kind: Kind) -> io::Error {
    io::Error::other(format!(
        "member {name}: {} refused: an earlier call stuck in the kernel was abandoned, so the \
         member is not used again; replace it",
        kind.name()
    ))
}

fn worker(shared: &Shared) {
    let mut state = shared.lock();
    loop {
        if let Some(job) = state.queue.pop_front() {
            drop(state);
            job();
            state = shared.lock();
            continue;
        }
        if state.closed {
            break;
        }
        state.idle += 1;
        let (next, timeout) = shared
            .work
            .wait_timeout(state, IDLE_EXIT)
            .unwrap_or_else(|p| p.into_inner());
        state = next;
        state.idle -= 1;
        if timeout.timed_out() && state.queue.is_empty() {
            break;
        }
    }
    state.threads -= 1;
}

impl Drop for Detached {
    /// Idle workers exit; a worker stuck in the kernel is left behind and exits when (if) its
    /// call returns — dropping never waits for a stuck call.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
    }
}

impl Member for Detached {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_owned(buf.len(), offset, |data| buf.copy_from_slice(data))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_owned(&[buf], offset, false)
    }

    /// One read of the whole range into an owned buffer, copied out to `bufs`.
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        crate::check_range(self.name(), "read", offset, len, self.len())?;
        self.read_owned(len as usize, offset, |data| scatter(data, bufs))
    }

    /// One write of `bufs` copied into an owned buffer.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        crate::check_range(self.name(), "write", offset, len, self.len())?;
        self.write_owned(bufs, offset, false)
    }

    fn flush(&self) -> io::Result<()> {
        self.call(Kind::Flush, |m| m.flush())
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_owned(&[buf], offset, true)
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.call(Kind::Trim, move |m| m.trim(offset, len))
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.call(Kind::WriteZeroes, move |m| m.write_zeroes(offset, len))
    }

    fn identity(&self) -> Option<crate::Identity> {
        self.inner.identity()
    }

    fn start(&self, call: StartCall<'_>) -> Option<Started> {
        Some(self.start_call(call).unwrap_or_else(Started::failed))
    }

    fn stuck_calls(&self) -> (usize, u64) {
        self.abandoned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemMember;

    /// A RAM member whose calls block while the gate is closed (as a stuck disk would).
    #[derive(Debug)]
    struct Gated {
        inner: MemMember,
        closed: Mutex<bool>,
        opened: Condvar,
    }

    impl Gated {
        fn new() -> Arc<Gated> {
            Arc::new(Gated {
                inner: MemMember::new("gated", 1 << 20).unwrap(),
                closed: Mutex::new(false),
                opened: Condvar::new(),
            })
        }

        fn set_closed(&self, closed: bool) {
            *self.closed.lock().unwrap() = closed;
            self.opened.notify_all();
        }

        fn pass(&self) {
            let mut closed = self.closed.lock().unwrap();
            while *closed {
                closed = self.opened.wait(closed).unwrap();
            }
        }
    }

    impl Member for Gated {
        fn name(&self) -> &str {
            "gated"
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.pass();
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.pass();
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> io::Result<()> {
            self.pass();
            self.inner.flush()
        }
        fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
            self.pass();
            self.inner.trim(offset, len)
        }
        fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
            self.pass();
            self.inner.write_zeroes(offset, len)
        }
    }

    const TIMEOUT: Duration = Duration::from_millis(200);

    #[test]
    fn calls_pass_through() {
        let gated = Gated::new();
        let m = Detached::new(gated.clone(), TIMEOUT);
        m.write_vectored_at(&[b"ab", b"cd"], 10).unwrap();
        m.flush().unwrap();
        let (mut a, mut b) = ([0u8; 1], [0u8; 3]);
        m.read_vectored_at(&mut [&mut a, &mut b], 10).unwrap();
        assert_eq!((&a, &b), (b"a", b"bcd"));
        m.write_zeroes(11, 2).unwrap();
        let mut buf = [9u8; 4];
        m.read_at(&mut buf, 10).unwrap();
        assert_eq!(&buf, b"a\0\0d");
        assert_eq!(m.abandoned(), (0, 0));
    }

    #[test]
    fn stuck_call_is_abandoned_at_deadline_and_member_never_used_again() {
        let gated = Gated::new();
        let m = Detached::new(gated.clone(), TIMEOUT);
        gated.set_closed(true);
        let started = Instant::now();
        let e = m.write_at(b"late", 0).unwrap_err();
        let waited = started.elapsed();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(waited >= TIMEOUT && waited < TIMEOUT * 3, "{waited:?}");
        assert_eq!(m.abandoned(), (1, 1));
        // Wedged: writes fail at once, even once the stuck call returned.
        let started = Instant::now();
        assert!(m.flush().is_err());
        assert!(started.elapsed() < TIMEOUT / 2);
        gated.set_closed(false);
        wait_until(|| m.abandoned() == (0, 1));
        assert!(m.write_at(b"x", 100).is_err());
        assert!(m.trim(0, 10).is_err());
        // Reads too: a device known not to answer costs no request a timeout of its own.
        let started = Instant::now();
        let e = m.read_at(&mut [1u8; 1], 100).unwrap_err();
        assert!(started.elapsed() < TIMEOUT / 2, "{e}");
        assert!(e.to_string().contains("not used again"), "{e}");
        let mut buf = [1u8; 1];
        gated.read_at(&mut buf, 100).unwrap();
        assert_eq!(buf, [0], "the refused write reached the member");
    }

    #[test]
    fn stuck_calls_are_bounded_then_fail_at_once() {
        let gated = Gated::new();
        let m = Arc::new(Detached::new(gated.clone(), TIMEOUT));
        gated.set_closed(true);
        let readers: Vec<_> = (0..STUCK_MAX)
            .map(|i| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 4096];
                    m.read_at(&mut buf, i as u64 * 4096).unwrap_err()
                })
            })
            .collect();
        for r in readers {
            assert_eq!(r.join().unwrap().kind(), io::ErrorKind::TimedOut);
        }
        assert_eq!(m.abandoned(), (STUCK_MAX, STUCK_MAX as u64));
        let started = Instant::now();
        let e = m.read_at(&mut [0u8; 8], 0).unwrap_err();
        assert!(started.elapsed() < TIMEOUT / 2, "{e}");
        assert!(e.to_string().contains("stuck in the kernel"), "{e}");
        gated.set_closed(false);
        wait_until(|| m.abandoned().0 == 0);
        // Below the bound again, but wedged: still refused at once.
        let e = m.read_at(&mut [0u8; 8], 0).unwrap_err();
        assert!(e.to_string().contains("not used again"), "{e}");
    }

    #[test]
    fn batch_deadline_bounds_calls_one_after_the_other() {
        let (a, b) = (Gated::new(), Gated::new());
        let timeout = Duration::from_millis(400);
        let (ma, mb) = (
            Detached::new(a.clone(), timeout),
            Detached::new(b.clone(), timeout),
        );
        a.set_closed(true);
        b.set_closed(true);
        let started = Instant::now();
        with_deadline(started + timeout, || {
            assert!(ma.read_at(&mut [0u8; 8], 0).is_err());
            assert!(mb.read_at(&mut [0u8; 8], 0).is_err());
        });
        let waited = started.elapsed();
        // One timeout, plus the grace the second call gets (a quarter): not two timeouts.
        assert!(waited < timeout + timeout / 4 + timeout / 8, "{waited:?}");
        a.set_closed(false);
        b.set_closed(false);
    }

    #[test]
    fn callers_waiting_on_a_member_are_released_when_another_call_is_abandoned() {
        // One request's deadline runs out while another request still waits for the same
        // stuck member with a later deadline: the member is known not to answer from the
        // first abandonment, so the second caller stops waiting then, not at its own deadline.
        let gated = Gated::new();
        let timeout = Duration::from_millis(1500);
        let m = Arc::new(Detached::new(gated.clone(), timeout));
        gated.set_closed(true);
        let started = Instant::now();
        let later = {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                let e = m.write_at(b"later", 0).unwrap_err();
                (e, started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        with_deadline(started + TIMEOUT, || {
            let e = m.read_at(&mut [0u8; 8], 0).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        });
        let (e, waited) = later.join().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(e.to_string().contains("another call"), "{e}");
        assert!(waited < TIMEOUT + timeout / 4, "waited {waited:?}");
        // Both calls are left behind, both counted.
        assert_eq!(m.abandoned(), (2, 2));
        gated.set_closed(false);
        wait_until(|| m.abandoned() == (0, 2));
    }

    #[test]
    fn drop_does_not_wait_for_a_stuck_call() {
        let gated = Gated::new();
        let m = Detached::new(gated.clone(), TIMEOUT);
        gated.set_closed(true);
        assert!(m.read_at(&mut [0u8; 8], 0).is_err());
        let started = Instant::now();
        drop(m);
        assert!(started.elapsed() < TIMEOUT);
        gated.set_closed(false);
    }

    fn wait_until(mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "condition not met in 5 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
