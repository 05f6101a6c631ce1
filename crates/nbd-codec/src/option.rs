//! Option payloads (client → server) and option reply payloads (server → client).

use super::consts::*;
use super::error::DecodeError;
use super::handshake::{OptionHeader, OptionReplyHeader};
use super::wire::{put_str32, Cursor};

/// The data of `NBD_OPT_INFO` / `NBD_OPT_GO`: an export name and information requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: String,
    pub requests: Vec<u16>,
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextRequest {
    pub name: String,
    pub queries: Vec<String>,
}

/// A decoded option request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOption {
    ExportName(String),
    /// Any data sent with ABORT is ignored, as the spec asks.
    Abort,
    /// `has_data` is true when the client sent data, which the spec forbids.
    List {
        has_data: bool,
    },
    StartTls {
        has_data: bool,
    },
    Info(InfoRequest),
    Go(InfoRequest),
    StructuredReply {
        has_data: bool,
    },
    ListMetaContext(MetaContextRequest),
    SetMetaContext(MetaContextRequest),
    ExtendedHeaders,
    /// An option this codec does not know; the server answers `NBD_REP_ERR_UNSUP`.
    Unknown(u32),
}

impl ClientOption {
    /// Decodes the data of option `option`. Errors mean the data is syntactically invalid
    /// (the server answers `NBD_REP_ERR_INVALID`, or closes for EXPORT_NAME).
    pub fn decode(option: u32, data: &[u8]) -> Result<Self, DecodeError> {
        let has_data = !data.is_empty();
        Ok(match option {
            OPT_EXPORT_NAME => {
                ClientOption::ExportName(Cursor::new(data, "export name").rest_string()?)
            }
            OPT_ABORT => ClientOption::Abort,
            OPT_LIST => ClientOption::List { has_data },
            OPT_STARTTLS => ClientOption::StartTls { has_data },
            OPT_INFO => ClientOption::Info(decode_info_request(data)?),
            OPT_GO => ClientOption::Go(decode_info_request(data)?),
            OPT_STRUCTURED_REPLY => ClientOption::StructuredReply { has_data },
            OPT_LIST_META_CONTEXT => ClientOption::ListMetaContext(decode_meta_request(data)?),
            OPT_SET_META_CONTEXT => ClientOption::SetMetaContext(decode_meta_request(data)?),
            OPT_EXTENDED_HEADERS => ClientOption::ExtendedHeaders,
            other => ClientOption::Unknown(other),
        })
    }

    /// The option code and data a client sends (`has_data` flags encode one junk byte).
    pub fn encode(&self) -> (u32, Vec<u8>) {
        let junk = |has: bool| if has { vec![0u8] } else { Vec::new() };
        match self {
            ClientOption::ExportName(name) => (OPT_EXPORT_NAME, name.as_bytes().to_vec()),
            ClientOption::Abort => (OPT_ABORT, Vec::new()),
            ClientOption::List { has_data } => (OPT_LIST, junk(*has_data)),
            ClientOption::StartTls { has_data } => (OPT_STARTTLS, junk(*has_data)),
            ClientOption::Info(r) => (OPT_INFO, encode_info_request(r)),
            ClientOption::Go(r) => (OPT_GO, encode_info_request(r)),
            ClientOption::StructuredReply { has_data } => (OPT_STRUCTURED_REPLY, junk(*has_data)),
            ClientOption::ListMetaContext(r) => (OPT_LIST_META_CONTEXT, encode_meta_request(r)),
            ClientOption::SetMetaContext(r) => (OPT_SET_META_CONTEXT, encode_meta_request(r)),
            ClientOption::ExtendedHeaders => (OPT_EXTENDED_HEADERS, Vec::new()),
            ClientOption::Unknown(code) => (*code, Vec::new()),
        }
    }

    /// The whole option request a client sends: [`OptionHeader`] and data.
    pub fn encode_message(&self) -> Vec<u8> {
        let (option, data) = self.encode();
        let length = u32::try_from(data.len()).expect("option data fits u32");
        let mut out = Vec::with_capacity(OptionHeader::SIZE + data.len());
        out.extend_from_slice(&OptionHeader { option, length }.encode());
        out.extend_from_slice(&data);
        out
    }
}

fn decode_info_request(data: &[u8]) -> Result<InfoRequest, DecodeError> {
    let mut c = Cursor::new(data, "info request");
    let name_len = c.u32()? as usize;
    let name = c.string(name_len)?;
    let count = c.u16()? as usize;
    if c.remaining() != count * 2 {
        return Err(DecodeError::BadLength {
            what: "info request",
            length: count as u64,
        });
    }
    let requests = (0..count).map(|_| c.u16()).collect::<Result<Vec<_>, _>>()?;
    c.finish()?;
    Ok(InfoRequest { name, requests })
}

fn encode_info_request(r: &InfoRequest) -> Vec<u8> {
    let mut out = Vec::new();
    put_str32(&mut out, &r.name);
    assert!(r.requests.len() <= usize::from(u16::MAX));
    out.extend_from_slice(&(r.requests.len() as u16).to_be_bytes());
    for info in &r.requests {
        out.extend_from_slice(&info.to_be_bytes());
    }
    out
}

fn decode_meta_request(data: &[u8]) -> Result<MetaContextRequest, DecodeError> {
    let mut c = Cursor::new(data, "meta context request");
    let name_len = c.u32()? as usize;
    let name = c.string(name_len)?;
    let count = c.u32()? as usize;
    // Each query needs at least its 4-byte length: bound `count` before allocating.
    if count > c.remaining() / 4 {
        return Err(DecodeError::BadLength {
            what: "meta context request",
            length: count as u64,
        });
    }
    let mut queries = Vec::with_capacity(count);
    for _ in 0..count {
        let len = c.u32()? as usize;
        queries.push(c.string(len)?);
    }
    c.finish()?;
    Ok(MetaContextRequest { name, queries })
}

