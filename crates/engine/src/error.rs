//! Typed errors of the engine.

use layout::{LayoutError, Level};
use std::fmt;
use std::sync::Arc;

/// Why an array could not be put together.
#[derive(Debug)]
pub enum EngineError {
    /// The geometry itself is invalid (member count, chunk size, sizes).
    Layout(LayoutError),
    /// `member_data_bytes` or `members` do not have `member_count` entries.
    MemberCountMismatch {
        member_count: usize,
        sizes_given: usize,
        members_given: usize,
    },
    /// A member is smaller than the data area the configuration gives it.
    MemberTooSmall {
        role: usize,
        name: String,
        len_bytes: u64,
        needed_bytes: u64,
    },
    /// More members missing than the level survives.
    TooManyMissing { level: Level, missing: Vec<usize> },
    /// The level keeps no redundancy, so a member cannot be rebuilt or replaced.
    NoRedundancy { level: Level },
    /// The role is not in a state that allows the change.
    RoleBusy {
        role: usize,
        state: crate::MemberHealth,
    },
}

impl EngineError {
    /// `MemberTooSmall` unless `member` holds the `needed_bytes` of data role `role` needs.
    pub(crate) fn check_fits(
        role: usize,
        member: &dyn member::Member,
        needed_bytes: u64,
    ) -> Result<(), EngineError> {
        if member.len() < needed_bytes {
            return Err(EngineError::MemberTooSmall {
                role,
                name: member.name().to_string(),
                len_bytes: member.len(),
                needed_bytes,
            });
        }
        Ok(())
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Layout(e) => write!(f, "invalid array geometry: {e}"),
            EngineError::MemberCountMismatch {
                member_count,
                sizes_given,
                members_given,
            } => write!(
                f,
                "array of {member_count} members given {sizes_given} data sizes and {members_given} members"
            ),
            EngineError::MemberTooSmall {
                role,
                name,
                len_bytes,
                needed_bytes,
            } => write!(
                f,
                "member {role} ({name}) has {len_bytes} bytes, the array needs {needed_bytes}"
            ),
            EngineError::TooManyMissing { level, missing } => write!(
                f,
                "{level} array cannot run with members {missing:?} missing: data would be lost"
            ),
            EngineError::NoRedundancy { level } => write!(
                f,
                "{level} keeps no redundancy: a member cannot be rebuilt or replaced"
            ),
            EngineError::RoleBusy { role, state } => {
                write!(f, "member {role} is {state:?}: it cannot be changed now")
            }
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Layout(e) => Some(e),
            _ => None,
        }
    }
}

impl From<LayoutError> for EngineError {
    fn from(e: LayoutError) -> EngineError {
        EngineError::Layout(e)
    }
}

/// A member operation, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
}

impl Op {
    /// The kind the I/O counters count it as.
    #[inline]
    pub(crate) fn counted(self) -> iostats::OpKind {
        match self {
            Op::Read => iostats::OpKind::Read,
            Op::Write => iostats::OpKind::Write,
            Op::Flush => iostats::OpKind::Flush,
            Op::Trim => iostats::OpKind::Trim,
            Op::WriteZeroes => iostats::OpKind::WriteZeroes,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Trim => "trim",
            Op::WriteZeroes => "write-zeroes",
        })
    }
}

/// An I/O request on the array failed. Clones share the `io::Error` source (a failure two
/// requests share: a stripe written for both, `gather`).
#[derive(Debug, Clone)]
pub enum IoError {
    /// A member operation failed.
    Member {
        role: usize,
        name: String,
        op: Op,
        offset: u64,
        len: u64,
        source: Arc<std::io::Error>,
    },
    /// Too many members are missing or failed: the data is no longer all there.
    ArrayFailed { level: Level, missing: Vec<usize> },
    /// The write-ahead log (journal) could not record a write; nothing was written in place.
    Journal { source: Arc<std::io::Error> },
    /// An online reshape's mover failed while moving the window `[start, end)` (array bytes):
    /// what the members hold there may be half moved, so requests touching it fail until the
    /// array is started again, which resumes the reshape from what is recorded.
    ReshapeWindow {
        start: u64,
        end: u64,
        reason: String,
    },
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IoError::Member {
                role,
                name,
                op,
                offset,
                len,
                source,
            } => write!(
                f,
                "member {role} ({name}): {op} of {len} bytes at offset {offset} failed: {source}"
            ),
            IoError::ArrayFailed { level, missing } => write!(
                f,
                "array failed: {level} cannot serve data with members {missing:?} missing"
            ),
            IoError::Journal { source } => write!(f, "the write was not logged: {source}"),
            IoError::ReshapeWindow { start, end, reason } => write!(
                f,
                "array bytes {start}..{end} are being moved by the reshape, which failed there \
                 ({reason}): requests there fail until the array is started again (the \
                 reshape then resumes from its recorded position)"
            ),
        }
    }
}

impl std::error::Error for IoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IoError::Member { source, .. } => Some(source.as_ref()),
            IoError::ArrayFailed { .. } => None,
            IoError::Journal { source } => Some(source.as_ref()),
            IoError::ReshapeWindow { .. } => None,
        }
    }
}

impl IoError {
    /// A member refused the request for lack of space (see [`crate::is_no_space`]).
    pub fn is_no_space(&self) -> bool {
        matches!(self, IoError::Member { source, .. } if crate::is_no_space(source))
    }

    /// A member read met a range its bad-block list records as lost and no redundancy
    /// could provide it (the request fails; the member is not at fault).
    pub fn is_lost_range(&self) -> bool {
        matches!(self, IoError::Member { op: Op::Read, source, .. } if member::is_bad_block(source))
    }

    /// The kind a caller above should see: a lack of space keeps its kind (`StorageFull`,
    /// `QuotaExceeded`: an NBD client gets `ENOSPC`, not `EIO`), everything else is `Other`.
    pub fn kind(&self) -> std::io::ErrorKind {
        match self {
            IoError::Member { source, .. } if crate::is_no_space(source) => source.kind(),
            _ => std::io::ErrorKind::Other,
        }
    }
}

impl From<IoError> for std::io::Error {
    fn from(e: IoError) -> std::io::Error {
        std::io::Error::new(e.kind(), e)
    }
}
