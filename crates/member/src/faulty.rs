//! `FaultyMember`: a member wrapper that injects faults, for the engine's fault-handling tests.
//!
//! A [`FaultControl`] handle (cloneable, shared with the member) switches faults on and off while
//! the member is in use: reads and/or writes fail by a [`FaultRule`] (always, in a byte range,
//! every Nth, with a seeded probability), every operation is delayed, or the member "vanishes"
//! (every operation fails); write errors may carry a kind such as `StorageFull` (ENOSPC, see
//! [`FaultControl::fail_writes_as`]). Writes here are `write_at`, `trim`, `write_zeroes` and `flush`.
//! Decisions are taken under one lock in operation order, so a single-threaded sequence of
//! operations with the same seed fails the same operations every run.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::Member;
use crate::SimRng;

/// Which operations of a class fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultRule {
    /// Every operation.
    Always,
    /// Operations touching `[offset, offset + len)`.
    Range { offset: u64, len: u64 },
    /// The Nth, 2Nth, ... operation of the class counted from when the rule was set.
    EveryNth(u64),
    /// Each operation with probability `per_million` / 1 000 000 (seeded).
    Probability { per_million: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Read,
    Write,
}

#[derive(Debug)]
struct Rule {
    rule: FaultRule,
    seen_count: u64,
}

#[derive(Debug)]
struct FaultState {
    reads: Option<Rule>,
    writes: Option<Rule>,
    delay: Duration,
    vanished: bool,
    /// The kind of injected write errors (`Other` unless set: an I/O error).
    write_error_kind: io::ErrorKind,
    rng: SimRng,
    injected_count: u64,
}

/// Switches faults of a [`FaultyMember`] on and off; clones share the same state.
#[derive(Debug, Clone)]
pub struct FaultControl {
    state: Arc<Mutex<FaultState>>,
}

impl FaultControl {
    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check(rule: &FaultRule) {
        match *rule {
            FaultRule::EveryNth(n) => assert!(n > 0, "EveryNth(0) never fires"),
            FaultRule::Probability { per_million } => assert!(per_million <= 1_000_000),
            FaultRule::Range { offset, len } => assert!(offset.checked_add(len).is_some()),
            FaultRule::Always => {}
        }
    }

    /// Makes reads fail by `rule` (replaces an earlier read rule).
    pub fn fail_reads(&self, rule: FaultRule) {
        Self::check(&rule);
        self.lock().reads = Some(Rule {
            rule,
            seen_count: 0,
        });
    }

    /// Makes writes (write, trim, write-zeroes, flush) fail by `rule` with I/O errors.
    pub fn fail_writes(&self, rule: FaultRule) {
        Self::check(&rule);
        let mut s = self.lock();
        s.writes = Some(Rule {
            rule,
            seen_count: 0,
        });
        s.write_error_kind = io::ErrorKind::Other;
    }

    /// Makes writes fail by `rule` with errors of `kind`: `StorageFull` is what a sparse file
    /// member returns when its filesystem is full (ENOSPC), `QuotaExceeded` for EDQUOT.
    pub fn fail_writes_as(&self, rule: FaultRule, kind: io::ErrorKind) {
        self.fail_writes(rule);
        self.lock().write_error_kind = kind;
    }

    /// Delays every operation by `delay` before it runs (zero: no delay).
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// Every operation fails from now on, as if the device was unplugged.
    pub fn vanish(&self) {
        self.lock().vanished = true;
    }

    /// Removes every fault: no rules, no delay, not vanished.
    pub fn heal(&self) {
        let mut s = self.lock();
        s.reads = None;
        s.writes = None;
        s.delay = Duration::ZERO;
        s.vanished = false;
        s.write_error_kind = io::ErrorKind::Other;
    }

    /// Restarts the random sequence used by `Probability` rules.
    pub fn reseed(&self, seed: u64) {
        self.lock().rng = SimRng::new(seed);
    }

    /// How many operations failed by injection so far.
    pub fn injected_count(&self) -> u64 {
        self.lock().injected_count
    }

