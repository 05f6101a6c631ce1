//! Member I/O: every byte the engine moves to or from a member goes through
//! [`Array::member_io`], the one place where member errors surface (issue 4's fault handling —
//! reconstruct and rewrite on a read error, mark faulty on a write error — plugs in there).
//! [`Array::run`] executes a batch of operations with one thread per member involved, so a
//! large request keeps all its members busy at once (at most `member_count` threads).

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

    /// Runs a batch: operations on the same member in order, different members in parallel.
    /// Returns the first error (by role) after every operation has finished.
    pub(crate) fn run(&self, ops: Vec<MemOp<'_>>) -> Result<(), IoError> {
        let mut groups: Vec<Vec<MemOp<'_>>> = (0..self.members.len()).map(|_| Vec::new()).collect();
        for op in ops {
            groups[op.role()].push(op);
        }
        let mut groups: Vec<Vec<MemOp<'_>>> = groups
            .into_iter()
            .filter(|g| !g.is_empty())
            .map(coalesce)
            .collect();
        let Some(last) = groups.pop() else {
            return Ok(());
        };
        if groups.is_empty() {
            return self.run_group(last);
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = groups
                .into_iter()
                .map(|group| scope.spawn(move || self.run_group(group)))
                .collect();
            let mine = self.run_group(last);
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

    fn run_group(&self, group: Vec<MemOp<'_>>) -> Result<(), IoError> {
        for op in group {
            self.member_io(op)?;
        }
        Ok(())
    }
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
