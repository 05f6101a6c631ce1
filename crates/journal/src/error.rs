//! `JournalError`: why a journal could not be formatted, read, written or replayed.

use std::fmt;
use std::io;

/// A journal failure. Every message names the journal member.
#[derive(Debug)]
pub enum JournalError {
    /// Reading, writing or flushing the journal member failed.
    Io {
        name: String,
        what: &'static str,
        source: io::Error,
    },
    /// Neither superblock copy is valid (not a journal, or both copies damaged).
    NoSuperblock { name: String, reason: String },
    /// The member is too small or too large to hold a journal.
    BadSize { name: String, reason: String },
    /// One record is larger than the journal accepts (a sixteenth of its ring).
    RecordTooLarge {
        name: String,
        record_bytes: u64,
        max_bytes: u64,
    },
    /// An earlier write or checkpoint failed; the journal accepts nothing more.
    Failed { name: String, reason: String },
    /// Applying a replayed record to the array failed.
    Apply {
        name: String,
        seq: u64,
        source: io::Error,
    },
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::Io { name, what, source } => {
                write!(f, "journal {name}: cannot {what}: {source}")
            }
            JournalError::NoSuperblock { name, reason } => {
                write!(f, "journal {name}: no valid journal superblock: {reason}")
            }
            JournalError::BadSize { name, reason } => write!(f, "journal {name}: {reason}"),
            JournalError::RecordTooLarge {
                name,
                record_bytes,
                max_bytes,
            } => write!(
                f,
                "journal {name}: a record of {record_bytes} bytes exceeds the limit of \
                 {max_bytes} bytes (a sixteenth of the ring): use a larger journal"
            ),
            JournalError::Failed { name, reason } => {
                write!(
                    f,
                    "journal {name}: failed earlier, writes refused: {reason}"
                )
            }
            JournalError::Apply { name, seq, source } => {
                write!(f, "journal {name}: replaying record {seq} failed: {source}")
            }
        }
    }
}

impl std::error::Error for JournalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JournalError::Io { source, .. } | JournalError::Apply { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<JournalError> for io::Error {
    fn from(e: JournalError) -> io::Error {
        io::Error::other(e)
    }
}
