//! NBD protocol constants and the client side of the fixed-newstyle handshake.
//!
//! Only what this client uses: `NBD_OPT_GO` with an `NBD_INFO_BLOCK_SIZE` request, falling back
//! to `NBD_OPT_EXPORT_NAME`; simple replies only (structured replies are never negotiated).

use std::io::{self, Read, Write};

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;
const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
const FLAG_NO_ZEROES: u16 = 1 << 1;

const OPT_EXPORT_NAME: u32 = 1;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_ERR_UNSUP: u32 = (1 << 31) | 1;
const INFO_EXPORT: u16 = 0;
const INFO_BLOCK_SIZE: u16 = 3;

pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_WRITE_ZEROES: u16 = 6;

/// Largest option reply payload accepted during the handshake.
const OPTION_REPLY_MAX_BYTES: u32 = 64 * 1024;
/// Largest minimum block size the protocol allows.
const MIN_BLOCK_MAX_BYTES: u32 = 64 * 1024;

/// What the server told us about the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportInfo {
    pub size_bytes: u64,
    pub transmission_flags: u16,
    /// Minimum block size (a power of two, 1 when the server states none).
    pub min_block_bytes: u32,
    /// The server's maximum payload, if it stated one.
    pub max_block_bytes: Option<u32>,
}

impl ExportInfo {
    pub fn has(&self, flag: u16) -> bool {
        self.transmission_flags & TFLAG_HAS_FLAGS != 0 && self.transmission_flags & flag != 0
    }
}

fn protocol(reason: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason)
}

fn read_u16(r: &mut impl Read) -> io::Result<u16> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

/// Runs the handshake on a fresh connection and returns the export's details; afterwards the
/// stream is in the transmission phase.
pub fn handshake<S: Read + Write>(stream: &mut S, export: &str) -> io::Result<ExportInfo> {
    assert!(export.len() <= super::uri::EXPORT_NAME_MAX_BYTES);
    if read_u64(stream)? != NBDMAGIC {
        return Err(protocol("not an NBD server (bad greeting magic)".into()));
    }
    match read_u64(stream)? {
        IHAVEOPT => {}
        OLDSTYLE_MAGIC => return Err(protocol("oldstyle NBD servers are not supported".into())),
        other => return Err(protocol(format!("bad handshake magic {other:#x}"))),
    }
    let server_flags = read_u16(stream)?;
    let fixed = server_flags & FLAG_FIXED_NEWSTYLE != 0;
    let no_zeroes = server_flags & FLAG_NO_ZEROES != 0;
    let client_flags = u32::from(server_flags & (FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES));
    stream.write_all(&client_flags.to_be_bytes())?;
    if fixed {
        if let Some(info) = opt_go(stream, export)? {
            return Ok(info);
        }
    }
    opt_export_name(stream, export, no_zeroes)
}

fn send_option<S: Write>(stream: &mut S, option: u32, data: &[u8]) -> io::Result<()> {
    let mut msg = Vec::with_capacity(16 + data.len());
    msg.extend_from_slice(&IHAVEOPT.to_be_bytes());
    msg.extend_from_slice(&option.to_be_bytes());
    msg.extend_from_slice(&(data.len() as u32).to_be_bytes());
    msg.extend_from_slice(data);
    stream.write_all(&msg)?;
    stream.flush()
}

/// `NBD_OPT_GO`; `None` when the server does not know it (then use `NBD_OPT_EXPORT_NAME`).
fn opt_go<S: Read + Write>(stream: &mut S, export: &str) -> io::Result<Option<ExportInfo>> {
    let mut data = Vec::new();
    data.extend_from_slice(&(export.len() as u32).to_be_bytes());
    data.extend_from_slice(export.as_bytes());
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    send_option(stream, OPT_GO, &data)?;
    let mut info = ExportInfo {
        size_bytes: 0,
        transmission_flags: 0,
        min_block_bytes: 1,
        max_block_bytes: None,
    };
    let mut got_export = false;
    loop {
        let (reply_type, payload) = read_option_reply(stream, OPT_GO)?;
        match reply_type {
            REP_ACK if got_export => return Ok(Some(info)),
            REP_ACK => {
                return Err(protocol(
                    "server ended NBD_OPT_GO without export info".into(),
                ))
            }
            REP_INFO => got_export |= parse_info(&payload, &mut info)?,
            REP_ERR_UNSUP => return Ok(None),
            t if t & (1 << 31) != 0 => {
                let message = String::from_utf8_lossy(&payload);
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "server refused export {export:?}: {} {message}",
                        rep_err_name(t)
                    ),
                ));
            }
            other => return Err(protocol(format!("unexpected option reply type {other}"))),
        }
    }
}

