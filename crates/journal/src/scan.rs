//! Reading a journal: its superblock (the newer valid copy), and replay, which walks the ring
//! from the checkpointed tail and stops at the first record that is torn, damaged, of another
//! session (nonce) or out of sequence.

use member::Member;

use crate::format::{
    decode_record, Header, Record, Superblock, HEADER_BYTES, RECORD_ALIGN, RING_OFFSET,
    SUPERBLOCK_BYTES,
};
use crate::JournalError;

/// What replay found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanSummary {
    /// Valid records after the tail (wrap markers included).
    pub records: u64,
    /// Write-back records among them and their data bytes: acknowledged writes that may not
    /// be on the array yet.
    pub array_writes: u64,
    pub array_write_bytes: u64,
    /// Ring offset just past the last valid record: where the next session appends.
    pub end_offset: u64,
    /// Sequence number the next record gets.
    pub next_seq: u64,
    /// Ring bytes from the tail to `end_offset`.
    pub used_bytes: u64,
}

fn io_err(member: &dyn Member, what: &'static str, source: std::io::Error) -> JournalError {
    JournalError::Io {
        name: member.name().to_string(),
        what,
        source,
    }
}

/// Reads both superblock copies and returns the valid one with the highest generation.
pub fn read_superblock(member: &dyn Member) -> Result<Superblock, JournalError> {
    if member.len() < RING_OFFSET {
        return Err(JournalError::NoSuperblock {
            name: member.name().to_string(),
            reason: format!("the member has only {} bytes", member.len()),
        });
    }
    let mut best: Option<Superblock> = None;
    let mut reasons = Vec::new();
    for copy in 0..2u64 {
        let mut b = Box::new([0u8; SUPERBLOCK_BYTES]);
        let at = copy * SUPERBLOCK_BYTES as u64;
        member
            .read_at(&mut b[..], at)
            .map_err(|e| io_err(member, "read the superblock", e))?;
        match Superblock::decode(&b) {
            Ok(sb) if sb.generation % 2 != copy => reasons.push(format!("copy {copy}: misplaced")),
            Ok(sb) if best.as_ref().is_none_or(|b| b.generation < sb.generation) => best = Some(sb),
            Ok(_) => {}
            Err(reason) => reasons.push(format!("copy {copy}: {reason}")),
        }
    }
    let sb = best.ok_or_else(|| JournalError::NoSuperblock {
        name: member.name().to_string(),
        reason: reasons.join("; "),
    })?;
    if RING_OFFSET + sb.ring_bytes > member.len() {
        return Err(JournalError::BadSize {
            name: member.name().to_string(),
            reason: format!(
                "its ring of {} bytes does not fit the member",
                sb.ring_bytes
            ),
        });
    }
    Ok(sb)
}

/// Walks the records after the tail in order, calling `visit(seq, record)` for each valid one
/// (wrap markers are not passed). Stops at the first invalid record. `visit` errors stop the
/// walk and are returned as `JournalError::Apply`.
pub fn scan(
    member: &dyn Member,
    sb: &Superblock,
    mut visit: impl FnMut(u64, &Record<'_>) -> std::io::Result<()>,
) -> Result<ScanSummary, JournalError> {
    walk(member, sb, |seq, _, record| match record {
        Record::Wrap => Ok(()),
        _ => visit(seq, record),
    })
}

/// [`scan`], also passing each record's ring offset, wrap markers included:
/// `visit(seq, ring_offset, record)`.
pub(crate) fn walk(
    member: &dyn Member,
    sb: &Superblock,
    mut visit: impl FnMut(u64, u64, &Record<'_>) -> std::io::Result<()>,
) -> Result<ScanSummary, JournalError> {
    let mut pos = sb.tail_offset;
    let mut s = ScanSummary {
        next_seq: sb.tail_seq,
        ..ScanSummary::default()
    };
    let mut header = vec![0u8; RECORD_ALIGN as usize];
    let mut body = Vec::new();
    while s.used_bytes < sb.ring_bytes {
        let read = |buf: &mut [u8], at: u64| {
            member
                .read_at(buf, RING_OFFSET + at)
                .map_err(|e| io_err(member, "read a record", e))
        };
        read(&mut header, pos)?;
        let Some(h) = Header::decode(&header[..HEADER_BYTES]) else {
            break;
        };
        if !plausible(&h, sb, pos, s) {
            break;
        }
        body.resize(h.ring_bytes() as usize, 0);
        body[..header.len()].copy_from_slice(&header);
        if body.len() > header.len() {
            read(&mut body[header.len()..], pos + header.len() as u64)?;
        }
        let Some((_, record)) = decode_record(&body) else {
            break;
        };
        let size = h.ring_bytes();
        let step = match record {
            Record::Wrap => sb.ring_bytes - pos,
            _ => size,
        };
        if let Record::ArrayWrite { data, .. } = &record {
            s.array_writes += 1;
            s.array_write_bytes += data.len() as u64;
        }
        visit(h.seq, pos, &record).map_err(|source| JournalError::Apply {
            name: member.name().to_string(),
            seq: h.seq,
            source,
        })?;
        s.records += 1;
        s.next_seq += 1;
        s.used_bytes += step;
        pos = (pos + step) % sb.ring_bytes;
    }
    s.end_offset = pos;
    assert!(s.used_bytes <= sb.ring_bytes);
    Ok(s)
}

/// The header is the one replay expects next and its record fits the ring.
fn plausible(h: &Header, sb: &Superblock, pos: u64, s: ScanSummary) -> bool {
    let size = h.ring_bytes();
    h.seq == s.next_seq
        && h.nonce == sb.nonce
        && size <= sb.max_record_bytes().max(RECORD_ALIGN)
        && pos + size <= sb.ring_bytes
        && s.used_bytes + size <= sb.ring_bytes
}