    /// Decides one operation: its delay, or the injected error's kind and reason.
    fn decide(
        &self,
        class: Class,
        offset: u64,
        len: u64,
    ) -> Result<Duration, (io::ErrorKind, &'static str)> {
        let mut guard = self.lock();
        let s = &mut *guard;
        if s.vanished {
            s.injected_count += 1;
            return Err((io::ErrorKind::Other, "device vanished (injected)"));
        }
        let rule = match class {
            Class::Read => s.reads.as_mut(),
            Class::Write => s.writes.as_mut(),
        };
        let Some(rule) = rule else {
            return Ok(s.delay);
        };
        rule.seen_count += 1;
        let fails = match rule.rule {
            FaultRule::Always => true,
            FaultRule::Range { offset: r, len: n } => offset < r + n && r < offset + len,
            FaultRule::EveryNth(n) => rule.seen_count % n == 0,
            FaultRule::Probability { per_million } => {
                s.rng.below(1_000_000) < u64::from(per_million)
            }
        };
        if fails {
            s.injected_count += 1;
            return Err(match (class, s.write_error_kind) {
                (Class::Write, io::ErrorKind::StorageFull) => (
                    io::ErrorKind::StorageFull,
                    "no space left on device (injected)",
                ),
                (Class::Write, io::ErrorKind::QuotaExceeded) => (
                    io::ErrorKind::QuotaExceeded,
                    "disk quota exceeded (injected)",
                ),
                (Class::Write, kind) if kind != io::ErrorKind::Other => {
                    (kind, "injected write error")
                }
                _ => (io::ErrorKind::Other, "injected I/O error"),
            });
        }
        Ok(s.delay)
    }
}

/// A member that passes operations to `inner` unless a fault is switched on.
#[derive(Debug)]
pub struct FaultyMember {
    inner: Arc<dyn Member>,
    control: FaultControl,
}

impl FaultyMember {
    /// Wraps `inner` with no faults and seed 0.
    pub fn new(inner: Arc<dyn Member>) -> FaultyMember {
        FaultyMember::with_seed(inner, 0)
    }

    /// Wraps `inner`; `Probability` rules draw from a generator seeded with `seed`.
    pub fn with_seed(inner: Arc<dyn Member>, seed: u64) -> FaultyMember {
        let state = FaultState {
            reads: None,
            writes: None,
            delay: Duration::ZERO,
            vanished: false,
            write_error_kind: io::ErrorKind::Other,
            rng: SimRng::new(seed),
            injected_count: 0,
        };
        FaultyMember {
            inner,
            control: FaultControl {
                state: Arc::new(Mutex::new(state)),
            },
        }
    }

    /// The handle that switches faults; clone it freely.
    pub fn control(&self) -> FaultControl {
        self.control.clone()
    }

    /// The wrapped member.
    pub fn inner(&self) -> &Arc<dyn Member> {
        &self.inner
    }

    fn gate(&self, class: Class, op: &str, offset: u64, len: u64) -> io::Result<()> {
        match self.control.decide(class, offset, len) {
            Ok(delay) => {
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                Ok(())
            }
            Err((kind, reason)) => Err(io::Error::new(
                kind,
                format!(
                    "member {}: {op} of {len} bytes at offset {offset}: {reason}",
                    self.inner.name()
                ),
            )),
        }
    }
}

impl Member for FaultyMember {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn identity(&self) -> Option<crate::Identity> {
        self.inner.identity()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.gate(Class::Read, "read", offset, buf.len() as u64)?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.gate(Class::Write, "write", offset, buf.len() as u64)?;
        self.inner.write_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.gate(Class::Write, "flush", 0, 0)?;
        self.inner.flush()
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.gate(Class::Write, "write", offset, buf.len() as u64)?;
        self.inner.write_durable_at(buf, offset)
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.gate(Class::Write, "trim", offset, len)?;
        self.inner.trim(offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.gate(Class::Write, "write-zeroes", offset, len)?;
        self.inner.write_zeroes(offset, len)
    }

    fn stuck_calls(&self) -> (usize, u64) {
        self.inner.stuck_calls()
    }

    fn reconnect(&self) -> io::Result<()> {
        if self.control.lock().vanished {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!(
                    "member {}: reconnect: device vanished (injected)",
                    self.name()
                ),
            ));
        }
        self.inner.reconnect()
    }
}
