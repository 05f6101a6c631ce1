//! The on-disk format (docs/FORMAT.md, "Journal"): two superblock copies, then a ring of
//! sector-aligned, checksummed, consecutively numbered records. Pure bytes ⇄ types, no I/O.

use uuid::Uuid;

/// Bytes of one superblock copy; copies at member bytes 0 and 4096.
pub const SUPERBLOCK_BYTES: usize = 4096;
/// Where the ring starts on the journal member.
pub const RING_OFFSET: u64 = 2 * SUPERBLOCK_BYTES as u64;
/// Every record starts and ends on this boundary (sector writes are atomic).
pub const RECORD_ALIGN: u64 = 512;
/// Bytes of a record header.
pub const HEADER_BYTES: usize = 64;
/// Smallest ring: 1 MiB.
pub const RING_BYTES_MIN: u64 = 1 << 20;
/// Superblock magic: ASCII `RAIDKJNL`.
pub const SB_MAGIC: [u8; 8] = *b"RAIDKJNL";
/// Record magic (`RKJR` read as little-endian bytes).
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"RKJR");
/// Journal format version written: 2 adds `StripeApply` records. Version 1 journals (kinds 1–3
/// only) are read and replayed; a session started on one rewrites its superblock as version 2.
pub const JOURNAL_VERSION: u32 = 2;
/// Oldest journal format version read.
pub const JOURNAL_VERSION_MIN: u32 = 1;
/// Bytes of one member-operation entry in a `MemberOps` payload.
pub const OP_ENTRY_BYTES: usize = 24;
/// Bytes of one member-operation entry in a `StripeApply` payload (a `MemberOps` entry, then
/// the source record's `seq` and the array offset of the bytes it holds).
pub const APPLY_ENTRY_BYTES: usize = 40;

/// How the journal protects the array; the same code is stored in the array superblocks'
/// `journal_kind`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Member writes (data and parity) are logged before they are written in place.
    #[default]
    WriteThrough = 1,
    /// Writes are acknowledged once logged and applied to the array in the background.
    WriteBack = 2,
}

impl Mode {
    pub fn code(self) -> u32 {
        self as u32
    }
    pub fn from_code(code: u32) -> Option<Mode> {
        match code {
            1 => Some(Mode::WriteThrough),
            2 => Some(Mode::WriteBack),
            _ => None,
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::WriteThrough => "write-through",
            Mode::WriteBack => "write-back",
        })
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "write-through" => Ok(Mode::WriteThrough),
            "write-back" => Ok(Mode::WriteBack),
            _ => Err(format!(
                "unknown journal mode {s:?} (write-through or write-back)"
            )),
        }
    }
}

/// The journal superblock. The copy with the highest valid `generation` is current.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub mode: Mode,
    pub array_uuid: Uuid,
    pub journal_uuid: Uuid,
    pub ring_bytes: u64,
    /// Bumped on every superblock write; selects the copy (`generation % 2`) written.
    pub generation: u64,
    /// Ring offset of the first record replay must read.
    pub tail_offset: u64,
    /// Sequence number replay expects there.
    pub tail_seq: u64,
    /// Random per session: records carry it, so stale records of an earlier session never
    /// replay.
    pub nonce: u64,
}

const OFF_VERSION: usize = 8;
const OFF_MODE: usize = 12;
const OFF_ARRAY_UUID: usize = 16;
const OFF_JOURNAL_UUID: usize = 32;
const OFF_RING_OFFSET: usize = 48;
const OFF_RING_BYTES: usize = 56;
const OFF_GENERATION: usize = 64;
const OFF_TAIL_OFFSET: usize = 72;
const OFF_TAIL_SEQ: usize = 80;
const OFF_NONCE: usize = 88;
const OFF_SB_CRC: usize = SUPERBLOCK_BYTES - 4;

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn get_uuid(b: &[u8], at: usize) -> Uuid {
    Uuid::from_bytes(b[at..at + 16].try_into().expect("16 bytes"))
}

