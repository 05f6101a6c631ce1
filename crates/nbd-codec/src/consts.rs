//! Protocol constants, named as in the NBD specification (without the `NBD_` prefix).
//!
//! All values are sent big-endian on the wire.

/// `NBDMAGIC`: first 8 bytes the server sends.
pub const INIT_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle magic; also prefixes every option request.
pub const OPTS_MAGIC: u64 = 0x4948_4156_454F_5054;
/// Second magic of an oldstyle server (instead of `IHAVEOPT`); not supported, only recognised.
pub const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;
/// Magic of every option reply.
pub const REP_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server → client, 16 bits).
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;

// Client flags (client → server, 32 bits).
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags (16 bits).
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Option types.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
const REP_ERR_BIT: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR_BIT + 1;
pub const REP_ERR_POLICY: u32 = REP_ERR_BIT + 2;
pub const REP_ERR_INVALID: u32 = REP_ERR_BIT + 3;
pub const REP_ERR_PLATFORM: u32 = REP_ERR_BIT + 4;
pub const REP_ERR_TLS_REQD: u32 = REP_ERR_BIT + 5;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR_BIT + 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_ERR_BIT + 7;
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = REP_ERR_BIT + 8;
pub const REP_ERR_TOO_BIG: u32 = REP_ERR_BIT + 9;

/// True when an option reply type is an error (bit 31 set).
pub fn is_rep_error(reply_type: u32) -> bool {
    reply_type & REP_ERR_BIT != 0
}

/// The spec's name of an option error reply type, for messages.
pub fn rep_error_name(reply_type: u32) -> &'static str {
    match reply_type {
        REP_ERR_UNSUP => "NBD_REP_ERR_UNSUP",
        REP_ERR_POLICY => "NBD_REP_ERR_POLICY",
        REP_ERR_INVALID => "NBD_REP_ERR_INVALID",
        REP_ERR_PLATFORM => "NBD_REP_ERR_PLATFORM",
        REP_ERR_TLS_REQD => "NBD_REP_ERR_TLS_REQD",
        REP_ERR_UNKNOWN => "NBD_REP_ERR_UNKNOWN (no such export)",
        REP_ERR_SHUTDOWN => "NBD_REP_ERR_SHUTDOWN",
        REP_ERR_BLOCK_SIZE_REQD => "NBD_REP_ERR_BLOCK_SIZE_REQD",
        REP_ERR_TOO_BIG => "NBD_REP_ERR_TOO_BIG",
        _ => "error",
    }
}

// NBD_REP_INFO information types.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Command types.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply flags and types.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

// base:allocation status flags.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// The one metadata context this crate knows.
pub const META_BASE_ALLOCATION: &str = "base:allocation";

// Error values (the `error` field of replies).
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const ENOMEM: u32 = 12;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// The symbolic name of an NBD error value, for messages.
pub fn errno_name(errno: u32) -> &'static str {
    match errno {
        EPERM => "EPERM",
        EIO => "EIO",
        ENOMEM => "ENOMEM",
        EINVAL => "EINVAL",
        ENOSPC => "ENOSPC",
        EOVERFLOW => "EOVERFLOW",
        ENOTSUP => "ENOTSUP",
        ESHUTDOWN => "ESHUTDOWN",
        _ => "unknown error",
    }
}

/// Longest string (export name, message, query) the spec allows.
pub const MAX_STRING_BYTES: usize = 4096;
