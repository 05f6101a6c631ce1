//! The client side of the fixed-newstyle handshake, over the NBD codec shared with the server
//! (`nbd_codec`): this file decides what to ask and what to accept, the codec has the bytes.
//!
//! Only what this client uses: `NBD_OPT_STARTTLS` first for `nbds` URIs (a refusal fails the
//! connection: no plaintext fallback), then `NBD_OPT_GO` with an `NBD_INFO_BLOCK_SIZE` request,
//! falling back to `NBD_OPT_EXPORT_NAME`; simple replies only (structured replies are never
//! negotiated).

use std::io::{self, Read, Write};

use nbd_codec::consts::*;
use nbd_codec::{
    ClientFlags, ClientOption, DecodeError, ExportNameReply, Greeting, Info, InfoRequest,
    OptionReply, OptionReplyHeader,
};

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
    /// True when the server advertised transmission flag `flag` (`nbd_codec::consts::FLAG_*`).
    pub fn has(&self, flag: u16) -> bool {
        self.transmission_flags & FLAG_HAS_FLAGS != 0 && self.transmission_flags & flag != 0
    }
}

fn protocol(reason: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason)
}

fn malformed(e: DecodeError) -> io::Error {
    protocol(format!("NBD protocol error: {e}"))
}

fn read_array<const N: usize>(stream: &mut impl Read) -> io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    stream.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// Runs the handshake on a fresh connection and returns the export's details; afterwards the
/// stream is in the transmission phase.
#[cfg(test)]
pub fn negotiate<S: Read + Write>(stream: &mut S, export: &str) -> io::Result<ExportInfo> {
    let greeted = greet(stream)?;
    choose_export(stream, export, greeted)
}

/// What the server's greeting allows.
#[derive(Debug, Clone, Copy)]
pub struct Greeted {
    fixed: bool,
    no_zeroes: bool,
}

/// Reads the server's greeting and answers with the client flags.
pub fn greet<S: Read + Write>(stream: &mut S) -> io::Result<Greeted> {
    let greeting = read_greeting(stream)?;
    let fixed = greeting.handshake_flags & FLAG_FIXED_NEWSTYLE != 0;
    let no_zeroes = greeting.handshake_flags & FLAG_NO_ZEROES != 0;
    let client_flags = greeting.handshake_flags & (FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    stream.write_all(&ClientFlags(u32::from(client_flags)).encode())?;
    Ok(Greeted { fixed, no_zeroes })
}

/// `NBD_OPT_STARTTLS`, the first option of an `nbds` connection; on success the caller runs
/// the TLS handshake next. A server that refuses it (or cannot be asked: not fixed-newstyle)
/// fails the connection, saying what to do.
pub fn start_tls<S: Read + Write>(stream: &mut S, greeted: Greeted) -> io::Result<()> {
    let no_tls = |why: String| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "the server does not offer TLS ({why}), and an nbds:// URI never falls back to \
                 plaintext: start the server with TLS (nbdkit --tls=require \
                 --tls-certificates=DIR, raidkit serve --tls require) or, on a trusted network, \
                 use an nbd:// URI"
            ),
        )
    };
    if !greeted.fixed {
        return Err(no_tls(
            "it is not a fixed-newstyle server, so it cannot be asked for NBD_OPT_STARTTLS".into(),
        ));
    }
    send_option(stream, &ClientOption::StartTls { has_data: false })?;
    match read_option_reply(stream, OPT_STARTTLS)? {
        OptionReply::Ack => Ok(()),
        OptionReply::Error {
            reply_type,
            message,
        } => Err(no_tls(format!(
            "it refused NBD_OPT_STARTTLS with {}{}{message}",
            rep_error_name(reply_type),
            if message.is_empty() { "" } else { ": " }
        ))),
        other => {
            let t = other.reply_type();
            Err(protocol(format!(
                "unexpected reply type {t} to NBD_OPT_STARTTLS"
            )))
        }
    }
}

/// Asks for `export` (`NBD_OPT_GO`, else `NBD_OPT_EXPORT_NAME`) and returns its details;
/// afterwards the stream is in the transmission phase.
pub fn choose_export<S: Read + Write>(
    stream: &mut S,
    export: &str,
    greeted: Greeted,
) -> io::Result<ExportInfo> {
    assert!(export.len() <= super::uri::EXPORT_NAME_MAX_BYTES);
    if greeted.fixed {
        if let Some(info) = opt_go(stream, export)? {
            return Ok(info);
        }
    }
    opt_export_name(stream, export, greeted.no_zeroes)
}

fn read_greeting(stream: &mut impl Read) -> io::Result<Greeting> {
    let bytes = read_array::<{ Greeting::SIZE }>(stream)?;
    Greeting::decode(&bytes).map_err(|e| match e {
        DecodeError::BadMagic {
            expected: INIT_MAGIC,
            ..
        } => protocol("not an NBD server (bad greeting magic)".into()),
        DecodeError::BadMagic {
            found: OLDSTYLE_MAGIC,
            ..
        } => protocol("oldstyle NBD servers are not supported".into()),
        e => malformed(e),
    })
}

