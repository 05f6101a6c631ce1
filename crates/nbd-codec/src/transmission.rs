//! Transmission-phase messages: requests, simple replies and structured reply chunks.

use super::consts::*;
use super::error::DecodeError;
use super::wire::Cursor;

/// A request header exactly as sent (28 bytes); the payload of a WRITE follows it on the wire.
/// `kind` is kept raw so that unknown commands can be answered with `EINVAL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
    pub const SIZE: usize = 28;

    #[inline]
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.kind.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.length.to_be_bytes());
        out
    }

    /// Decodes a header. A bad magic is an error: the stream can no longer be trusted.
    #[inline]
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(bytes, "request");
        let magic = c.u32()?;
        if magic != REQUEST_MAGIC {
            return Err(DecodeError::BadMagic {
                what: "request",
                expected: REQUEST_MAGIC.into(),
                found: magic.into(),
            });
        }
        let request = Request {
            flags: c.u16()?,
            kind: c.u16()?,
            cookie: c.u64()?,
            offset: c.u64()?,
            length: c.u32()?,
        };
        c.finish()?;
        Ok(request)
    }

    /// Bytes of payload that follow this header on the wire.
    #[inline]
    pub fn payload_len(&self) -> u32 {
        if self.kind == CMD_WRITE {
            self.length
        } else {
            0
        }
    }
}

/// A simple reply header (16 bytes); a successful READ's data follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimpleReply {
    pub error: u32,
    pub cookie: u64,
}

impl SimpleReply {
    pub const SIZE: usize = 16;

    #[inline]
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        out[4..8].copy_from_slice(&self.error.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out
    }

    #[inline]
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(bytes, "simple reply");
        let magic = c.u32()?;
        if magic != SIMPLE_REPLY_MAGIC {
            let expected = SIMPLE_REPLY_MAGIC.into();
            return Err(DecodeError::BadMagic {
                what: "simple reply",
                expected,
                found: magic.into(),
            });
        }
        let reply = SimpleReply {
            error: c.u32()?,
            cookie: c.u64()?,
        };
        c.finish()?;
        Ok(reply)
    }
}

/// A structured reply chunk header (20 bytes); `length` bytes of payload follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub length: u32,
}

impl ChunkHeader {
    pub const SIZE: usize = 20;

    #[inline]
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        out[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.kind.to_be_bytes());
        out[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        out[16..20].copy_from_slice(&self.length.to_be_bytes());
        out
    }

    #[inline]
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(bytes, "chunk header");
        let magic = c.u32()?;
        if magic != STRUCTURED_REPLY_MAGIC {
            let expected = STRUCTURED_REPLY_MAGIC.into();
            return Err(DecodeError::BadMagic {
                what: "chunk header",
                expected,
                found: magic.into(),
            });
        }
        let header = ChunkHeader {
            flags: c.u16()?,
            kind: c.u16()?,
            cookie: c.u64()?,
            length: c.u32()?,
        };
        c.finish()?;
        Ok(header)
    }

    #[inline]
    pub fn is_done(&self) -> bool {
        self.flags & REPLY_FLAG_DONE != 0
    }
}

/// One `base:allocation`-style block descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDescriptor {
    pub length: u32,
    pub status: u32,
}

/// A structured reply chunk payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    None,
    OffsetData {
        offset: u64,
        data: Vec<u8>,
    },
    OffsetHole {
        offset: u64,
        length: u32,
    },
    BlockStatus {
        context_id: u32,
        descriptors: Vec<BlockDescriptor>,
    },
    Error {
        error: u32,
        message: String,
    },
    ErrorOffset {
        error: u32,
        message: String,
        offset: u64,
    },
}

impl Chunk {
    pub fn kind(&self) -> u16 {
        match self {
            Chunk::None => REPLY_TYPE_NONE,
            Chunk::OffsetData { .. } => REPLY_TYPE_OFFSET_DATA,
            Chunk::OffsetHole { .. } => REPLY_TYPE_OFFSET_HOLE,
            Chunk::BlockStatus { .. } => REPLY_TYPE_BLOCK_STATUS,
            Chunk::Error { .. } => REPLY_TYPE_ERROR,
            Chunk::ErrorOffset { .. } => REPLY_TYPE_ERROR_OFFSET,
        }
    }

    /// Header and payload of this chunk. For large reads the server builds the OFFSET_DATA
    /// header itself with [`offset_data_header`] and sends the data without copying.
    pub fn encode(&self, cookie: u64, flags: u16) -> Vec<u8> {
        let payload = self.encode_payload();
        let length = u32::try_from(payload.len()).expect("chunk payload fits u32");
        let mut out = ChunkHeader {
            flags,
            kind: self.kind(),
            cookie,
            length,
        }
        .encode()
        .to_vec();
        out.extend_from_slice(&payload);
        out
    }

