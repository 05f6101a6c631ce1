//! `ModelMember`: a disk-model member (`sim:CLASS:SIZE[:OPTIONS]`): the bytes in RAM (a
//! [`MemMember`]), each call taking as long as the modelled drive says ([`diskmodel`]), in real
//! time, so NBD clients of an array built on them see the drive's speed.
//!
//! Not to be confused with [`crate::SimMember`], the power-loss simulation for crash tests: a
//! model member never loses a write (its data are in RAM until the process exits).

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diskmodel::{Clock, Disk, DiskClass, Drive, Model, Nanos, Op, Options, Request};

use crate::error::{check_member_range, MemberError};
use crate::{parse_size, MemMember, Member, StartCall, Started};

/// The prefix of a disk-model member spec.
pub const MODEL_PREFIX: &str = "sim:";

/// Real time for a model: nanoseconds since the clock was made, and sleeps that end within a
/// few microseconds of their target on an idle machine (the thread's timer slack is lowered to
/// 1 µs for the sleep and put back after: the default 50 µs would swamp a flash latency).
#[derive(Debug)]
pub struct RealClock {
    origin: Instant,
}

impl Default for RealClock {
    fn default() -> RealClock {
        RealClock {
            origin: Instant::now(),
        }
    }
}

/// The timer slack a model's sleeps run with.
pub const SLEEP_SLACK_NS: u64 = 1_000;

impl Clock for RealClock {
    fn now(&self) -> Nanos {
        self.origin.elapsed().as_nanos() as Nanos
    }

    fn wait_until(&self, t: Nanos) {
        let now = self.now();
        if now >= t {
            return;
        }
        let slack = crate::sys::timer_slack();
        crate::sys::set_timer_slack(SLEEP_SLACK_NS);
        let mut now = now;
        while now < t {
            std::thread::sleep(Duration::from_nanos(t - now));
            now = self.now();
        }
        crate::sys::set_timer_slack(slack);
    }
}

/// A member whose calls take the time of a modelled drive.
///
/// A disk's calls can also be *started* ([`Member::start`]): the request is queued in the
/// model at once and the caller waits for it later, with no thread of its own, as a host
/// submits to a disk's queue through io_uring or NCQ. The engine starts a batch's calls to a
/// disk so (`engine::io`), where it would otherwise spawn a thread per call: a new thread on
/// a loaded machine waits for a scheduler slice (~3-4 ms on 2 busy cores), which a real disk's
/// submission does not pay. Flash models keep their calls on the caller's thread.
pub struct ModelMember {
    data: Arc<MemMember>,
    class: DiskClass,
    options: Options,
    disk: Arc<Disk<RealClock>>,
    /// Buffers of started reads, kept for the next (a fresh large buffer is page faults).
    buffers: Arc<Buffers>,
}

/// Read buffers kept for reuse: at most [`Buffers::KEPT`], each at most [`Buffers::BYTES_MAX`].
#[derive(Debug, Default)]
struct Buffers(std::sync::Mutex<Vec<Vec<u8>>>);

impl Buffers {
    const KEPT: usize = 8;
    const BYTES_MAX: usize = 8 << 20;

    /// A buffer of `len` bytes (its contents whatever they were).
    fn take(&self, len: usize) -> Vec<u8> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut buf = kept.unwrap_or_default();
        buf.resize(len, 0);
        buf
    }

    fn put(&self, buf: Vec<u8>) {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < Self::KEPT && buf.capacity() <= Self::BYTES_MAX {
            kept.push(buf);
        }
    }
}

impl std::fmt::Debug for ModelMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelMember")
            .field("name", &self.data.name())
            .field("class", &self.class)
            .field("options", &self.options)
            .finish()
    }
}

impl ModelMember {
    /// Opens `sim:CLASS:SIZE[:OPTION,...]` (options: `cache=on|off`, `queue=N`,
    /// `order=fifo|sstf|satf`).
    pub fn open(spec: &str) -> Result<ModelMember, MemberError> {
        let bad = |reason: String| MemberError::BadModel {
            spec: spec.to_string(),
            reason,
        };
        let rest = spec
            .strip_prefix(MODEL_PREFIX)
            .ok_or_else(|| bad(format!("does not start with {MODEL_PREFIX}")))?;
        let mut parts = rest.splitn(3, ':');
        let class: DiskClass = parts.next().unwrap_or("").parse().map_err(bad)?;
        let size_text = parts
            .next()
            .ok_or_else(|| bad("no size after the model".to_string()))?;
        let size = parse_size(size_text).map_err(|e| bad(e.to_string()))?;
        let options = Options::parse(parts.next().unwrap_or("")).map_err(bad)?;
        if size < MIN_BYTES {
            return Err(bad(format!(
                "a modelled drive needs at least {} MiB",
                MIN_BYTES >> 20
            )));
        }
        ModelMember::new(spec, class, options, size)
    }

