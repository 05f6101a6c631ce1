//! Fixed-size handshake messages: greeting, client flags, option and option-reply headers, and
//! the reply to `NBD_OPT_EXPORT_NAME`.

use super::consts::*;
use super::error::DecodeError;
use super::wire::Cursor;

/// Server greeting: `NBDMAGIC`, `IHAVEOPT`, 16-bit handshake flags (18 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Greeting {
    pub handshake_flags: u16,
}

impl Greeting {
    pub const SIZE: usize = 18;

    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        out[0..8].copy_from_slice(&INIT_MAGIC.to_be_bytes());
        out[8..16].copy_from_slice(&OPTS_MAGIC.to_be_bytes());
        out[16..18].copy_from_slice(&self.handshake_flags.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(bytes, "greeting");
        expect_magic64(&mut c, "greeting", INIT_MAGIC)?;
        expect_magic64(&mut c, "greeting", OPTS_MAGIC)?;
        let handshake_flags = c.u16()?;
        c.finish()?;
        Ok(Greeting { handshake_flags })
    }
}

/// Client flags, the client's answer to the greeting (4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags(pub u32);

impl ClientFlags {
    pub const SIZE: usize = 4;

    pub fn encode(&self) -> [u8; Self::SIZE] {
        self.0.to_be_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(bytes, "client flags");
        let flags = c.u32()?;
        c.finish()?;
        Ok(ClientFlags(flags))
    }
}

/// Header of an option request: `IHAVEOPT`, option, data length (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length: u32,
}

impl OptionHeader {
    pub const SIZE: usize = 16;

    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        out[0..8].copy_from_slice(&OPTS_MAGIC.to_be_bytes());
        out[8..12].copy_from_slice(&self.option.to_be_bytes());
        out[12..16].copy_from_slice(&self.length.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(bytes, "option header");
        expect_magic64(&mut c, "option header", OPTS_MAGIC)?;
        let option = c.u32()?;
        let length = c.u32()?;
        c.finish()?;
        Ok(OptionHeader { option, length })
    }
}

/// Header of an option reply: magic, option, reply type, data length (20 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionReplyHeader {
    pub option: u32,
    pub reply_type: u32,
    pub length: u32,
}

impl OptionReplyHeader {
    pub const SIZE: usize = 20;

    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        out[0..8].copy_from_slice(&REP_MAGIC.to_be_bytes());
        out[8..12].copy_from_slice(&self.option.to_be_bytes());
        out[12..16].copy_from_slice(&self.reply_type.to_be_bytes());
        out[16..20].copy_from_slice(&self.length.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(bytes, "option reply header");
        expect_magic64(&mut c, "option reply header", REP_MAGIC)?;
        let option = c.u32()?;
        let reply_type = c.u32()?;
        let length = c.u32()?;
        c.finish()?;
        Ok(OptionReplyHeader {
            option,
            reply_type,
            length,
        })
    }
}

/// The server's answer to `NBD_OPT_EXPORT_NAME`: size, transmission flags, and 124 zero bytes
/// unless both sides agreed on `NO_ZEROES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportNameReply {
    pub size: u64,
    pub transmission_flags: u16,
    pub no_zeroes: bool,
}

impl ExportNameReply {
    pub const SHORT_SIZE: usize = 10;
    pub const ZEROES: usize = 124;

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::SHORT_SIZE + Self::ZEROES);
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.transmission_flags.to_be_bytes());
        if !self.no_zeroes {
            out.resize(Self::SHORT_SIZE + Self::ZEROES, 0);
        }
        out
    }

    pub fn decode(bytes: &[u8], no_zeroes: bool) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(bytes, "export name reply");
        let size = c.u64()?;
        let transmission_flags = c.u16()?;
        if !no_zeroes {
            c.take(Self::ZEROES)?;
        }
        c.finish()?;
        Ok(ExportNameReply {
            size,
            transmission_flags,
            no_zeroes,
        })
    }
}

pub(crate) fn expect_magic64(
    c: &mut Cursor<'_>,
    what: &'static str,
    expected: u64,
) -> Result<(), DecodeError> {
    let found = c.u64()?;
    if found != expected {
        return Err(DecodeError::BadMagic {
            what,
            expected,
            found,
        });
    }
    Ok(())
}
