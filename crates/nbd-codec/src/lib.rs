//! The NBD wire codec: bytes ⇄ typed messages, with no I/O and no knowledge of exports.
//!
//! The one place the protocol is written: the server (`nbd`, as `nbd::codec`) and the NBD member
//! client (`member`) both encode and decode with it, each direction's messages in both ways.
//!
//! Every `decode` takes a byte slice and returns a [`DecodeError`] for anything malformed; no
//! input makes a decoder panic (property-tested). Every `encode` produces the exact bytes the
//! spec (../shared/reference/nbd-proto.md) describes, and `decode(encode(x)) == x`.
//!
//! - handshake: [`Greeting`], [`ClientFlags`], [`OptionHeader`], [`OptionReplyHeader`],
//!   [`ExportNameReply`];
//! - options: [`ClientOption`] (with [`InfoRequest`], [`MetaContextRequest`]), [`OptionReply`]
//!   (with [`Info`]);
//! - transmission: [`Request`], [`SimpleReply`], [`ChunkHeader`] + [`Chunk`]. Their fixed-size
//!   headers encode to and decode from stack arrays and are `#[inline]`, so the per-request path
//!   of either side costs no allocation and no call into this crate.

pub mod consts;
mod error;
mod handshake;
mod option;
mod transmission;
mod wire;

#[cfg(test)]
mod tests;

pub use error::DecodeError;
pub use handshake::{ClientFlags, ExportNameReply, Greeting, OptionHeader, OptionReplyHeader};
pub use option::{ClientOption, Info, InfoRequest, MetaContextRequest, OptionReply};
pub use transmission::{
    offset_data_header, BlockDescriptor, Chunk, ChunkHeader, Request, SimpleReply,
};