/// Rounds `n` up to the record alignment.
pub fn align_up(n: u64) -> u64 {
    n.div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

impl Superblock {
    /// Member byte offset of the copy this generation is written to.
    pub fn copy_offset(&self) -> u64 {
        (self.generation % 2) * SUPERBLOCK_BYTES as u64
    }

    /// Largest record (header, payload, padding) the ring accepts: a sixteenth of it.
    pub fn max_record_bytes(&self) -> u64 {
        (self.ring_bytes / 16) / RECORD_ALIGN * RECORD_ALIGN
    }

    pub fn encode(&self) -> Box<[u8; SUPERBLOCK_BYTES]> {
        self.assert_valid();
        let mut b = Box::new([0u8; SUPERBLOCK_BYTES]);
        b[..8].copy_from_slice(&SB_MAGIC);
        put_u32(&mut b[..], OFF_VERSION, JOURNAL_VERSION);
        put_u32(&mut b[..], OFF_MODE, self.mode.code());
        b[OFF_ARRAY_UUID..OFF_ARRAY_UUID + 16].copy_from_slice(self.array_uuid.as_bytes());
        b[OFF_JOURNAL_UUID..OFF_JOURNAL_UUID + 16].copy_from_slice(self.journal_uuid.as_bytes());
        put_u64(&mut b[..], OFF_RING_OFFSET, RING_OFFSET);
        put_u64(&mut b[..], OFF_RING_BYTES, self.ring_bytes);
        put_u64(&mut b[..], OFF_GENERATION, self.generation);
        put_u64(&mut b[..], OFF_TAIL_OFFSET, self.tail_offset);
        put_u64(&mut b[..], OFF_TAIL_SEQ, self.tail_seq);
        put_u64(&mut b[..], OFF_NONCE, self.nonce);
        let crc = crc32c::crc32c(&b[..OFF_SB_CRC]);
        put_u32(&mut b[..], OFF_SB_CRC, crc);
        assert_eq!(
            Superblock::decode(&b).as_ref(),
            Ok(self),
            "superblock round trip"
        );
        b
    }

    /// Decodes one copy; the error says what is wrong.
    pub fn decode(b: &[u8; SUPERBLOCK_BYTES]) -> Result<Superblock, String> {
        if b[..8] != SB_MAGIC {
            return Err("no journal magic".into());
        }
        if crc32c::crc32c(&b[..OFF_SB_CRC]) != get_u32(b, OFF_SB_CRC) {
            return Err("checksum mismatch".into());
        }
        let version = get_u32(b, OFF_VERSION);
        if !(JOURNAL_VERSION_MIN..=JOURNAL_VERSION).contains(&version) {
            return Err(format!("journal format version {version} is not supported"));
        }
        let mode = Mode::from_code(get_u32(b, OFF_MODE))
            .ok_or_else(|| format!("unknown mode code {}", get_u32(b, OFF_MODE)))?;
        if get_u64(b, OFF_RING_OFFSET) != RING_OFFSET {
            return Err("unexpected ring offset".into());
        }
        let sb = Superblock {
            mode,
            array_uuid: get_uuid(b, OFF_ARRAY_UUID),
            journal_uuid: get_uuid(b, OFF_JOURNAL_UUID),
            ring_bytes: get_u64(b, OFF_RING_BYTES),
            generation: get_u64(b, OFF_GENERATION),
            tail_offset: get_u64(b, OFF_TAIL_OFFSET),
            tail_seq: get_u64(b, OFF_TAIL_SEQ),
            nonce: get_u64(b, OFF_NONCE),
        };
        let ring_ok = sb.ring_bytes >= RING_BYTES_MIN && sb.ring_bytes.is_multiple_of(RECORD_ALIGN);
        let tail_ok = sb.tail_offset < sb.ring_bytes && sb.tail_offset.is_multiple_of(RECORD_ALIGN);
        if !ring_ok || !tail_ok {
            return Err("ring size or tail offset out of range".into());
        }
        Ok(sb)
    }

    fn assert_valid(&self) {
        assert!(self.ring_bytes >= RING_BYTES_MIN && self.ring_bytes.is_multiple_of(RECORD_ALIGN));
        assert!(
            self.tail_offset < self.ring_bytes && self.tail_offset.is_multiple_of(RECORD_ALIGN)
        );
    }
}

/// One member operation of a `MemberOps` or `StripeApply` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberOp<'a> {
    /// Write `data` at `offset` of role `role`'s data area.
    Write {
        role: u32,
        offset: u64,
        data: &'a [u8],
    },
    /// Make `[offset, offset + len)` of role `role`'s data area read as zeroes.
    Zero { role: u32, offset: u64, len: u64 },
    /// Write at `offset` of role `role`'s data area the `len` bytes that the `ArrayWrite`
    /// record `seq` holds for array bytes `[array_offset, array_offset + len)` (only in
    /// `StripeApply` records: data logged once, by the client's record).
    FromRecord {
        role: u32,
        offset: u64,
        len: u64,
        seq: u64,
        array_offset: u64,
    },
}

