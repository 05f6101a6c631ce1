//! Validation of requests at the edge, their execution on the export, and reply encoding.
//!
//! Every client mistake becomes an NBD error in [`validate`]; a [`Command`] that passed it is
//! within the export and the limits, and [`execute`] asserts so.

use std::io;

use super::buffers::{Buffer, BufferPool};
use crate::codec::consts::*;
use crate::codec::{offset_data_header, BlockDescriptor, Chunk, Request, SimpleReply};
use crate::errno::nbd_errno;
use crate::export::{Export, StatusExtent};

/// The id we give `base:allocation` in `NBD_OPT_SET_META_CONTEXT`.
pub(crate) const BASE_ALLOCATION_ID: u32 = 1;

/// What was negotiated for one connection, plus the facts validation needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Session {
    pub size: u64,
    pub transmission_flags: u16,
    pub structured: bool,
    pub base_allocation: bool,
    pub max_request_bytes: u32,
    pub can_fast_zero: bool,
}

/// A validated request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    Read {
        offset: u64,
        length: u32,
    },
    Write {
        offset: u64,
        length: u32,
        fua: bool,
    },
    Flush,
    Trim {
        offset: u64,
        length: u32,
        fua: bool,
    },
    WriteZeroes {
        offset: u64,
        length: u32,
        may_trim: bool,
        fua: bool,
    },
    Cache {
        offset: u64,
        length: u32,
    },
    BlockStatus {
        offset: u64,
        length: u32,
        req_one: bool,
    },
    Disconnect,
}

/// Why a request is refused: the NBD error and a message for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub errno: u32,
    pub message: &'static str,
}

fn refuse(errno: u32, message: &'static str) -> Refusal {
    Refusal { errno, message }
}

