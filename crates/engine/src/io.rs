//! Member I/O: every byte the engine moves to or from a member goes through
//! [`Array::member_io`], the one place where member errors surface (issue 4's fault handling —
//! reconstruct and rewrite on a read error, mark faulty on a write error — plugs in there).
//! `Array::run` executes a batch of operations, fanning out to one scoped thread per member
//! with a large share (at most `member_count` threads), so a large request keeps all its
//! members busy at once.

use crate::error::{IoError, Op};
use crate::state::FaultReason;
use crate::Array;
use member::Member;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn gone() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "member removed from the array",
    )
}

/// One operation on one member.
pub(crate) enum MemOp<'a> {
    Read {
        role: usize,
        offset: u64,
        buf: &'a mut [u8],
    },
    Write {
        role: usize,
        offset: u64,
        buf: &'a [u8],
    },
    Trim {
        role: usize,
        offset: u64,
        len: u64,
    },
    Zero {
        role: usize,
        offset: u64,
        len: u64,
    },
    Flush {
        role: usize,
    },
}

impl MemOp<'_> {
    pub(crate) fn role(&self) -> usize {
        match self {
            MemOp::Read { role, .. }
            | MemOp::Write { role, .. }
            | MemOp::Trim { role, .. }
            | MemOp::Zero { role, .. }
            | MemOp::Flush { role } => *role,
        }
    }

    fn describe(&self) -> (Op, u64, u64) {
        match self {
            MemOp::Read { offset, buf, .. } => (Op::Read, *offset, buf.len() as u64),
            MemOp::Write { offset, buf, .. } => (Op::Write, *offset, buf.len() as u64),
            MemOp::Trim { offset, len, .. } => (Op::Trim, *offset, *len),
            MemOp::Zero { offset, len, .. } => (Op::WriteZeroes, *offset, *len),
            MemOp::Flush { .. } => (Op::Flush, 0, 0),
        }
    }
}

impl MemOp<'_> {
    fn is_write(&self) -> bool {
        !matches!(self, MemOp::Read { .. })
    }

    fn apply(&self, member: &dyn Member) -> std::io::Result<()> {
        match self {
            MemOp::Read { .. } => unreachable!("reads go through apply_read"),
            MemOp::Write { offset, buf, .. } => member.write_at(buf, *offset),
            MemOp::Trim { offset, len, .. } => member.trim(*offset, *len),
            MemOp::Zero { offset, len, .. } => member.write_zeroes(*offset, *len),
            MemOp::Flush { .. } => member.flush(),
        }
    }
}

impl Array {
    /// Performs one member operation: the single point where member I/O happens, where every
    /// request is timed, and where faults are judged (see [`Array::judge`]). During a replace,
    /// every write-type operation on the role is repeated on the replacement.
    pub(crate) fn member_io(&self, mut op: MemOp<'_>) -> Result<(), IoError> {
        let role = op.role();
        let (kind, offset, len) = op.describe();
        if kind != Op::Flush {
            assert!(offset + len <= self.geometry.member_data_bytes(role));
        }
        let (member, replacement) = self.slot(role);
        let Some(member) = member else {
            // Removed after the request was planned: a write is moot, a read must be retried.
            return match kind {
                Op::Read => Err(self.member_error(role, "(removed)", kind, offset, len, gone())),
                _ => Ok(()),
            };
        };
        self.in_flight[role].fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = match &mut op {
            MemOp::Read { offset, buf, .. } => member.read_at(buf, *offset),
            other => other.apply(member.as_ref()),
        };
        let elapsed = started.elapsed();
        self.in_flight[role].fetch_sub(1, Ordering::Relaxed);
        if let (Some(new), true) = (replacement, op.is_write()) {
            if let Err(e) = op.apply(new.as_ref()) {
                self.abort_replacement(role, &new, &e);
            }
        }
        self.judge(role, kind, result, elapsed)
            .map_err(|source| self.member_error(role, member.name(), kind, offset, len, source))
    }

    fn member_error(
        &self,
        role: usize,
        name: &str,
        op: Op,
        offset: u64,
        len: u64,
        source: std::io::Error,
    ) -> IoError {
        IoError::Member {
            role,
            name: name.to_string(),
            op,
            offset,
            len,
            source,
        }
    }

