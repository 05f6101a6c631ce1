//! Member errors.

use std::fmt;
use std::io;

use crate::size::SizeError;

/// Why a member could not be opened or created.
#[derive(Debug)]
pub enum MemberError {
    /// The spec was empty.
    EmptySpec,
    /// `mem:SIZE` with a size that does not parse.
    BadSpec { spec: String, source: SizeError },
    /// A member of zero bytes.
    Empty { name: String },
    /// The path is neither a regular file nor a block device.
    NotFileOrDevice { name: String, kind: String },
    /// The file does not exist and no size to create it with was given.
    Missing { name: String },
    /// A disk-model member spec (`sim:CLASS:SIZE[:OPTIONS]`) that does not parse.
    BadModel { spec: String, reason: String },
    /// A remote member URI that does not parse.
    BadUri { spec: String, reason: String },
    /// The member was reached but cannot be used as asked.
    Refused { name: String, reason: String },
    /// Another array or program holds the member (its lock or exclusive claim); `holder` says
    /// who when `/proc` tells.
    InUse {
        name: String,
        holder: Option<Holder>,
    },
    /// An I/O error while opening, creating or sizing the member.
    Io {
        name: String,
        action: &'static str,
        source: io::Error,
    },
}

impl fmt::Display for MemberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberError::EmptySpec => write!(f, "empty member name"),
            MemberError::BadSpec { spec, source } => {
                write!(f, "member {spec}: bad RAM member size: {source}")
            }
            MemberError::BadModel { spec, reason } => write!(
                f,
                "member {spec}: bad disk-model member: {reason} (the form is \
                 sim:CLASS:SIZE[:OPTION,...], e.g. sim:hdd7200:1G or sim:ssd:4G:cache=off)"
            ),
            MemberError::BadUri { spec, reason } => {
                write!(f, "member {spec}: bad NBD URI: {reason}")
            }
            MemberError::Refused { name, reason } => {
                write!(f, "member {name}: cannot use it: {reason}")
            }
            MemberError::InUse {
                name,
                holder: Some(Holder::ThisProcess),
            } => write!(
                f,
                "member {name}: is the same file or device as a member given earlier, under \
                 another name (a symlink, or another path to it): give each member once"
            ),
            MemberError::InUse { name, holder } => {
                write!(f, "member {name}: is in use by another array or program")?;
                if let Some(Holder::Others(holder)) = holder {
                    write!(f, " ({holder})")?;
                }
                write!(
                    f,
                    "; an array's members are held exclusively while it runs, so stop the \
                     server that uses it (or unmount it) first; `raidkit examine` reads it anyway"
                )
            }
            MemberError::Empty { name } => write!(f, "member {name}: has a size of zero bytes"),
            MemberError::NotFileOrDevice { name, kind } => write!(
                f,
                "member {name}: is a {kind}, not a regular file or block device"
            ),
            MemberError::Missing { name } => write!(
                f,
                "member {name}: does not exist (give a size to create it)"
            ),
            MemberError::Io {
                name,
                action,
                source,
            } => write!(f, "member {name}: cannot {action}: {source}"),
        }
    }
}

impl std::error::Error for MemberError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MemberError::BadSpec { source, .. } => Some(source),
            MemberError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Checks that `[offset, offset + len)` lies inside a member of `size` bytes; the error names the
/// member and the operation. Backends call this before any I/O.
pub fn check_range(name: &str, op: &str, offset: u64, len: u64, size: u64) -> io::Result<()> {
    let end = offset.checked_add(len);
    match end {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "member {name}: {op} of {len} bytes at offset {offset} goes past the end ({size} bytes)"
            ),
        )),
    }
}

/// [`check_range`] of `op` on `member`, by its own name and length.
pub(crate) fn check_member_range<M: crate::Member + ?Sized>(
    member: &M,
    op: &str,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    check_range(member.name(), op, offset, len, member.len())
}

/// Wraps an OS error so its message names the member and the operation.
pub(crate) fn annotate(name: &str, op: &str, offset: u64, len: u64, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("member {name}: {op} of {len} bytes at offset {offset}: {e}"),
    )
}

/// Who holds a member that could not be claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// This very process: the member was given twice, under two names.
    ThisProcess,
    /// Others, described ("pid 123 (raidkit serve ...)", "it is mounted at /mnt").
    Others(String),
}