impl MemberOp<'_> {
    /// The role's data-area range the operation changes: `(offset, len)`.
    pub fn span(&self) -> (u64, u64) {
        match *self {
            MemberOp::Write { offset, data, .. } => (offset, data.len() as u64),
            MemberOp::Zero { offset, len, .. } | MemberOp::FromRecord { offset, len, .. } => {
                (offset, len)
            }
        }
    }

    /// Bytes of the operation the record itself carries.
    fn carried_bytes(&self) -> usize {
        match self {
            MemberOp::Write { data, .. } => data.len(),
            MemberOp::Zero { .. } | MemberOp::FromRecord { .. } => 0,
        }
    }
}

/// Where bytes a write-back apply writes come from: array bytes `[offset, offset + len)` are
/// the ones the `ArrayWrite` record `seq` holds for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSource {
    pub offset: u64,
    pub len: u64,
    pub seq: u64,
}

/// Appends to `ops` the data write of a `StripeApply` record: `data` at `offset` of role
/// `role`, the array's bytes from `array_offset` on, whose `sources` (sorted by offset, one
/// after the other) cover them. One [`MemberOp::FromRecord`] per source it crosses, or a
/// single [`MemberOp::Write`] carrying the bytes when those references would take more room
/// (many tiny sources), so a `StripeApply` record is never larger than the `MemberOps`
/// record of the same writes by more than 16 bytes per operation.
pub fn push_data_op<'a>(
    ops: &mut Vec<MemberOp<'a>>,
    role: u32,
    offset: u64,
    array_offset: u64,
    data: &'a [u8],
    sources: &[DataSource],
) {
    let end = array_offset + data.len() as u64;
    let first = sources.partition_point(|s| s.offset + s.len <= array_offset);
    let crossed = sources[first..].iter().take_while(|s| s.offset < end);
    let references = crossed.clone().count();
    if references * APPLY_ENTRY_BYTES > APPLY_ENTRY_BYTES + data.len() {
        ops.push(MemberOp::Write { role, offset, data });
        return;
    }
    let mut at = array_offset;
    for s in crossed {
        assert!(s.offset <= at, "array byte {at} has no source");
        let to = end.min(s.offset + s.len);
        ops.push(MemberOp::FromRecord {
            role,
            offset: offset + (at - array_offset),
            len: to - at,
            seq: s.seq,
            array_offset: at,
        });
        at = to;
    }
    assert_eq!(at, end, "array bytes {at}..{end} have no source");
}