    /// Fault policy for one finished member request: a write-type error or a timeout fails the
    /// member (the error is then absorbed: the array goes on without it); a read error is
    /// counted (failing the member over the limit) and returned, so the request is repaired
    /// and retried from redundancy.
    fn judge(
        &self,
        role: usize,
        kind: Op,
        result: std::io::Result<()>,
        elapsed: Duration,
    ) -> std::io::Result<()> {
        let policy = self.fault_policy();
        let counters = &self.faults[role];
        let timed_out = elapsed > policy.io_timeout
            || result
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut);
        if timed_out {
            counters.timeouts.fetch_add(1, Ordering::Relaxed);
            let millis = elapsed.as_millis() as u64;
            let failed = self.try_fail_member(role, FaultReason::Timeout { millis });
            return match (result, kind, failed) {
                (Ok(()), _, _) => Ok(()),
                (Err(_), k, true) if k != Op::Read => Ok(()),
                (Err(e), _, _) => Err(e),
            };
        }
        let Err(e) = result else { return Ok(()) };
        if kind == Op::Read {
            if counters.note_read_error(&policy) {
                self.try_fail_member(
                    role,
                    FaultReason::ReadErrors {
                        count: policy.read_errors_max + 1,
                        window_secs: policy.read_error_window.as_secs(),
                    },
                );
            }
            return Err(e);
        }
        counters.write_errors.fetch_add(1, Ordering::Relaxed);
        if self.try_fail_member(role, FaultReason::WriteError(e.to_string())) {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// A write to the replacement failed: the replace is abandoned, the role keeps its member.
    fn abort_replacement(&self, role: usize, new: &Arc<dyn Member>, e: &std::io::Error) {
        let mut slot = self.slot_mut(role);
        if slot
            .replacement
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, new))
        {
            slot.replacement = None;
            self.epoch.fetch_add(1, Ordering::AcqRel);
            *self.faults[role]
                .last_fault
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(FaultReason::WriteError(format!(
                "replacement {}: {e}",
                new.name()
            )));
        }
    }

    /// Runs a batch: operations on the same member in order. Members whose share is large
    /// (at least the fan-out threshold, see [`Array::set_fanout_min_bytes`]) run in parallel on
    /// scoped threads, the rest on the calling thread: for page-cache-speed members a thread
    /// costs more than the copy it would overlap, while flushes and large transfers gain.
    /// Every group runs even after a failure (a write batch must reach every member it can);
    /// returns the first error.
    pub(crate) fn run(&self, ops: Vec<MemOp<'_>>) -> Result<(), IoError> {
        let mut groups: Vec<Vec<MemOp<'_>>> =
            (0..self.member_count()).map(|_| Vec::new()).collect();
        for op in ops {
            groups[op.role()].push(op);
        }
        let threshold = self.fanout_min_bytes.load(Ordering::Relaxed);
        let (big, small): (Vec<_>, Vec<_>) = groups
            .into_iter()
            .filter(|g| !g.is_empty())
            .map(coalesce)
            .partition(|g| group_cost(g) >= threshold);
        if big.len() < 2 {
            return big
                .into_iter()
                .chain(small)
                .map(|g| self.run_group(g))
                .fold(Ok(()), Result::and);
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = big
                .into_iter()
                .map(|group| scope.spawn(move || self.run_group(group)))
                .collect();
            let mine = small
                .into_iter()
                .map(|g| self.run_group(g))
                .fold(Ok(()), Result::and);
            let mut first = Ok(());
            for handle in handles {
                let result = handle
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                first = first.and(result);
            }
            first.and(mine)
        })
    }

    /// Sets the per-member share (bytes) from which a batch fans out to parallel threads.
    /// 0 makes every multi-member batch parallel; `u64::MAX` runs everything inline except
    /// flushes.
    pub fn set_fanout_min_bytes(&self, bytes: u64) {
        self.fanout_min_bytes.store(bytes, Ordering::Relaxed);
    }

    fn run_group(&self, group: Vec<MemOp<'_>>) -> Result<(), IoError> {
        let mut first = Ok(());
        for op in group {
            first = first.and(self.member_io(op));
        }
        first
    }
}

/// Bytes a group moves; a flush (milliseconds on real disks) always counts as large.
fn group_cost(group: &[MemOp<'_>]) -> u64 {
    group.iter().fold(0u64, |cost, op| {
        let bytes = match op {
            MemOp::Read { buf, .. } => buf.len() as u64,
            MemOp::Write { buf, .. } => buf.len() as u64,
            MemOp::Zero { len, .. } => *len,
            MemOp::Trim { .. } => 0,
            MemOp::Flush { .. } => u64::MAX,
        };
        cost.saturating_add(bytes)
    })
}

/// Merges adjacent trims / write-zeroes on the same member into one operation.
fn coalesce(ops: Vec<MemOp<'_>>) -> Vec<MemOp<'_>> {
    let mut out: Vec<MemOp<'_>> = Vec::with_capacity(ops.len());
    for op in ops {
        if let Some(prev) = out.last_mut() {
            match (prev, &op) {
                (
                    MemOp::Trim {
                        role: r1,
                        offset: o1,
                        len: l1,
                    },
                    MemOp::Trim {
                        role: r2,
                        offset: o2,
                        len: l2,
                    },
                )
                | (
                    MemOp::Zero {
                        role: r1,
                        offset: o1,
                        len: l1,
                    },
                    MemOp::Zero {
                        role: r2,
                        offset: o2,
                        len: l2,
                    },
                ) if *r1 == *r2 && *o1 + *l1 == *o2 => {
                    *l1 += *l2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(op);
    }
    out
}