fn encode_meta_request(r: &MetaContextRequest) -> Vec<u8> {
    let mut out = Vec::new();
    put_str32(&mut out, &r.name);
    out.extend_from_slice(&(r.queries.len() as u32).to_be_bytes());
    for q in &r.queries {
        put_str32(&mut out, q);
    }
    out
}

/// One `NBD_REP_INFO` item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Info {
    Export {
        size: u64,
        transmission_flags: u16,
    },
    Name(String),
    Description(String),
    BlockSize {
        minimum: u32,
        preferred: u32,
        maximum: u32,
    },
    /// An information type this codec does not know (clients must ignore it).
    Unknown {
        info_type: u16,
        data: Vec<u8>,
    },
}

/// A decoded option reply payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionReply {
    Ack,
    Server {
        name: String,
        details: String,
    },
    Info(Info),
    MetaContext {
        id: u32,
        name: String,
    },
    /// Any `NBD_REP_ERR_*` (bit 31 set) with its optional message (decoded leniently: it is
    /// only shown to people).
    Error {
        reply_type: u32,
        message: String,
    },
}

impl OptionReply {
    /// The reply type code.
    pub fn reply_type(&self) -> u32 {
        match self {
            OptionReply::Ack => REP_ACK,
            OptionReply::Server { .. } => REP_SERVER,
            OptionReply::Info(_) => REP_INFO,
            OptionReply::MetaContext { .. } => REP_META_CONTEXT,
            OptionReply::Error { reply_type, .. } => *reply_type,
        }
    }

    /// The whole reply message (header and data) answering `option`.
    pub fn encode(&self, option: u32) -> Vec<u8> {
        let data = self.encode_data();
        let header = OptionReplyHeader {
            option,
            reply_type: self.reply_type(),
            length: u32::try_from(data.len()).expect("option reply data fits u32"),
        };
        let mut out = header.encode().to_vec();
        out.extend_from_slice(&data);
        out
    }

    fn encode_data(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            OptionReply::Ack => {}
            OptionReply::Server { name, details } => {
                put_str32(&mut out, name);
                out.extend_from_slice(details.as_bytes());
            }
            OptionReply::Info(info) => encode_info(info, &mut out),
            OptionReply::MetaContext { id, name } => {
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(name.as_bytes());
            }
            OptionReply::Error {
                reply_type,
                message,
            } => {
                assert!(is_rep_error(*reply_type), "error reply without bit 31");
                out.extend_from_slice(message.as_bytes());
            }
        }
        out
    }

    /// Decodes a reply payload given its header's reply type. Length rules are strict; the
    /// free text of an error or a description is decoded leniently (invalid UTF-8 replaced).
    pub fn decode(reply_type: u32, data: &[u8]) -> Result<Self, DecodeError> {
        let mut c = Cursor::new(data, "option reply");
        let reply = match reply_type {
            REP_ACK => OptionReply::Ack,
            REP_SERVER => {
                let len = c.u32()? as usize;
                let name = c.string(len)?;
                OptionReply::Server {
                    name,
                    details: c.rest_string()?,
                }
            }
            REP_INFO => OptionReply::Info(decode_info(&mut c)?),
            REP_META_CONTEXT => {
                let id = c.u32()?;
                OptionReply::MetaContext {
                    id,
                    name: c.rest_string()?,
                }
            }
            t if is_rep_error(t) => OptionReply::Error {
                reply_type: t,
                message: c.rest_text(),
            },
            t => {
                return Err(DecodeError::BadValue {
                    what: "option reply type",
                    value: t.into(),
                })
            }
        };
        c.finish()?;
        Ok(reply)
    }
}

fn encode_info(info: &Info, out: &mut Vec<u8>) {
    match info {
        Info::Export {
            size,
            transmission_flags,
        } => {
            out.extend_from_slice(&INFO_EXPORT.to_be_bytes());
            out.extend_from_slice(&size.to_be_bytes());
            out.extend_from_slice(&transmission_flags.to_be_bytes());
        }
        Info::Name(s) | Info::Description(s) => {
            let t = if matches!(info, Info::Name(_)) {
                INFO_NAME
            } else {
                INFO_DESCRIPTION
            };
            assert!(s.len() <= MAX_STRING_BYTES);
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Info::BlockSize {
            minimum,
            preferred,
            maximum,
        } => {
            out.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
            for v in [minimum, preferred, maximum] {
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
        Info::Unknown { info_type, data } => {
            out.extend_from_slice(&info_type.to_be_bytes());
            out.extend_from_slice(data);
        }
    }
}

fn decode_info(c: &mut Cursor<'_>) -> Result<Info, DecodeError> {
    Ok(match c.u16()? {
        INFO_EXPORT => Info::Export {
            size: c.u64()?,
            transmission_flags: c.u16()?,
        },
        INFO_NAME => Info::Name(c.rest_string()?),
        INFO_DESCRIPTION => Info::Description(c.rest_text()),
        INFO_BLOCK_SIZE => Info::BlockSize {
            minimum: c.u32()?,
            preferred: c.u32()?,
            maximum: c.u32()?,
        },
        info_type => {
            let data = c.take(c.remaining())?.to_vec();
            Info::Unknown { info_type, data }
        }
    })
}
