//! The journal under RAID 5/6 writes: closing the write hole.
//!
//! When a journal is set ([`Array::set_journal`]), every RAID 5/6 batch of member writes (data
//! and parity of each stripe, and the member trims/zeroes of whole-stripe discards) is
//! appended to it, one `MemberOps` record per stripe, and made durable there *before* any of
//! it is written in place; the records are marked complete once the in-place writes have
//! returned, and a checkpoint (driven by the layer above, which flushes the volume first)
//! releases them. Replay (`Parts::apply_logged`) writes the logged operations again, which
//! leaves every logged stripe consistent. The engine calls down into the journal (the
//! `journal` crate: format and ring writer); the journal knows nothing of arrays. The logging
//! and its bound are the array's [`Parts`]' (the RAID 5/6 data path logs through them); the
//! array's public operations call them.

use std::sync::Arc;

use journal::{scan, Journal, JournalError, MemberOp, Record, ScanSummary, Superblock};
use member::Member;

use crate::error::IoError;
use crate::io::MemOp;
use crate::parts::Parts;
use crate::Array;

impl Array {
    /// Sets (or, with `None`, removes) the journal RAID 5/6 writes are logged to.
    pub fn set_journal(&self, journal: Option<Arc<Journal>>) {
        *self
            .parts
            .journal
            .write()
            .unwrap_or_else(|p| p.into_inner()) = journal;
    }

    /// The ring bytes the records logged by writing `len` bytes at `offset` can take at most;
    /// 0 unless this array logs its writes (RAID 5/6 with a journal set).
    pub fn logged_bytes_bound(&self, offset: u64, len: u64) -> u64 {
        self.parts.logged_bytes_bound(offset, len)
    }

    /// Replays the stripes logged to the journal on `member` (superblock `sb`, checked to be
    /// this array's): every `MemberOps` record after the tail, in sequence
    /// (`Parts::apply_logged`), then flushes. Afterwards every stripe being written at the
    /// crash is consistent on the present members. Write-back records are left to the layer
    /// above (`export::replay_array_writes`); nothing is written to the journal.
    pub fn replay_journal(
        &self,
        member: &dyn Member,
        sb: &Superblock,
    ) -> Result<ScanSummary, JournalError> {
        let summary = scan(member, sb, |_, record| match record {
            Record::MemberOps(ops) => self.parts.apply_logged(ops).map_err(std::io::Error::from),
            _ => Ok(()),
        })?;
        self.flush().map_err(|e| JournalError::Apply {
            name: member.name().to_string(),
            seq: summary.next_seq,
            source: e.into(),
        })?;
        Ok(summary)
    }
}

