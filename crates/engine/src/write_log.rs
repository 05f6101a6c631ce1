//! The journal under RAID 5/6 writes: closing the write hole.
//!
//! When a journal is set ([`Array::set_journal`]), every RAID 5/6 batch of member writes (data
//! and parity of each stripe, and the member trims/zeroes of whole-stripe discards) is
//! appended to it, one record per stripe, and made durable there *before* any of it is
//! written in place: a `MemberOps` record with every byte, or, for a write-back apply
//! ([`Array::write_applied`]), a `StripeApply` record with the parity bytes and references to
//! the client's `ArrayWrite` records that hold the data already (logged once, as md's
//! raid5-cache does). The records are marked complete once the in-place writes have
//! returned, and a checkpoint (driven by the layer above, which flushes the volume first)
//! releases them. Replay (`Parts::apply_logged`) writes the logged operations again, which
//! leaves every logged stripe consistent. The engine calls down into the journal (the
//! `journal` crate: format, ring writer, resolving references at replay); the journal knows
//! nothing of arrays. The logging
//! and its bound are the array's [`Parts`]' (the RAID 5/6 data path logs through them); the
//! array's public operations call them.

use std::sync::Arc;

use journal::{
    push_data_op, replay, DataSource, Journal, JournalError, MemberOp, Record, RecordsBound,
    ScanSummary, Superblock, APPLY_ENTRY_BYTES,
};
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

    /// A bound of the records a write-back apply of `len` bytes at `offset` from `sources`
    /// sources ([`Array::write_applied`]) logs: zero unless this array logs its writes (RAID
    /// 5/6 with a journal set). A fact of the geometry; what the ring must hold for it is the
    /// write-back cache's business (`export::ring_budget`).
    pub fn logged_bytes_bound(&self, offset: u64, len: u64, sources: usize) -> RecordsBound {
        self.parts.logged_bytes_bound(offset, len, sources)
    }

    /// Replays the stripes logged to the journal on `member` (superblock `sb`, checked to be
    /// this array's): every `MemberOps` and `StripeApply` record after the tail, in sequence,
    /// references resolved by `journal::replay` (`Parts::apply_logged`), then flushes. Afterwards every stripe being written at the
    /// crash is consistent on the present members. Write-back records are left to the layer
    /// above (`export::replay_array_writes`); nothing is written to the journal.
    pub fn replay_journal(
        &self,
        member: &dyn Member,
        sb: &Superblock,
    ) -> Result<ScanSummary, JournalError> {
        let summary = replay(member, sb, |_, ops| {
            self.parts.apply_logged(ops).map_err(std::io::Error::from)
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

    /// A bound of the records a write-back apply from `sources` sources, all within `len`
    /// bytes at `offset`, logs; zero unless this array logs its writes. Per stripe touched,
    /// one record: its header, every parity chunk (a stripe's parity range may be wider than
    /// the write), and an entry per operation (data and parity of every member, twice: a
    /// stripe's data may be cut into more pieces); plus, per source, one entry for data (each
    /// source boundary cuts one data operation in two, and a data operation carries its bytes
    /// only when that is smaller than its references) and one per parity block (a merged
    /// apply writes parity over each range its scattered pieces change: at most one range per
    /// source), counted once in the total and in the largest record. The data itself is in
    /// the client's records, not here.
    pub(crate) fn logged_bytes_bound(&self, offset: u64, len: u64, sources: usize) -> RecordsBound {
        let geometry = &self.geometry;
        let parity = geometry.parity_count() as u64;
        if len == 0 || parity == 0 || self.journal().is_none() {
            return RecordsBound::default();
        }
        let (stripe, chunk) = (geometry.stripe_data_bytes(), geometry.chunk_bytes());
        let stripes = (offset + len - 1) / stripe - offset / stripe + 1;
        let ops = 2 * (stripe / chunk + parity);
        let per_stripe = Record::member_ops_ring_bytes_max(ops, parity * chunk);
        let references = sources as u64 * (1 + parity) * APPLY_ENTRY_BYTES as u64;
        RecordsBound {
            total: stripes * per_stripe + references,
            largest: per_stripe + references,
        }
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
                MemberOp::FromRecord { .. } => panic!("replay resolves references"),
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
        let spans = ops.iter().map(MemberOp::span);
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
    /// which replay applies whole or not at all. `applied`: the batch is a write-back apply's,
    /// whose data the journal holds already.
    pub(crate) fn run_logged(
        &self,
        ops: Vec<MemOp<'_>>,
        group_ends: &[usize],
        applied: Option<Applied<'_>>,
    ) -> Result<(), IoError> {
        let Some(journal) = self.journal() else {
            return self.run(ops);
        };
        let records = logged_records(&ops, group_ends, applied.as_ref());
        let ticket = append(&journal, &records)?;
        drop(records);
        self.run_then_complete(&journal, ticket, ops)
    }

    /// A write-back apply that writes more in place (`written`) than it logs (`logged`,
    /// grouped by `group_ends`): the bytes written and not logged must be rewritten with the
    /// values they hold, read under the stripe locks held, so a torn write cannot change them
    /// and replaying the records leaves every stripe consistent (`raid56::merged`).
    pub(crate) fn run_logged_apart(
        &self,
        written: Vec<MemOp<'_>>,
        logged: &[MemOp<'_>],
        group_ends: &[usize],
        applied: Applied<'_>,
    ) -> Result<(), IoError> {
        let Some(journal) = self.journal() else {
            return self.run(written);
        };
        let records = logged_records(logged, group_ends, Some(&applied));
        let ticket = append(&journal, &records)?;
        drop(records);
        self.run_then_complete(&journal, ticket, written)
    }

    /// Runs `ops` and marks the records of `ticket` (if any) complete.
    fn run_then_complete(
        &self,
        journal: &Journal,
        ticket: Option<journal::Ticket>,
        ops: Vec<MemOp<'_>>,
    ) -> Result<(), IoError> {
        let result = self.run(ops);
        if let Some(ticket) = ticket {
            journal.complete(ticket);
        }
        result
    }
}

/// Appends `records` durably (none: nothing to wait for).
fn append(journal: &Journal, records: &[Record<'_>]) -> Result<Option<journal::Ticket>, IoError> {
    if records.is_empty() {
        return Ok(None);
    }
    let ticket = journal.append(records).map_err(|e| IoError::Journal {
        source: Arc::new(e.into()),
    })?;
    Ok(Some(ticket))
}

/// A write-back apply's batch of member writes ([`Array::write_applied`]).
pub(crate) struct Applied<'a> {
    /// Per operation of the batch: the array offset of the data it writes; `None` for parity.
    pub(crate) array_offsets: &'a [Option<u64>],
    /// The `ArrayWrite` records holding the buffer's bytes.
    pub(crate) sources: &'a [DataSource],
}

/// One record per non-empty group of `ops`: `MemberOps`, or `StripeApply` for an apply.
fn logged_records<'b>(
    ops: &'b [MemOp<'_>],
    group_ends: &[usize],
    applied: Option<&Applied<'_>>,
) -> Vec<Record<'b>> {
    assert_eq!(group_ends.last().copied().unwrap_or(0), ops.len());
    if let Some(applied) = applied {
        assert_eq!(applied.array_offsets.len(), ops.len());
    }
    let role = |r: usize| u32::try_from(r).expect("role fits u32");
    let mut records = Vec::with_capacity(group_ends.len());
    let mut start = 0;
    for &end in group_ends {
        assert!(start <= end);
        let mut group: Vec<MemberOp<'b>> = Vec::with_capacity(end - start);
        for (i, op) in ops.iter().enumerate().take(end).skip(start) {
            match op {
                MemOp::Write {
                    role: r,
                    offset,
                    buf,
                } => match applied.and_then(|a| Some((a, a.array_offsets[i]?))) {
                    Some((a, at)) => {
                        push_data_op(&mut group, role(*r), *offset, at, buf, a.sources)
                    }
                    None => group.push(MemberOp::Write {
                        role: role(*r),
                        offset: *offset,
                        data: buf,
                    }),
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
                } => group.push(MemberOp::Zero {
                    role: role(*r),
                    offset: *offset,
                    len: *len,
                }),
                _ => panic!("only writes, trims and zeroes are logged"),
            }
        }
        if !group.is_empty() {
            records.push(match applied {
                Some(_) => Record::StripeApply(group),
                None => Record::MemberOps(group),
            });
        }
        start = end;
    }
    records
}
