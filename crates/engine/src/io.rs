//! Member I/O: every byte the engine moves to or from a member goes through
//! [`Array::member_io`], the one place where member errors surface (issue 4's fault handling —
//! reconstruct and rewrite on a read error, mark faulty on a write error — plugs in there).
//! `Array::run` executes a batch of operations, fanning out to one scoped thread per member
//! with a large share (at most `member_count` threads), so a large request keeps all its
//! members busy at once.

use crate::error::{IoError, Op};
use crate::Array;
use std::sync::atomic::Ordering;

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

impl Array {
    /// Performs one member operation. The single point where member I/O happens and where
    /// its errors are turned into [`IoError`].
    pub(crate) fn member_io(&self, op: MemOp<'_>) -> Result<(), IoError> {
        let role = op.role();
        let member = self.members[role]
            .as_ref()
            .expect("I/O issued to a member that is not there");
        let (kind, offset, len) = op.describe();
        if kind != Op::Flush {
            assert!(offset + len <= self.geometry.member_data_bytes(role));
        }
        self.in_flight[role].fetch_add(1, Ordering::Relaxed);
        let result = match op {
            MemOp::Read { offset, buf, .. } => member.read_at(buf, offset),
            MemOp::Write { offset, buf, .. } => member.write_at(buf, offset),
            MemOp::Trim { offset, len, .. } => member.trim(offset, len),
            MemOp::Zero { offset, len, .. } => member.write_zeroes(offset, len),
            MemOp::Flush { .. } => member.flush(),
        };
        self.in_flight[role].fetch_sub(1, Ordering::Relaxed);
        result.map_err(|source| IoError::Member {
            role,
            name: member.name().to_string(),
            op: kind,
            offset,
            len,
            source,
        })
    }

    /// Runs a batch: operations on the same member in order. Members whose share is large
    /// (at least the fan-out threshold, see [`Array::set_fanout_min_bytes`]) run in parallel on
    /// scoped threads, the rest on the calling thread: for page-cache-speed members a thread
    /// costs more than the copy it would overlap, while flushes and large transfers gain.
    /// Returns the first error once every started operation has finished (inline groups after
    /// a failure are not started).
    pub(crate) fn run(&self, ops: Vec<MemOp<'_>>) -> Result<(), IoError> {
        let mut groups: Vec<Vec<MemOp<'_>>> = (0..self.members.len()).map(|_| Vec::new()).collect();
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
                .try_for_each(|g| self.run_group(g));
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = big
                .into_iter()
                .map(|group| scope.spawn(move || self.run_group(group)))
                .collect();
            let mine = small.into_iter().try_for_each(|g| self.run_group(g));
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
        for op in group {
            self.member_io(op)?;
        }
        Ok(())
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
