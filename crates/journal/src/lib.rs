//! The journal ("software battery"): a log on a separate fast member that closes the RAID 5/6
//! write hole (write-through) or acknowledges writes before they reach the array
//! (write-back). The format is in docs/FORMAT.md ("Journal"), the reasoning in
//! docs/DESIGN.md ("Journal").
//!
//! The main types:
//! - [`Superblock`] (two copies, the newer valid one wins) and [`Record`]s in a ring:
//!   [`Record::MemberOps`] (write-through: a stripe's member writes, data and parity),
//!   [`Record::ArrayWrite`] (write-back: data at an array offset), [`Record::StripeApply`]
//!   (a write-back apply's stripe: parity, and its data by reference to `ArrayWrite`
//!   records), [`Record::Wrap`].
//!   Every record carries a consecutive sequence number, the session nonce and a crc32c.
//! - [`format()`] writes an empty journal; [`read_superblock`] and [`scan`] read one back:
//!   replay walks from the checkpointed tail and stops at the first torn, damaged or
//!   out-of-sequence record; [`replay()`] passes the member operations of the records to redo
//!   physically, `StripeApply` references resolved.
//! - [`Journal`]: appends with group commit (one write and one flush for every record queued
//!   meanwhile), tracks completion and checkpoints (advance the tail; the array's owner
//!   flushes the array first: [`Journal::begin_checkpoint`], [`Checkpoint::finish`]).
//!
//! The journal knows nothing of arrays and calls nothing above it: `engine::Array` appends
//! its RAID 5/6 stripes' `MemberOps` records to a [`Journal`] and replays them
//! (`Array::replay_journal`); the `export` crate (above the volume) appends write-back
//! records, applies them to the volume, replays them at attach and runs the checkpoints.
//!
//! ```
//! use journal::{format, read_superblock, scan, Journal, Mode, Record};
//! use member::{Member, MemMember};
//! use std::sync::Arc;
//! let m: Arc<dyn Member> = Arc::new(MemMember::new("journal", 4 << 20).unwrap());
//! let sb = format(m.as_ref(), uuid::Uuid::new_v4(), Mode::WriteBack).unwrap();
//! let empty = scan(m.as_ref(), &sb, |_, _| Ok(())).unwrap();
//! let j = Journal::start(Arc::clone(&m), sb, &empty).unwrap();
//! j.append(&[Record::ArrayWrite { offset: 4096, data: b"hello" }]).unwrap();
//! drop(j); // a crash: nothing was checkpointed
//! let sb = read_superblock(m.as_ref()).unwrap();
//! let mut seen = Vec::new();
//! scan(m.as_ref(), &sb, |_, r| {
//!     if let Record::ArrayWrite { offset, data } = r { seen.push((*offset, data.to_vec())) }
//!     Ok(())
//! })
//! .unwrap();
//! assert_eq!(seen, vec![(4096, b"hello".to_vec())]);
//! ```

mod error;
mod format;
mod replay;
mod scan;
mod writer;

pub use error::JournalError;
pub use format::{
    align_up, decode_record, push_data_op, DataSource, Header, MemberOp, Mode, Record, Superblock,
    APPLY_ENTRY_BYTES, HEADER_BYTES, JOURNAL_VERSION, JOURNAL_VERSION_MIN, RECORD_ALIGN,
    RING_BYTES_MIN, RING_OFFSET, SUPERBLOCK_BYTES,
};
pub use replay::replay;
pub use scan::{read_superblock, scan, ScanSummary};
pub use writer::{
    format, Admission, Checkpoint, Journal, JournalStats, RecordsBound, Ticket, CHECKPOINT_INTERVAL,
};