/// Checks a request against the session. Order: command, flags, read-only, size, range.
pub(crate) fn validate(r: &Request, s: &Session) -> Result<Command, Refusal> {
    let allowed = allowed_flags(r.kind, s).ok_or(refuse(EINVAL, "unknown command"))?;
    if r.flags & !allowed != 0 {
        return Err(refuse(EINVAL, "command flag not valid for this command"));
    }
    let writes = matches!(r.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && s.transmission_flags & FLAG_READ_ONLY != 0 {
        return Err(refuse(EPERM, "export is read-only"));
    }
    match r.kind {
        CMD_DISC => return Ok(Command::Disconnect),
        CMD_FLUSH if r.offset != 0 || r.length != 0 => {
            return Err(refuse(EINVAL, "flush offset and length must be zero"))
        }
        CMD_FLUSH => return Ok(Command::Flush),
        CMD_READ | CMD_WRITE if r.length > s.max_request_bytes => {
            return Err(refuse(EINVAL, "request longer than the maximum block size"))
        }
        CMD_BLOCK_STATUS if !s.base_allocation => {
            return Err(refuse(EINVAL, "no metadata context was negotiated"))
        }
        CMD_BLOCK_STATUS if r.length == 0 => {
            return Err(refuse(EINVAL, "block status of zero length"))
        }
        _ => {}
    }
    check_range(r, s.size)?;
    if r.kind == CMD_WRITE_ZEROES && r.flags & CMD_FLAG_FAST_ZERO != 0 && !s.can_fast_zero {
        return Err(refuse(
            ENOTSUP,
            "fast zeroing is not supported by this export",
        ));
    }
    Ok(command(r))
}

/// Flags each command accepts in this session, or `None` for an unknown command.
fn allowed_flags(kind: u16, s: &Session) -> Option<u16> {
    let fua = if s.transmission_flags & FLAG_SEND_FUA != 0 {
        CMD_FLAG_FUA
    } else {
        0
    };
    let df = if s.structured { CMD_FLAG_DF } else { 0 };
    Some(match kind {
        CMD_READ => fua | df,
        CMD_WRITE | CMD_FLUSH | CMD_TRIM | CMD_CACHE | CMD_DISC => fua,
        CMD_WRITE_ZEROES => fua | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_BLOCK_STATUS => fua | CMD_FLAG_REQ_ONE,
        _ => return None,
    })
}

fn check_range(r: &Request, size: u64) -> Result<(), Refusal> {
    let inside = r
        .offset
        .checked_add(u64::from(r.length))
        .is_some_and(|end| end <= size);
    if inside {
        return Ok(());
    }
    // The spec asks for ENOSPC on writes past the end, EINVAL on everything else.
    Err(match r.kind {
        CMD_WRITE | CMD_WRITE_ZEROES => refuse(ENOSPC, "write past the end of the export"),
        _ => refuse(EINVAL, "request past the end of the export"),
    })
}

fn command(r: &Request) -> Command {
    let (offset, length) = (r.offset, r.length);
    let fua = r.flags & CMD_FLAG_FUA != 0;
    match r.kind {
        CMD_READ => Command::Read { offset, length },
        CMD_WRITE => Command::Write {
            offset,
            length,
            fua,
        },
        CMD_TRIM => Command::Trim {
            offset,
            length,
            fua,
        },
        CMD_WRITE_ZEROES => {
            let may_trim = r.flags & CMD_FLAG_NO_HOLE == 0;
            Command::WriteZeroes {
                offset,
                length,
                may_trim,
                fua,
            }
        }
        CMD_CACHE => Command::Cache { offset, length },
        CMD_BLOCK_STATUS => Command::BlockStatus {
            offset,
            length,
            req_one: r.flags & CMD_FLAG_REQ_ONE != 0,
        },
        other => unreachable!("command {other} handled in validate"),
    }
}

/// The result of a successful command.
#[derive(Debug)]
pub(crate) enum Done {
    Ack,
    Data(Buffer),
    Extents(Vec<BlockDescriptor>),
}

/// Runs a validated command on the export (blocking). `payload` is the write data; a read's
/// buffer comes from `pool` (the caller gives it back after sending).
pub(crate) fn execute(
    export: &dyn Export,
    pool: &BufferPool,
    size: u64,
    command: Command,
    payload: &Buffer,
) -> io::Result<Done> {
    assert_in_range(&command, size);
    match command {
        Command::Read { offset, length } => {
            // Not zeroed: the export fills it whole, or fails and it is not sent.
            let mut buf = pool.take(length as usize);
            if let Err(e) = export.read(offset, &mut buf) {
                pool.give(buf);
                return Err(e);
            }
            Ok(Done::Data(buf))
        }
        Command::Write {
            offset,
            length,
            fua,
        } => {
            assert_eq!(payload.len(), length as usize, "write payload length");
            if length > 0 {
                export.write(offset, payload, fua)?;
            }
            Ok(Done::Ack)
        }
        Command::Flush => export.flush().map(|_| Done::Ack),
        Command::Trim {
            offset,
            length,
            fua,
        } => zero_like(|| export.trim(offset, length.into()), export, length, fua),
        Command::WriteZeroes {
            offset,
            length,
            may_trim,
            fua,
        } => zero_like(
            || export.write_zeroes(offset, length.into(), may_trim),
            export,
            length,
            fua,
        ),
        Command::Cache { offset, length } => export.cache(offset, length.into()).map(|_| Done::Ack),
        Command::BlockStatus {
            offset,
            length,
            req_one,
        } => {
            let extents = export.block_status(offset, length)?;
            descriptors(&extents, length, req_one).map(Done::Extents)
        }
        Command::Disconnect => unreachable!("disconnect is not executed"),
    }
}

/// Trim and write-zeroes have no FUA argument in [`Export`]: FUA is a flush afterwards.
fn zero_like(
    op: impl FnOnce() -> io::Result<()>,
    export: &dyn Export,
    length: u32,
    fua: bool,
) -> io::Result<Done> {
    if length == 0 {
        return Ok(Done::Ack);
    }
    op()?;
    if fua {
        export.flush()?;
    }
    Ok(Done::Ack)
}

fn assert_in_range(command: &Command, size: u64) {
    let (offset, length) = match *command {
        Command::Read { offset, length }
        | Command::Write { offset, length, .. }
        | Command::Trim { offset, length, .. }
        | Command::WriteZeroes { offset, length, .. }
        | Command::Cache { offset, length }
        | Command::BlockStatus { offset, length, .. } => (offset, length),
        Command::Flush | Command::Disconnect => return,
    };
    let end = offset.checked_add(u64::from(length));
    assert!(
        end.is_some_and(|e| e <= size),
        "validated command out of range: {command:?}"
    );
}

/// Turns an export's extents into a spec-conforming descriptor list: non-empty, no zero
/// lengths, the first n-1 summing to less than `length`, one clipped extent for REQ_ONE.
pub(crate) fn descriptors(
    extents: &[StatusExtent],
    length: u32,
    req_one: bool,
) -> io::Result<Vec<BlockDescriptor>> {
    let mut out = Vec::new();
    let mut covered: u64 = 0;
    for e in extents.iter().filter(|e| e.length > 0) {
        let mut d = BlockDescriptor {
            length: e.length,
            status: e.status(),
        };
        if req_one {
            d.length = d.length.min(length);
        }
        out.push(d);
        covered += u64::from(d.length);
        if req_one || covered >= u64::from(length) {
            break;
        }
    }
    if out.is_empty() {
        return Err(io::Error::other("export returned no block status extents"));
    }
    Ok(out)
}

/// Header bytes and optional data of the reply to a finished command.
pub(crate) fn success_reply(
    cookie: u64,
    offset: u64,
    done: Done,
    structured: bool,
) -> (Vec<u8>, Option<Buffer>) {
    match done {
        Done::Ack => (SimpleReply { error: 0, cookie }.encode().to_vec(), None),
        Done::Data(data) if structured && data.is_empty() => {
            (Chunk::None.encode(cookie, REPLY_FLAG_DONE), None)
        }
        Done::Data(data) if structured => {
            let len = u32::try_from(data.len()).expect("read length fits u32");
            (
                offset_data_header(cookie, REPLY_FLAG_DONE, offset, len).to_vec(),
                Some(data),
            )
        }
        Done::Data(data) => (
            SimpleReply { error: 0, cookie }.encode().to_vec(),
            Some(data),
        ),
        Done::Extents(descriptors) => {
            let chunk = Chunk::BlockStatus {
                context_id: BASE_ALLOCATION_ID,
                descriptors,
            };
            (chunk.encode(cookie, REPLY_FLAG_DONE), None)
        }
    }
}

/// The error reply: an ERROR chunk with a message when structured replies are on.
pub(crate) fn error_reply(cookie: u64, errno: u32, message: &str, structured: bool) -> Vec<u8> {
    assert!(errno != 0);
    if structured {
        let message = truncate_message(message);
        Chunk::Error {
            error: errno,
            message,
        }
        .encode(cookie, REPLY_FLAG_DONE)
    } else {
        SimpleReply {
            error: errno,
            cookie,
        }
        .encode()
        .to_vec()
    }
}

/// The reply to an export error.
pub(crate) fn io_error_reply(cookie: u64, error: &io::Error, structured: bool) -> Vec<u8> {
    error_reply(cookie, nbd_errno(error), &error.to_string(), structured)
}

fn truncate_message(message: &str) -> String {
    let mut end = message.len().min(1024);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_owned()
}

#[cfg(test)]
mod tests;