    /// A new all-zero member of `size` bytes called `name`, modelled as `class`.
    pub fn new(
        name: &str,
        class: DiskClass,
        options: Options,
        size: u64,
    ) -> Result<ModelMember, MemberError> {
        let data = Arc::new(MemMember::new(name, size)?);
        let drive = Drive::new(&class.model(), &options, size);
        Ok(ModelMember {
            data,
            class,
            options,
            disk: Arc::new(Disk::new(drive, RealClock::default())),
            buffers: Arc::default(),
        })
    }

    /// The model.
    pub fn class(&self) -> DiskClass {
        self.class
    }

    /// Runs `req` through the model: returns when the modelled drive completes it.
    fn wait(&self, op: Op, offset: u64, len: u64) {
        if len == 0 && op != Op::Flush {
            return;
        }
        self.disk.io(Request { op, offset, len });
    }

    /// Queues `op` in the model now; the returned call waits for its completion, then hands a
    /// read's bytes over (read from RAM then, as `read_at` does).
    fn queue(&self, op: Op, offset: u64, len: u64) -> Started {
        let began = Instant::now();
        if len == 0 && op != Op::Flush {
            return Started::new(move |_| (Ok(()), began.elapsed()));
        }
        let (ticket, arrival) = self.disk.submit(Request { op, offset, len });
        let disk = Arc::clone(&self.disk);
        let data = Arc::clone(&self.data);
        let buffers = Arc::clone(&self.buffers);
        Started::new(move |out| {
            let asked = disk.clock().now();
            let done = disk.wait(ticket);
            // The call's own time: a caller that comes for it after it completed (finishing
            // another member's call first) did not make it slower.
            let took = match done > asked {
                true => began.elapsed(),
                false => Duration::from_nanos(done.saturating_sub(arrival)),
            };
            if op != Op::Read {
                return (Ok(()), took);
            }
            let mut buf = buffers.take(len as usize);
            let result = data.read_at(&mut buf, offset);
            if result.is_ok() {
                out(&buf);
            }
            buffers.put(buf);
            (result, took)
        })
    }
}

/// Smallest modelled drive (its zones need room).
pub const MIN_BYTES: u64 = 1 << 20;

impl Member for ModelMember {
    fn name(&self) -> &str {
        self.data.name()
    }

    fn len(&self) -> u64 {
        self.data.len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "read", offset, buf.len() as u64)?;
        self.data.read_at(buf, offset)?;
        self.wait(Op::Read, offset, buf.len() as u64);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "write", offset, buf.len() as u64)?;
        self.data.write_at(buf, offset)?;
        self.wait(Op::Write, offset, buf.len() as u64);
        Ok(())
    }

    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        check_member_range(self, "read", offset, len)?;
        self.data.read_vectored_at(bufs, offset)?;
        self.wait(Op::Read, offset, len);
        Ok(())
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        check_member_range(self, "write", offset, len)?;
        self.data.write_vectored_at(bufs, offset)?;
        self.wait(Op::Write, offset, len);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.wait(Op::Flush, 0, 0);
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "trim", offset, len)?;
        self.data.trim(offset, len)?;
        self.wait(Op::Trim, offset, len);
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "write-zeroes", offset, len)?;
        self.data.write_zeroes(offset, len)?;
        // The drive writes the zeroes (no WRITE SAME shortcut is modelled).
        self.wait(Op::Write, offset, len);
        Ok(())
    }

    /// A disk model's call queued in the model now (see [`ModelMember`]); a write's bytes are
    /// stored at once, as `write_at` stores them before its wait. `None` for flash models and
    /// for a call out of range (the caller's own call then reports it).
    fn start(&self, call: StartCall<'_>) -> Option<Started> {
        if !matches!(self.class.model(), Model::Hdd(_)) {
            return None;
        }
        if let Some((offset, len)) = call.range() {
            check_member_range(self, "call", offset, len).ok()?;
        }
        let stored = match call {
            StartCall::Read { offset, len } => return Some(self.queue(Op::Read, offset, len)),
            StartCall::Flush => return Some(self.queue(Op::Flush, 0, 0)),
            StartCall::Write { offset, bufs } => {
                self.data.write_vectored_at(bufs, offset).map(|()| {
                    (
                        Op::Write,
                        offset,
                        crate::vectored_len(bufs.iter().map(|b| b.len())),
                    )
                })
            }
            StartCall::Trim { offset, len } => self
                .data
                .trim(offset, len)
                .map(|()| (Op::Trim, offset, len)),
            // The drive writes the zeroes (as `write_zeroes`).
            StartCall::WriteZeroes { offset, len } => (self.data)
                .write_zeroes(offset, len)
                .map(|()| (Op::Write, offset, len)),
        };
        Some(match stored {
            Ok((op, offset, len)) => self.queue(op, offset, len),
            Err(e) => Started::failed(e),
        })
    }
}
