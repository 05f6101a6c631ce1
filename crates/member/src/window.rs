//! `Window`: a `[offset, offset + len)` view of another member.

use std::io;
use std::sync::Arc;

use crate::error::check_member_range;
use crate::Member;

/// A member exposing bytes `[offset, offset + len)` of another member at offsets `[0, len)`.
/// Used for a member's data area past its superblock.
#[derive(Debug)]
pub struct Window {
    inner: Arc<dyn Member>,
    offset_bytes: u64,
    len_bytes: u64,
    name: String,
}

impl Window {
    /// A view of `inner`'s `[offset_bytes, offset_bytes + len_bytes)`.
    ///
    /// Panics if the window does not lie inside `inner` (a caller bug: callers compute windows
    /// from validated metadata).
    pub fn new(inner: Arc<dyn Member>, offset_bytes: u64, len_bytes: u64) -> Window {
        let end = offset_bytes.checked_add(len_bytes);
        assert!(
            end.is_some_and(|end| end <= inner.len()),
            "window [{offset_bytes}, +{len_bytes}) does not fit in member {} of {} bytes",
            inner.name(),
            inner.len()
        );
        let name = format!("{}@{}", inner.name(), offset_bytes);
        Window {
            inner,
            offset_bytes,
            len_bytes,
            name,
        }
    }

    /// The member this window looks into.
    pub fn inner(&self) -> &Arc<dyn Member> {
        &self.inner
    }

    /// Where the window starts in the inner member.
    pub fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }
}

impl Member for Window {
    fn name(&self) -> &str {
        &self.name
    }

    fn identity(&self) -> Option<crate::Identity> {
        self.inner.identity()
    }

    fn len(&self) -> u64 {
        self.len_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "read", offset, buf.len() as u64)?;
        self.inner.read_at(buf, self.offset_bytes + offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "write", offset, buf.len() as u64)?;
        self.inner.write_at(buf, self.offset_bytes + offset)
    }

    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        check_member_range(self, "read", offset, len)?;
        self.inner
            .read_vectored_at(bufs, self.offset_bytes + offset)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = crate::vectored_len(bufs.iter().map(|b| b.len()));
        check_member_range(self, "write", offset, len)?;
        self.inner
            .write_vectored_at(bufs, self.offset_bytes + offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "write", offset, buf.len() as u64)?;
        self.inner.write_durable_at(buf, self.offset_bytes + offset)
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "trim", offset, len)?;
        self.inner.trim(self.offset_bytes + offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "write-zeroes", offset, len)?;
        self.inner.write_zeroes(self.offset_bytes + offset, len)
    }

    /// Started on the inner member at the window's offset; a call outside the window is not
    /// started (the caller's own call then fails with the range error).
    fn start(&self, call: crate::StartCall<'_>) -> Option<crate::Started> {
        if let Some((offset, len)) = call.range() {
            check_member_range(self, "call", offset, len).ok()?;
        }
        self.inner.start(call.moved(self.offset_bytes))
    }

    fn stuck_calls(&self) -> (usize, u64) {
        self.inner.stuck_calls()
    }

    /// The inner member's, at the window's offset; none outside the window.
    fn ring_target(&self, ask: crate::RingAsk) -> Option<crate::RingTarget<'_>> {
        check_member_range(self, "call", ask.offset, ask.len).ok()?;
        self.inner.ring_target(ask.moved(self.offset_bytes))
    }

    fn reconnect(&self) -> io::Result<()> {
        self.inner.reconnect()
    }
}