fn send_option<S: Write>(stream: &mut S, option: &ClientOption) -> io::Result<()> {
    stream.write_all(&option.encode_message())?;
    stream.flush()
}

/// `NBD_OPT_GO`; `None` when the server does not know it (then use `NBD_OPT_EXPORT_NAME`).
fn opt_go<S: Read + Write>(stream: &mut S, export: &str) -> io::Result<Option<ExportInfo>> {
    let go = ClientOption::Go(InfoRequest {
        name: export.to_string(),
        requests: vec![INFO_BLOCK_SIZE],
    });
    send_option(stream, &go)?;
    let mut info = ExportInfo {
        size_bytes: 0,
        transmission_flags: 0,
        min_block_bytes: 1,
        max_block_bytes: None,
    };
    let mut got_export = false;
    loop {
        match read_option_reply(stream, OPT_GO)? {
            OptionReply::Ack if got_export => return Ok(Some(info)),
            OptionReply::Ack => {
                return Err(protocol(
                    "server ended NBD_OPT_GO without export info".into(),
                ))
            }
            OptionReply::Info(item) => got_export |= apply_info(&item, &mut info)?,
            OptionReply::Error {
                reply_type: REP_ERR_UNSUP,
                ..
            } => return Ok(None),
            OptionReply::Error {
                reply_type: REP_ERR_TLS_REQD,
                message,
            } => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "the server requires TLS (NBD_REP_ERR_TLS_REQD{}{message}): use an \
                         nbds:// or nbds+unix:// URI with tls-certificates=DIR",
                        if message.is_empty() { "" } else { ": " }
                    ),
                ))
            }
            OptionReply::Error {
                reply_type,
                message,
            } => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "server refused export {export:?}: {} {message}",
                        rep_error_name(reply_type)
                    ),
                ))
            }
            other => {
                let t = other.reply_type();
                return Err(protocol(format!("unexpected option reply type {t}")));
            }
        }
    }
}

/// Reads one option reply to `option`, bounded by `OPTION_REPLY_MAX_BYTES`.
fn read_option_reply<S: Read>(stream: &mut S, option: u32) -> io::Result<OptionReply> {
    let header = read_array::<{ OptionReplyHeader::SIZE }>(stream)?;
    let header = OptionReplyHeader::decode(&header).map_err(malformed)?;
    if header.option != option {
        let got = header.option;
        return Err(protocol(format!(
            "reply to option {got}, expected {option}"
        )));
    }
    if header.length > OPTION_REPLY_MAX_BYTES {
        let len = header.length;
        return Err(protocol(format!("option reply of {len} bytes is too long")));
    }
    let mut payload = vec![0u8; header.length as usize];
    stream.read_exact(&mut payload)?;
    OptionReply::decode(header.reply_type, &payload).map_err(malformed)
}