/// A record's body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// Write-through: one batch of member writes (a stripe's data and parity together).
    MemberOps(Vec<MemberOp<'a>>),
    /// Write-back: `data` written at array byte `offset`.
    ArrayWrite { offset: u64, data: &'a [u8] },
    /// The ring continues at its start.
    Wrap,
    /// Write-back apply: one stripe's member writes, parity with its bytes
    /// ([`MemberOp::Write`]), data by reference to the `ArrayWrite` records holding it
    /// ([`MemberOp::FromRecord`]; a piece cut into many references may carry its bytes
    /// instead). Replay ([`crate::replay`]) resolves the references, or skips the record when
    /// one names a record before the tail (docs/FORMAT.md "Replay").
    StripeApply(Vec<MemberOp<'a>>),
}

const KIND_MEMBER_OPS: u16 = 1;
pub(crate) const KIND_ARRAY_WRITE: u16 = 2;
const KIND_WRAP: u16 = 3;
const KIND_STRIPE_APPLY: u16 = 4;
const OP_WRITE: u32 = 1;
const OP_ZERO: u32 = 2;
const OP_FROM_RECORD: u32 = 3;
const OFF_HDR_CRC: usize = 60;

impl Record<'_> {
    /// Payload bytes (after the header).
    pub fn payload_bytes(&self) -> u64 {
        match self {
            Record::MemberOps(ops) | Record::StripeApply(ops) => {
                let data: usize = ops.iter().map(MemberOp::carried_bytes).sum();
                (8 + ops.len() * self.entry_bytes() + data) as u64
            }
            Record::ArrayWrite { data, .. } => 16 + data.len() as u64,
            Record::Wrap => 0,
        }
    }

    /// Bytes the record takes in the ring (header + payload, aligned).
    pub fn ring_bytes(&self) -> u64 {
        align_up(HEADER_BYTES as u64 + self.payload_bytes())
    }

    /// An upper bound of [`Record::ring_bytes`] for a `MemberOps` or `StripeApply` record of
    /// at most `ops` operations carrying at most `data` bytes between them.
    pub fn member_ops_ring_bytes_max(ops: u64, data: u64) -> u64 {
        HEADER_BYTES as u64 + 8 + ops * APPLY_ENTRY_BYTES as u64 + data + RECORD_ALIGN
    }

    /// Bytes of one entry of the record's operation table.
    fn entry_bytes(&self) -> usize {
        match self {
            Record::StripeApply(_) => APPLY_ENTRY_BYTES,
            _ => OP_ENTRY_BYTES,
        }
    }

    /// True for write-back records (their space is bounded separately).
    pub fn is_logical(&self) -> bool {
        matches!(self, Record::ArrayWrite { .. })
    }

    fn kind(&self) -> u16 {
        match self {
            Record::MemberOps(_) => KIND_MEMBER_OPS,
            Record::ArrayWrite { .. } => KIND_ARRAY_WRITE,
            Record::Wrap => KIND_WRAP,
            Record::StripeApply(_) => KIND_STRIPE_APPLY,
        }
    }

    /// Appends the whole record (header, payload, zero padding) to `out`.
    pub fn encode_into(&self, seq: u64, nonce: u64, out: &mut Vec<u8>) {
        let start = out.len();
        let payload = self.payload_bytes();
        assert!(payload <= u32::MAX as u64, "record payload over 4 GiB");
        out.resize(start + HEADER_BYTES, 0);
        let h = &mut out[start..];
        put_u32(h, 0, RECORD_MAGIC);
        h[4..6].copy_from_slice(&self.kind().to_le_bytes());
        put_u64(h, 8, seq);
        put_u64(h, 16, nonce);
        put_u32(h, 24, payload as u32);
        self.encode_payload(out);
        assert_eq!((out.len() - start) as u64, HEADER_BYTES as u64 + payload);
        let mut crc = crc32c::crc32c(&out[start..start + OFF_HDR_CRC]);
        crc = crc32c::crc32c_append(crc, &out[start + HEADER_BYTES..]);
        put_u32(&mut out[start..], OFF_HDR_CRC, crc);
        out.resize(start + self.ring_bytes() as usize, 0);
    }

    fn encode_payload(&self, out: &mut Vec<u8>) {
        match self {
            Record::MemberOps(ops) | Record::StripeApply(ops) => {
                let apply = matches!(self, Record::StripeApply(_));
                out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
                out.extend_from_slice(&[0u8; 4]);
                for op in ops {
                    let (role, code, offset, len, source) = match *op {
                        MemberOp::Write { role, offset, data } => {
                            (role, OP_WRITE, offset, data.len() as u64, (0, 0))
                        }
                        MemberOp::Zero { role, offset, len } => {
                            (role, OP_ZERO, offset, len, (0, 0))
                        }
                        MemberOp::FromRecord {
                            role,
                            offset,
                            len,
                            seq,
                            array_offset,
                        } => {
                            assert!(apply, "only StripeApply records refer to other records");
                            (role, OP_FROM_RECORD, offset, len, (seq, array_offset))
                        }
                    };
                    out.extend_from_slice(&role.to_le_bytes());
                    out.extend_from_slice(&code.to_le_bytes());
                    out.extend_from_slice(&offset.to_le_bytes());
                    out.extend_from_slice(&len.to_le_bytes());
                    if apply {
                        out.extend_from_slice(&source.0.to_le_bytes());
                        out.extend_from_slice(&source.1.to_le_bytes());
                    }
                }
                for op in ops {
                    if let MemberOp::Write { data, .. } = op {
                        out.extend_from_slice(data);
                    }
                }
            }
            Record::ArrayWrite { offset, data } => {
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&(data.len() as u64).to_le_bytes());
                out.extend_from_slice(data);
            }
            Record::Wrap => {}
        }
    }
}