fn rep_err_name(t: u32) -> &'static str {
    match t & !(1 << 31) {
        2 => "NBD_REP_ERR_POLICY",
        3 => "NBD_REP_ERR_INVALID",
        4 => "NBD_REP_ERR_PLATFORM",
        5 => "NBD_REP_ERR_TLS_REQD",
        6 => "NBD_REP_ERR_UNKNOWN (no such export)",
        7 => "NBD_REP_ERR_SHUTDOWN",
        8 => "NBD_REP_ERR_BLOCK_SIZE_REQD",
        9 => "NBD_REP_ERR_TOO_BIG",
        _ => "error",
    }
}

fn read_option_reply<S: Read>(stream: &mut S, option: u32) -> io::Result<(u32, Vec<u8>)> {
    if read_u64(stream)? != OPT_REPLY_MAGIC {
        return Err(protocol("bad option reply magic".into()));
    }
    let got_option = read_u32(stream)?;
    let reply_type = read_u32(stream)?;
    let len = read_u32(stream)?;
    if got_option != option {
        return Err(protocol(format!(
            "reply to option {got_option}, expected {option}"
        )));
    }
    if len > OPTION_REPLY_MAX_BYTES {
        return Err(protocol(format!("option reply of {len} bytes is too long")));
    }
    let mut payload = vec![0u8; len as usize];
    stream.read_exact(&mut payload)?;
    Ok((reply_type, payload))
}

/// Applies one `NBD_REP_INFO`; true when it was the export info (size and flags).
fn parse_info(payload: &[u8], info: &mut ExportInfo) -> io::Result<bool> {
    let short = || protocol("short NBD_REP_INFO".into());
    let kind = u16::from_be_bytes(payload.get(0..2).ok_or_else(short)?.try_into().unwrap());
    let field_u32 = |at: usize| -> io::Result<u32> {
        let bytes = payload.get(at..at + 4).ok_or_else(short)?;
        Ok(u32::from_be_bytes(bytes.try_into().unwrap()))
    };
    match kind {
        INFO_EXPORT => {
            let bytes = payload.get(2..12).ok_or_else(short)?;
            info.size_bytes = u64::from_be_bytes(bytes[0..8].try_into().unwrap());
            info.transmission_flags = u16::from_be_bytes(bytes[8..10].try_into().unwrap());
            Ok(true)
        }
        INFO_BLOCK_SIZE => {
            let (min, max) = (field_u32(2)?, field_u32(10)?);
            if !min.is_power_of_two() || min > MIN_BLOCK_MAX_BYTES || max < min {
                return Err(protocol(format!(
                    "bad block sizes: minimum {min}, maximum {max}"
                )));
            }
            info.min_block_bytes = min;
            info.max_block_bytes = Some(max);
            Ok(false)
        }
        _ => Ok(false),
    }
}

fn opt_export_name<S: Read + Write>(
    stream: &mut S,
    export: &str,
    no_zeroes: bool,
) -> io::Result<ExportInfo> {
    send_option(stream, OPT_EXPORT_NAME, export.as_bytes())?;
    let refused = |e: io::Error| match e.kind() {
        io::ErrorKind::UnexpectedEof => io::Error::new(
            io::ErrorKind::NotFound,
            format!("server closed the connection: export {export:?} refused"),
        ),
        _ => e,
    };
    let size_bytes = read_u64(stream).map_err(refused)?;
    let transmission_flags = read_u16(stream)?;
    if !no_zeroes {
        let mut zeroes = [0u8; 124];
        stream.read_exact(&mut zeroes)?;
    }
    Ok(ExportInfo {
        size_bytes,
        transmission_flags,
        min_block_bytes: 1,
        max_block_bytes: None,
    })
}

/// Encodes a request header (28 bytes).
pub fn request_header(flags: u16, cmd: u16, cookie: u64, offset: u64, len: u32) -> [u8; 28] {
    let mut h = [0u8; 28];
    h[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&flags.to_be_bytes());
    h[6..8].copy_from_slice(&cmd.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h[16..24].copy_from_slice(&offset.to_be_bytes());
    h[24..28].copy_from_slice(&len.to_be_bytes());
    h
}

/// The symbolic name of an NBD error number.
pub fn errno_name(errno: u32) -> &'static str {
    match errno {
        1 => "EPERM",
        5 => "EIO",
        12 => "ENOMEM",
        22 => "EINVAL",
        28 => "ENOSPC",
        75 => "EOVERFLOW",
        95 => "ENOTSUP",
        108 => "ESHUTDOWN",
        _ => "unknown error",
    }
}

