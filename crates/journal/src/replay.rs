//! Physical replay: the member operations of every `MemberOps` and `StripeApply` record after
//! the tail, in sequence, with the data a `StripeApply` record refers to read from the
//! `ArrayWrite` records holding it.
//!
//! A `StripeApply` record (a write-back apply's stripe) carries its parity and names the
//! client records its data came from, which are older (a client record is submitted before
//! its bytes enter the write-back buffer an applier copies from). A source before the tail is
//! not in the ring any more, and then the whole record is skipped: the write-back cache
//! completes a client record only after every apply that copied bytes of it returned, and that
//! apply's own records completed before it returned; a checkpoint moved the tail past the
//! source, so it found the apply's records complete and flushed the array after their in-place
//! writes. The stripe's data and parity were durable on the members (docs/FORMAT.md "Replay").

use std::io;

use member::Member;

use crate::format::{
    Header, MemberOp, Record, Superblock, HEADER_BYTES, KIND_ARRAY_WRITE, RING_OFFSET,
};
use crate::scan::{walk, ScanSummary};
use crate::JournalError;

/// Bytes of an `ArrayWrite` payload before its data: `offset`, `len`.
const ARRAY_WRITE_HEAD: usize = 16;

/// Walks the records after the tail like [`crate::scan`] and calls `apply(seq, ops)` with the
/// member operations of each `MemberOps` record and of each `StripeApply` record whose sources
/// are all after the tail, its `FromRecord` operations resolved into writes of the bytes they
/// name (read from the ring one operation at a time). `ArrayWrite` records are left to the
/// caller (a second [`crate::scan`]). Memory: one ring offset per record after the tail (at
/// most `ring_bytes / 64` bytes), and one record's resolved data.
pub fn replay(
    member: &dyn Member,
    sb: &Superblock,
    mut apply: impl FnMut(u64, &[MemberOp<'_>]) -> io::Result<()>,
) -> Result<ScanSummary, JournalError> {
    let mut positions: Vec<u64> = Vec::new();
    walk(member, sb, |seq, pos, record| {
        assert_eq!(
            seq,
            sb.tail_seq + positions.len() as u64,
            "records in sequence"
        );
        positions.push(pos);
        match record {
            Record::MemberOps(ops) => apply(seq, ops),
            Record::StripeApply(ops) => match resolve(member, sb, &positions, ops)? {
                Some(data) => apply(seq, &with_data(ops, &data)),
                None => Ok(()),
            },
            Record::ArrayWrite { .. } | Record::Wrap => Ok(()),
        }
    })
}

/// The bytes of each `FromRecord` operation of `ops`, in order; `None` when one names a
/// record before the tail (the record is skipped, see the module documentation).
fn resolve(
    member: &dyn Member,
    sb: &Superblock,
    positions: &[u64],
    ops: &[MemberOp<'_>],
) -> io::Result<Option<Vec<Vec<u8>>>> {
    let mut data = Vec::new();
    for op in ops {
        let MemberOp::FromRecord {
            len,
            seq,
            array_offset,
            ..
        } = *op
        else {
            continue;
        };
        if seq < sb.tail_seq {
            return Ok(None);
        }
        let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        // Never the record itself or a later one: the last position is the record's own.
        let pos = *positions[..positions.len() - 1]
            .get((seq - sb.tail_seq) as usize)
            .ok_or_else(|| invalid(format!("refers to record {seq}, which is not before it")))?;
        let mut head = [0u8; HEADER_BYTES + ARRAY_WRITE_HEAD];
        read(member, &mut head, pos)?;
        let is_source =
            Header::decode(&head).is_some_and(|h| h.seq == seq && h.kind == KIND_ARRAY_WRITE);
        let at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
        let (offset, source_len) = (at(HEADER_BYTES), at(HEADER_BYTES + 8));
        let inside = array_offset >= offset
            && array_offset
                .checked_add(len)
                .is_some_and(|end| end <= offset.saturating_add(source_len));
        if !(is_source && inside) {
            return Err(invalid(format!(
                "refers to array bytes {array_offset}+{len} of record {seq}, which does not \
                 hold them"
            )));
        }
        let mut bytes = vec![0u8; usize::try_from(len).map_err(|e| invalid(e.to_string()))?];
        let from = (HEADER_BYTES + ARRAY_WRITE_HEAD) as u64 + (array_offset - offset);
        read(member, &mut bytes, pos + from)?;
        data.push(bytes);
    }
    Ok(Some(data))
}

/// `ops` with each `FromRecord` operation replaced by a write of the next bytes of `data`.
fn with_data<'a>(ops: &[MemberOp<'a>], data: &'a [Vec<u8>]) -> Vec<MemberOp<'a>> {
    let mut data = data.iter();
    ops.iter()
        .map(|op| match *op {
            MemberOp::FromRecord {
                role, offset, len, ..
            } => {
                let bytes = data.next().expect("resolved");
                assert_eq!(bytes.len() as u64, len);
                MemberOp::Write {
                    role,
                    offset,
                    data: bytes,
                }
            }
            ref other => other.clone(),
        })
        .collect()
}

fn read(member: &dyn Member, buf: &mut [u8], ring_offset: u64) -> io::Result<()> {
    member.read_at(buf, RING_OFFSET + ring_offset)
}