/// A record header as read from the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub seq: u64,
    pub nonce: u64,
    pub kind: u16,
    pub payload_bytes: u64,
    pub crc: u32,
}

impl Header {
    /// Decodes a header; `None` when the magic is wrong.
    pub fn decode(b: &[u8]) -> Option<Header> {
        assert!(b.len() >= HEADER_BYTES);
        (get_u32(b, 0) == RECORD_MAGIC).then(|| Header {
            kind: u16::from_le_bytes([b[4], b[5]]),
            seq: get_u64(b, 8),
            nonce: get_u64(b, 16),
            payload_bytes: get_u32(b, 24) as u64,
            crc: get_u32(b, OFF_HDR_CRC),
        })
    }

    /// Bytes of the whole record in the ring.
    pub fn ring_bytes(&self) -> u64 {
        align_up(HEADER_BYTES as u64 + self.payload_bytes)
    }
}

/// Checks the checksum of a whole record (`b` starts at its header, holds at least header +
/// payload) and decodes its body. `None`: torn, damaged or malformed.
pub fn decode_record(b: &[u8]) -> Option<(Header, Record<'_>)> {
    let h = Header::decode(b)?;
    let end = HEADER_BYTES + h.payload_bytes as usize;
    if b.len() < end {
        return None;
    }
    let mut crc = crc32c::crc32c(&b[..OFF_HDR_CRC]);
    crc = crc32c::crc32c_append(crc, &b[HEADER_BYTES..end]);
    if crc != h.crc {
        return None;
    }
    let payload = &b[HEADER_BYTES..end];
    let record = match h.kind {
        KIND_MEMBER_OPS => Record::MemberOps(decode_ops(payload, OP_ENTRY_BYTES)?),
        KIND_STRIPE_APPLY => Record::StripeApply(decode_ops(payload, APPLY_ENTRY_BYTES)?),
        KIND_ARRAY_WRITE => {
            let (head, data) = payload.split_at_checked(16)?;
            (get_u64(head, 8) == data.len() as u64).then_some(())?;
            Record::ArrayWrite {
                offset: get_u64(head, 0),
                data,
            }
        }
        KIND_WRAP if payload.is_empty() => Record::Wrap,
        _ => return None,
    };
    Some((h, record))
}

/// The operation table and data of a `MemberOps` (`entry_bytes` 24) or `StripeApply` (40)
/// payload; only the latter may hold `FromRecord` operations.
fn decode_ops(payload: &[u8], entry_bytes: usize) -> Option<Vec<MemberOp<'_>>> {
    let count = get_u32(payload.get(..8)?, 0) as usize;
    let table_end = 8usize.checked_add(count.checked_mul(entry_bytes)?)?;
    let table = payload.get(8..table_end)?;
    let mut data = &payload[table_end..];
    let mut ops = Vec::with_capacity(count);
    for entry in table.chunks_exact(entry_bytes) {
        let (role, code) = (get_u32(entry, 0), get_u32(entry, 4));
        let (offset, len) = (get_u64(entry, 8), get_u64(entry, 16));
        ops.push(match code {
            OP_WRITE => {
                let (now, rest) = data.split_at_checked(usize::try_from(len).ok()?)?;
                data = rest;
                MemberOp::Write {
                    role,
                    offset,
                    data: now,
                }
            }
            OP_ZERO => MemberOp::Zero { role, offset, len },
            OP_FROM_RECORD if entry_bytes == APPLY_ENTRY_BYTES => MemberOp::FromRecord {
                role,
                offset,
                len,
                seq: get_u64(entry, 24),
                array_offset: get_u64(entry, 32),
            },
            _ => return None,
        });
    }
    data.is_empty().then_some(ops)
}
