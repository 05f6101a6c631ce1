//! `ModelMember`: a disk-model member (`sim:CLASS:SIZE[:OPTIONS]`): the bytes in RAM (a
//! [`MemMember`]), each call taking as long as the modelled drive says ([`diskmodel`]), in real
//! time, so NBD clients of an array built on them see the drive's speed.
//!
//! Not to be confused with [`crate::SimMember`], the power-loss simulation for crash tests: a
//! model member never loses a write (its data are in RAM until the process exits).

use std::io;
use std::time::{Duration, Instant};

use diskmodel::{Clock, Disk, DiskClass, Drive, Nanos, Op, Options, Request};

use crate::error::{check_member_range, MemberError};
use crate::{parse_size, MemMember, Member};

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
pub struct ModelMember {
    data: MemMember,
    class: DiskClass,
    options: Options,
    disk: Disk<RealClock>,
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
        let data = MemMember::new(name, size)?;
        let drive = Drive::new(&class.model(), &options, size);
        Ok(ModelMember {
            data,
            class,
            options,
            disk: Disk::new(drive, RealClock::default()),
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
}