/// The `io::ErrorKind` closest to an NBD error number.
pub fn errno_kind(errno: u32) -> io::ErrorKind {
    match errno {
        1 => io::ErrorKind::PermissionDenied,
        12 => io::ErrorKind::OutOfMemory,
        22 => io::ErrorKind::InvalidInput,
        28 => io::ErrorKind::StorageFull,
        95 => io::ErrorKind::Unsupported,
        _ => io::ErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    /// A scripted server: sends the greeting, then runs `script` on its end.
    fn scripted(
        flags: u16,
        script: impl FnOnce(&mut UnixStream) + Send + 'static,
    ) -> (UnixStream, std::thread::JoinHandle<()>) {
        let (client, mut server) = UnixStream::pair().unwrap();
        let handle = std::thread::spawn(move || {
            let mut hello = Vec::new();
            hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
            hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
            hello.extend_from_slice(&flags.to_be_bytes());
            server.write_all(&hello).unwrap();
            let client_flags = read_u32(&mut server).unwrap();
            assert_eq!(client_flags, u32::from(flags));
            script(&mut server);
        });
        (client, handle)
    }

    /// Reads one option request; returns (option, data).
    fn read_option(s: &mut UnixStream) -> (u32, Vec<u8>) {
        assert_eq!(read_u64(s).unwrap(), IHAVEOPT);
        let option = read_u32(s).unwrap();
        let mut data = vec![0u8; read_u32(s).unwrap() as usize];
        s.read_exact(&mut data).unwrap();
        (option, data)
    }

    fn reply(s: &mut UnixStream, option: u32, reply_type: u32, data: &[u8]) {
        let mut m = Vec::new();
        m.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
        m.extend_from_slice(&option.to_be_bytes());
        m.extend_from_slice(&reply_type.to_be_bytes());
        m.extend_from_slice(&(data.len() as u32).to_be_bytes());
        m.extend_from_slice(data);
        s.write_all(&m).unwrap();
    }

    #[test]
    fn go_unsupported_falls_back_to_export_name() {
        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES, |s| {
            let (option, data) = read_option(s);
            assert_eq!(option, OPT_GO);
            assert_eq!(&data[0..4], &3u32.to_be_bytes());
            assert_eq!(&data[4..7], b"exp");
            reply(s, OPT_GO, REP_ERR_UNSUP, b"");
            let (option, data) = read_option(s);
            assert_eq!((option, data.as_slice()), (OPT_EXPORT_NAME, &b"exp"[..]));
            s.write_all(&(1u64 << 20).to_be_bytes()).unwrap();
            s.write_all(&(TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH).to_be_bytes())
                .unwrap();
        });
        let info = handshake(&mut client, "exp").unwrap();
        server.join().unwrap();
        assert_eq!(info.size_bytes, 1 << 20);
        assert!(info.has(TFLAG_SEND_FLUSH));
        assert!(!info.has(TFLAG_READ_ONLY));
        assert_eq!(info.min_block_bytes, 1);
    }

    #[test]
    fn go_with_block_sizes() {
        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE, |s| {
            read_option(s);
            let mut export = INFO_EXPORT.to_be_bytes().to_vec();
            export.extend_from_slice(&(1u64 << 30).to_be_bytes());
            export.extend_from_slice(&TFLAG_HAS_FLAGS.to_be_bytes());
            reply(s, OPT_GO, REP_INFO, &export);
            let mut sizes = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
            for v in [512u32, 4096, 1 << 20] {
                sizes.extend_from_slice(&v.to_be_bytes());
            }
            reply(s, OPT_GO, REP_INFO, &sizes);
            reply(s, OPT_GO, REP_INFO, &[0, 99, 1, 2]); // unknown info: ignored
            reply(s, OPT_GO, REP_ACK, b"");
        });
        let info = handshake(&mut client, "").unwrap();
        server.join().unwrap();
        assert_eq!(info.size_bytes, 1 << 30);
        assert_eq!(
            (info.min_block_bytes, info.max_block_bytes),
            (512, Some(1 << 20))
        );
    }

    #[test]
    fn refusals_and_bad_block_sizes_say_why() {
        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE, |s| {
            read_option(s);
            reply(s, OPT_GO, (1 << 31) | 6, b"no such export");
        });
        let err = handshake(&mut client, "missing").unwrap_err();
        server.join().unwrap();
        let text = err.to_string();
        assert!(
            text.contains("missing") && text.contains("no such export"),
            "{text}"
        );

        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE, |s| {
            read_option(s);
            let mut sizes = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
            for v in [3u32, 4096, 1 << 20] {
                sizes.extend_from_slice(&v.to_be_bytes());
            }
            reply(s, OPT_GO, REP_INFO, &sizes);
        });
        let err = handshake(&mut client, "").unwrap_err();
        server.join().unwrap();
        assert!(err.to_string().contains("block sizes"), "{err}");

        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE, |s| {
            read_option(s);
            reply(s, OPT_GO, REP_ACK, b"");
        });
        let err = handshake(&mut client, "").unwrap_err();
        server.join().unwrap();
        assert!(err.to_string().contains("without export info"), "{err}");
    }
}