    fn encode_payload(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Chunk::None => {}
            Chunk::OffsetData { offset, data } => {
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(data);
            }
            Chunk::OffsetHole { offset, length } => {
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&length.to_be_bytes());
            }
            Chunk::BlockStatus {
                context_id,
                descriptors,
            } => {
                out.extend_from_slice(&context_id.to_be_bytes());
                for d in descriptors {
                    out.extend_from_slice(&d.length.to_be_bytes());
                    out.extend_from_slice(&d.status.to_be_bytes());
                }
            }
            Chunk::Error { error, message } => put_error(&mut out, *error, message),
            Chunk::ErrorOffset {
                error,
                message,
                offset,
            } => {
                put_error(&mut out, *error, message);
                out.extend_from_slice(&offset.to_be_bytes());
            }
        }
        out
    }

    /// Decodes a chunk payload given its header; checks every length rule of the spec.
    pub fn decode(header: &ChunkHeader, payload: &[u8]) -> Result<Self, DecodeError> {
        if payload.len() != header.length as usize {
            return Err(DecodeError::BadLength {
                what: "chunk",
                length: header.length.into(),
            });
        }
        let mut c = Cursor::new(payload, "chunk");
        let chunk = match header.kind {
            REPLY_TYPE_NONE => Chunk::None,
            REPLY_TYPE_OFFSET_DATA => decode_offset_data(&mut c)?,
            REPLY_TYPE_OFFSET_HOLE => Chunk::OffsetHole {
                offset: c.u64()?,
                length: c.u32()?,
            },
            REPLY_TYPE_BLOCK_STATUS => decode_block_status(&mut c)?,
            REPLY_TYPE_ERROR => {
                let (error, message) = decode_error(&mut c)?;
                Chunk::Error { error, message }
            }
            REPLY_TYPE_ERROR_OFFSET => {
                let (error, message) = decode_error(&mut c)?;
                Chunk::ErrorOffset {
                    error,
                    message,
                    offset: c.u64()?,
                }
            }
            other => {
                return Err(DecodeError::BadValue {
                    what: "chunk type",
                    value: other.into(),
                })
            }
        };
        c.finish()?;
        Ok(chunk)
    }
}

/// The 28 bytes that precede a read's data in a one-chunk OFFSET_DATA reply.
#[inline]
pub fn offset_data_header(cookie: u64, flags: u16, offset: u64, data_len: u32) -> [u8; 28] {
    let length = data_len
        .checked_add(8)
        .expect("OFFSET_DATA length fits u32");
    let header = ChunkHeader {
        flags,
        kind: REPLY_TYPE_OFFSET_DATA,
        cookie,
        length,
    };
    let mut out = [0u8; 28];
    out[..ChunkHeader::SIZE].copy_from_slice(&header.encode());
    out[ChunkHeader::SIZE..].copy_from_slice(&offset.to_be_bytes());
    out
}

fn put_error(out: &mut Vec<u8>, error: u32, message: &str) {
    assert!(error != 0, "error chunk with error 0");
    assert!(message.len() <= MAX_STRING_BYTES);
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message.as_bytes());
}

fn decode_error(c: &mut Cursor<'_>) -> Result<(u32, String), DecodeError> {
    let error = c.u32()?;
    if error == 0 {
        return Err(DecodeError::BadValue {
            what: "error chunk error",
            value: 0,
        });
    }
    let len = c.u16()? as usize;
    Ok((error, c.string(len)?))
}

fn decode_offset_data(c: &mut Cursor<'_>) -> Result<Chunk, DecodeError> {
    let offset = c.u64()?;
    if c.remaining() == 0 {
        return Err(DecodeError::BadLength {
            what: "OFFSET_DATA chunk",
            length: 8,
        });
    }
    let data = c.take(c.remaining())?.to_vec();
    Ok(Chunk::OffsetData { offset, data })
}

fn decode_block_status(c: &mut Cursor<'_>) -> Result<Chunk, DecodeError> {
    let context_id = c.u32()?;
    if c.remaining() == 0 || !c.remaining().is_multiple_of(8) {
        let length = c.remaining() as u64 + 4;
        return Err(DecodeError::BadLength {
            what: "BLOCK_STATUS chunk",
            length,
        });
    }
    let mut descriptors = Vec::with_capacity(c.remaining() / 8);
    while c.remaining() > 0 {
        descriptors.push(BlockDescriptor {
            length: c.u32()?,
            status: c.u32()?,
        });
    }
    Ok(Chunk::BlockStatus {
        context_id,
        descriptors,
    })
}
