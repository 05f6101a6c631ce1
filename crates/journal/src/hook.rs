//! The journal inside an array: [`WriteThroughLog`] implements the engine's `WriteLog` hook,
//! and [`recover`] replays a journal into an array at assembly.

use std::io;
use std::sync::Arc;

use engine::{Array, LogTicket, LoggedOp, WriteLog};
use member::Member;

use crate::format::{MemberOp, Record, Superblock, HEADER_BYTES, OP_ENTRY_BYTES, RECORD_ALIGN};
use crate::scan::{scan, ScanSummary};
use crate::writeback::{replay_array_write, Backing};
use crate::writer::{Journal, Ticket};
use crate::JournalError;

/// Logs each stripe's member writes as one `MemberOps` record before they are written in
/// place; all stripes of a request go to the journal in one group commit.
#[derive(Debug)]
pub struct WriteThroughLog {
    journal: Arc<Journal>,
}

impl WriteThroughLog {
    pub fn new(journal: Arc<Journal>) -> WriteThroughLog {
        WriteThroughLog { journal }
    }
}

impl WriteLog for WriteThroughLog {
    fn log(&self, groups: &[Vec<LoggedOp<'_>>]) -> io::Result<LogTicket> {
        let records: Vec<Record<'_>> = groups
            .iter()
            .map(|g| Record::MemberOps(g.iter().map(to_member_op).collect()))
            .collect();
        let ticket = self.journal.append(&records)?;
        Ok(LogTicket(ticket.first, ticket.last))
    }

    fn done(&self, ticket: LogTicket) {
        self.journal.complete(Ticket {
            first: ticket.0,
            last: ticket.1,
        });
    }
}

/// [`Backing::stripe_bytes`](crate::Backing::stripe_bytes) of an array: its unit of stripe
/// locking (applied runs are cut there): the full-stripe data size with parity, else the chunk.
pub fn array_stripe_bytes(array: &Array) -> u64 {
    array.geometry().unit_bytes()
}

/// [`Backing::logged_bytes_bound`](crate::Backing::logged_bytes_bound) of an array: the ring
/// bytes the write-through records of writing `len` bytes at `offset` can take at most; 0
/// unless the array logs its writes (RAID 5/6 with a [`WriteThroughLog`]). That is the data,
/// every parity chunk of every stripe touched (gathering may merge the write with others into
/// wider parity updates), one record per stripe with its headers and alignment, and the waste
/// of one wrap (at most one stripe's record, which did not fit at the ring's end).
pub fn array_logged_bytes_bound(array: &Array, offset: u64, len: u64) -> u64 {
    let geometry = array.geometry();
    let parity = geometry.parity_count() as u64;
    if len == 0 || parity == 0 || !array.has_write_log() {
        return 0;
    }
    let (stripe, chunk) = (geometry.stripe_data_bytes(), geometry.chunk_bytes());
    let stripes = (offset + len - 1) / stripe - offset / stripe + 1;
    let ops = 2 * (stripe / chunk + parity);
    let per_stripe =
        parity * chunk + HEADER_BYTES as u64 + 8 + ops * OP_ENTRY_BYTES as u64 + RECORD_ALIGN;
    let wrap = len.min(stripe) + per_stripe;
    len + stripes * per_stripe + wrap
}

fn to_member_op<'a>(op: &LoggedOp<'a>) -> MemberOp<'a> {
    let role = |r: usize| u32::try_from(r).expect("role fits u32");
    match *op {
        LoggedOp::Write {
            role: r,
            offset,
            data,
        } => MemberOp::Write {
            role: role(r),
            offset,
            data,
        },
        LoggedOp::Zero {
            role: r,
            offset,
            len,
        } => MemberOp::Zero {
            role: role(r),
            offset,
            len,
        },
    }
}

fn to_logged_op<'a>(op: &MemberOp<'a>) -> LoggedOp<'a> {
    match *op {
        MemberOp::Write { role, offset, data } => LoggedOp::Write {
            role: role as usize,
            offset,
            data,
        },
        MemberOp::Zero { role, offset, len } => LoggedOp::Zero {
            role: role as usize,
            offset,
            len,
        },
    }
}

/// Replays the journal on `member` into `array`, in two passes: first every `MemberOps`
/// record in sequence (physical redo: afterwards every logged stripe is consistent on the
/// present members), then, with `backing`, every `ArrayWrite` record as whole-stripe
/// rewrites (so parity is recomputed). Flushes the array after each pass. Nothing is
/// written to the journal; call [`Journal::start`] with the summary afterwards.
pub fn recover(
    member: &dyn Member,
    sb: &Superblock,
    array: &Array,
    backing: Option<&dyn Backing>,
) -> Result<ScanSummary, JournalError> {
    let apply_err = |seq: u64, e: io::Error| JournalError::Apply {
        name: member.name().to_string(),
        seq,
        source: e,
    };
    let summary = scan(member, sb, |_, record| match record {
        Record::MemberOps(ops) => {
            let logged: Vec<LoggedOp<'_>> = ops.iter().map(to_logged_op).collect();
            array.apply_logged(&logged).map_err(io::Error::from)
        }
        _ => Ok(()),
    })?;
    array
        .flush()
        .map_err(|e| apply_err(summary.next_seq, e.into()))?;
    if summary.array_writes > 0 {
        let backing = backing.ok_or_else(|| {
            apply_err(
                summary.next_seq,
                io::Error::other("write-back records found but no array to apply them to"),
            )
        })?;
        let again = scan(member, sb, |_, record| match record {
            Record::ArrayWrite { offset, data } => replay_array_write(backing, *offset, data),
            _ => Ok(()),
        })?;
        assert_eq!(again, summary, "the journal changed during replay");
        backing
            .flush()
            .map_err(|e| apply_err(summary.next_seq, e))?;
    }
    Ok(summary)
}