impl Parts {
    /// The journal RAID 5/6 writes are logged to, if one is set.
    fn journal(&self) -> Option<Arc<Journal>> {
        self.journal
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The ring bytes the records logged by writing `len` bytes at `offset` can take at most;
    /// 0 unless this array logs its writes (RAID 5/6 with a journal set). That is the data,
    /// every parity chunk of every stripe touched (gathering may merge the write with others
    /// into wider parity updates, and cut a stripe's data into more pieces), one record per
    /// stripe with its headers and alignment, and the waste of one wrap (at most one stripe's
    /// record, which did not fit at the ring's end).
    pub(crate) fn logged_bytes_bound(&self, offset: u64, len: u64) -> u64 {
        let geometry = &self.geometry;
        let parity = geometry.parity_count() as u64;
        if len == 0 || parity == 0 || self.journal().is_none() {
            return 0;
        }
        let (stripe, chunk) = (geometry.stripe_data_bytes(), geometry.chunk_bytes());
        let stripes = (offset + len - 1) / stripe - offset / stripe + 1;
        let ops = 2 * (stripe / chunk + parity);
        let per_stripe = Record::member_ops_ring_bytes_max(ops, parity * chunk);
        let wrap = len.min(stripe) + per_stripe;
        len + stripes * per_stripe + wrap
    }

    /// Re-applies one replayed `MemberOps` record, skipping roles that are missing or failed
    /// (the present members then hold consistent stripes). Holds the stripe locks of the
    /// rows touched, so background work (a resync rewriting parity) cannot interleave with a
    /// replayed stripe. Writes are in place only; the caller flushes.
    pub(crate) fn apply_logged(&self, ops: &[MemberOp<'_>]) -> Result<(), IoError> {
        let Some((first, end)) = self.logged_rows(ops) else {
            return Ok(());
        };
        let _held = self.locks.lock_range(first, end);
        let writable = self.writable_snapshot();
        let mem_ops: Vec<MemOp<'_>> = ops
            .iter()
            .map(|op| match *op {
                MemberOp::Write { role, offset, data } => MemOp::Write {
                    role: role as usize,
                    offset,
                    buf: data,
                },
                MemberOp::Zero { role, offset, len } => MemOp::Zero {
                    role: role as usize,
                    offset,
                    len,
                },
            })
            .filter(|op| {
                let role = op.role();
                assert!(role < writable.len(), "logged role {role} not in the array");
                writable[role]
            })
            .collect();
        self.run(mem_ops)
    }

    /// The stripe rows `first..end` the ops touch (a row of a RAID 5/6 member's data area is
    /// one chunk of one stripe); `None` for no ops.
    fn logged_rows(&self, ops: &[MemberOp<'_>]) -> Option<(u64, u64)> {
        let chunk = self.geometry.chunk_bytes();
        let spans = ops.iter().map(|op| match *op {
            MemberOp::Write { offset, data, .. } => (offset, data.len() as u64),
            MemberOp::Zero { offset, len, .. } => (offset, len),
        });
        let first = spans.clone().map(|(offset, _)| offset / chunk).min()?;
        let end = spans
            .map(|(offset, len)| (offset + len.max(1) - 1) / chunk + 1)
            .max()?;
        assert!(
            self.geometry.has_parity(),
            "member operations are logged only for RAID 5/6"
        );
        Some((first, end))
    }

    /// Runs a batch of member writes, logging it first when a journal is set. `group_ends`
    /// are the indexes in `ops` where each stripe's group ends: each group is one record,
    /// which replay applies whole or not at all.
    pub(crate) fn run_logged(
        &self,
        ops: Vec<MemOp<'_>>,
        group_ends: &[usize],
    ) -> Result<(), IoError> {
        let Some(journal) = self.journal() else {
            return self.run(ops);
        };
        let records = logged_records(&ops, group_ends);
        if records.is_empty() {
            return self.run(ops);
        }
        let ticket = journal
            .append(&records)
            .map_err(|e| IoError::Journal { source: e.into() })?;
        drop(records);
        let result = self.run(ops);
        journal.complete(ticket);
        result
    }
}

/// One `MemberOps` record per non-empty group of `ops`.
fn logged_records<'b>(ops: &'b [MemOp<'_>], group_ends: &[usize]) -> Vec<Record<'b>> {
    assert_eq!(group_ends.last().copied().unwrap_or(0), ops.len());
    let role = |r: usize| u32::try_from(r).expect("role fits u32");
    let mut records = Vec::with_capacity(group_ends.len());
    let mut start = 0;
    for &end in group_ends {
        assert!(start <= end);
        let group: Vec<MemberOp<'b>> = ops[start..end]
            .iter()
            .map(|op| match op {
                MemOp::Write {
                    role: r,
                    offset,
                    buf,
                } => MemberOp::Write {
                    role: role(*r),
                    offset: *offset,
                    data: buf,
                },
                MemOp::Trim {
                    role: r,
                    offset,
                    len,
                }
                | MemOp::Zero {
                    role: r,
                    offset,
                    len,
                } => MemberOp::Zero {
                    role: role(*r),
                    offset: *offset,
                    len: *len,
                },
                _ => panic!("only writes, trims and zeroes are logged"),
            })
            .collect();
        if !group.is_empty() {
            records.push(Record::MemberOps(group));
        }
        start = end;
    }
    records
}
