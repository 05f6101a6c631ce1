//! The write-ahead hook of issue 5's journal: [`WriteLog`].
//!
//! When a log is set ([`Array::set_write_log`]), every RAID 5/6 batch of member writes (data
//! and parity of each stripe, and the member trims/zeroes of whole-stripe discards) is handed
//! to the log and made durable there *before* any of it is written in place; `done` follows
//! once the in-place writes have returned. Replay ([`Array::apply_logged`]) writes the logged
//! operations again, which leaves every logged stripe consistent: the write hole is closed.
//! The engine knows nothing of the log's format; the `journal` crate implements the trait.

use std::sync::Arc;

use crate::error::IoError;
use crate::io::MemOp;
use crate::Array;

/// One logged member operation (offsets are in the role's data area).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoggedOp<'a> {
    Write {
        role: usize,
        offset: u64,
        data: &'a [u8],
    },
    /// Trim or write-zeroes: the range reads as zeroes afterwards.
    Zero { role: usize, offset: u64, len: u64 },
}

/// What [`WriteLog::log`] returns and [`WriteLog::done`] takes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogTicket(pub u64, pub u64);

/// A write-ahead log for member writes.
pub trait WriteLog: Send + Sync {
    /// Makes `groups` durable. Each group is one stripe's operations: replay applies a group
    /// whole or not at all.
    fn log(&self, groups: &[Vec<LoggedOp<'_>>]) -> std::io::Result<LogTicket>;
    /// The in-place writes of a logged batch have returned (successfully or not).
    fn done(&self, ticket: LogTicket);
}

impl Array {
    /// Sets (or, with `None`, removes) the write-ahead log used by RAID 5/6 writes.
    pub fn set_write_log(&self, log: Option<Arc<dyn WriteLog>>) {
        *self.write_log.write().unwrap_or_else(|p| p.into_inner()) = log;
    }

    /// True when a write-ahead log is set.
    pub fn has_write_log(&self) -> bool {
        self.write_log
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Re-applies logged operations at replay, skipping roles that are missing or failed
    /// (the present members then hold consistent stripes). Holds the stripe locks of the
    /// rows touched, so background work (a resync rewriting parity) cannot interleave with a
    /// replayed stripe. Writes are in place only; the caller flushes.
    pub fn apply_logged(&self, ops: &[LoggedOp<'_>]) -> Result<(), IoError> {
        let Some((first, end)) = self.logged_rows(ops) else {
            return Ok(());
        };
        let _held = self.locks.lock_range(first, end);
        let writable = self.writable_snapshot();
        let mem_ops: Vec<MemOp<'_>> = ops
            .iter()
            .filter(|op| {
                let role = match op {
                    LoggedOp::Write { role, .. } | LoggedOp::Zero { role, .. } => *role,
                };
                assert!(role < writable.len(), "logged role {role} not in the array");
                writable[role]
            })
            .map(|op| match *op {
                LoggedOp::Write { role, offset, data } => MemOp::Write {
                    role,
                    offset,
                    buf: data,
                },
                LoggedOp::Zero { role, offset, len } => MemOp::Zero { role, offset, len },
            })
            .collect();
        self.run(mem_ops)
    }

    /// The stripe rows `first..end` the ops touch (a row of a RAID 5/6 member's data area is
    /// one chunk of one stripe); `None` for no ops.
    fn logged_rows(&self, ops: &[LoggedOp<'_>]) -> Option<(u64, u64)> {
        let chunk = self.geometry.chunk_bytes();
        let spans = ops.iter().map(|op| match *op {
            LoggedOp::Write { offset, data, .. } => (offset, data.len() as u64),
            LoggedOp::Zero { offset, len, .. } => (offset, len),
        });
        let first = spans.clone().map(|(offset, _)| offset / chunk).min()?;
        let end = spans
            .map(|(offset, len)| (offset + len.max(1) - 1) / chunk + 1)
            .max()?;
        assert!(
            self.geometry.level().has_parity(),
            "member operations are logged only for RAID 5/6"
        );
        Some((first, end))
    }

    /// Runs a batch of member writes, logging it first when a log is set. `group_ends` are
    /// the indexes in `ops` where each stripe's group ends.
    pub(crate) fn run_logged(
        &self,
        ops: Vec<MemOp<'_>>,
        group_ends: &[usize],
    ) -> Result<(), IoError> {
        let log = self
            .write_log
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(log) = log else {
            return self.run(ops);
        };
        let groups = logged_groups(&ops, group_ends);
        let ticket = log
            .log(&groups)
            .map_err(|source| IoError::Journal { source })?;
        drop(groups);
        let result = self.run(ops);
        log.done(ticket);
        result
    }
}

fn logged_groups<'b>(ops: &'b [MemOp<'_>], group_ends: &[usize]) -> Vec<Vec<LoggedOp<'b>>> {
    assert_eq!(group_ends.last().copied().unwrap_or(0), ops.len());
    let mut groups = Vec::with_capacity(group_ends.len());
    let mut start = 0;
    for &end in group_ends {
        assert!(start <= end);
        let group: Vec<LoggedOp<'b>> = ops[start..end]
            .iter()
            .map(|op| match op {
                MemOp::Write { role, offset, buf } => LoggedOp::Write {
                    role: *role,
                    offset: *offset,
                    data: buf,
                },
                MemOp::Trim { role, offset, len } | MemOp::Zero { role, offset, len } => {
                    LoggedOp::Zero {
                        role: *role,
                        offset: *offset,
                        len: *len,
                    }
                }
                _ => panic!("only writes, trims and zeroes are logged"),
            })
            .collect();
        if !group.is_empty() {
            groups.push(group);
        }
        start = end;
    }
    groups
}