/// Applies one `NBD_REP_INFO`; true when it was the export info (size and flags).
fn apply_info(item: &Info, info: &mut ExportInfo) -> io::Result<bool> {
    match *item {
        Info::Export {
            size,
            transmission_flags,
        } => {
            info.size_bytes = size;
            info.transmission_flags = transmission_flags;
            Ok(true)
        }
        Info::BlockSize {
            minimum, maximum, ..
        } => {
            if !minimum.is_power_of_two() || minimum > MIN_BLOCK_MAX_BYTES || maximum < minimum {
                return Err(protocol(format!(
                    "bad block sizes: minimum {minimum}, maximum {maximum}"
                )));
            }
            info.min_block_bytes = minimum;
            info.max_block_bytes = Some(maximum);
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
    send_option(stream, &ClientOption::ExportName(export.to_string()))?;
    let mut bytes = [0u8; ExportNameReply::SHORT_SIZE + ExportNameReply::ZEROES];
    let len = if no_zeroes {
        ExportNameReply::SHORT_SIZE
    } else {
        bytes.len()
    };
    // A server without the export closes the connection instead of answering.
    stream
        .read_exact(&mut bytes[..len])
        .map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => io::Error::new(
                io::ErrorKind::NotFound,
                format!("server closed the connection: export {export:?} refused"),
            ),
            _ => e,
        })?;
    let reply = ExportNameReply::decode(&bytes[..len], no_zeroes).map_err(malformed)?;
    Ok(ExportInfo {
        size_bytes: reply.size,
        transmission_flags: reply.transmission_flags,
        min_block_bytes: 1,
        max_block_bytes: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbd_codec::OptionHeader;
    use std::os::unix::net::UnixStream;

    /// A scripted server: sends the greeting, then runs `script` on its end.
    fn scripted(
        flags: u16,
        script: impl FnOnce(&mut UnixStream) + Send + 'static,
    ) -> (UnixStream, std::thread::JoinHandle<()>) {
        let (client, mut server) = UnixStream::pair().unwrap();
        let handle = std::thread::spawn(move || {
            let greeting = Greeting {
                handshake_flags: flags,
            };
            server.write_all(&greeting.encode()).unwrap();
            let client_flags = read_array::<{ ClientFlags::SIZE }>(&mut server).unwrap();
            let client_flags = ClientFlags::decode(&client_flags).unwrap();
            assert_eq!(client_flags, ClientFlags(u32::from(flags)));
            script(&mut server);
        });
        (client, handle)
    }

    /// Reads and decodes one option request.
    fn read_option(s: &mut UnixStream) -> ClientOption {
        let header = read_array::<{ OptionHeader::SIZE }>(s).unwrap();
        let header = OptionHeader::decode(&header).unwrap();
        let mut data = vec![0u8; header.length as usize];
        s.read_exact(&mut data).unwrap();
        ClientOption::decode(header.option, &data).unwrap()
    }

    fn reply(s: &mut UnixStream, reply: OptionReply) {
        s.write_all(&reply.encode(OPT_GO)).unwrap();
    }

    fn go(name: &str) -> ClientOption {
        ClientOption::Go(InfoRequest {
            name: name.into(),
            requests: vec![INFO_BLOCK_SIZE],
        })
    }

    fn refusal(reply_type: u32, message: &str) -> OptionReply {
        let message = message.into();
        OptionReply::Error {
            reply_type,
            message,
        }
    }

    fn block_sizes(minimum: u32, preferred: u32, maximum: u32) -> OptionReply {
        OptionReply::Info(Info::BlockSize {
            minimum,
            preferred,
            maximum,
        })
    }

    #[test]
    fn go_unsupported_falls_back_to_export_name() {
        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES, |s| {
            assert_eq!(read_option(s), go("exp"));
            reply(s, refusal(REP_ERR_UNSUP, ""));
            assert_eq!(read_option(s), ClientOption::ExportName("exp".into()));
            let answer = ExportNameReply {
                size: 1 << 20,
                transmission_flags: FLAG_HAS_FLAGS | FLAG_SEND_FLUSH,
                no_zeroes: true,
            };
            s.write_all(&answer.encode()).unwrap();
        });
        let info = negotiate(&mut client, "exp").unwrap();
        server.join().unwrap();
        assert_eq!(info.size_bytes, 1 << 20);
        assert!(info.has(FLAG_SEND_FLUSH));
        assert!(!info.has(FLAG_READ_ONLY));
        assert_eq!(info.min_block_bytes, 1);
    }

    #[test]
    fn go_with_block_sizes() {
        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE, |s| {
            assert_eq!(read_option(s), go(""));
            let export = Info::Export {
                size: 1 << 30,
                transmission_flags: FLAG_HAS_FLAGS,
            };
            reply(s, OptionReply::Info(export));
            reply(s, block_sizes(512, 4096, 1 << 20));
            let unknown = Info::Unknown {
                info_type: 99,
                data: vec![1, 2],
            };
            reply(s, OptionReply::Info(unknown)); // ignored
            reply(s, OptionReply::Ack);
        });
        let info = negotiate(&mut client, "").unwrap();
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
            reply(s, refusal(REP_ERR_UNKNOWN, "no such export"));
        });
        let err = negotiate(&mut client, "missing").unwrap_err();
        server.join().unwrap();
        let text = err.to_string();
        assert!(
            text.contains("missing") && text.contains("no such export"),
            "{text}"
        );

        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE, |s| {
            read_option(s);
            reply(s, block_sizes(3, 4096, 1 << 20));
        });
        let err = negotiate(&mut client, "").unwrap_err();
        server.join().unwrap();
        assert!(err.to_string().contains("block sizes"), "{err}");

        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE, |s| {
            read_option(s);
            reply(s, OptionReply::Ack);
        });
        let err = negotiate(&mut client, "").unwrap_err();
        server.join().unwrap();
        assert!(err.to_string().contains("without export info"), "{err}");
    }

    /// A refusal whose message is not UTF-8 still refuses with the server's words (the codec
    /// decodes error text leniently), not with a protocol error.
    #[test]
    fn refusal_with_a_non_utf8_message_still_says_why() {
        let (mut client, server) = scripted(FLAG_FIXED_NEWSTYLE, |s| {
            read_option(s);
            let message = b"policy \xff says no";
            let header = OptionReplyHeader {
                option: OPT_GO,
                reply_type: REP_ERR_POLICY,
                length: message.len() as u32,
            };
            s.write_all(&header.encode()).unwrap();
            s.write_all(message).unwrap();
        });
        let err = negotiate(&mut client, "x").unwrap_err();
        server.join().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("NBD_REP_ERR_POLICY") && text.contains("says no"),
            "{text}"
        );
    }
}
