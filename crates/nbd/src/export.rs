//! What the server serves: the [`Export`] trait, implemented by the RAID volume (and by test
//! exports).

use std::io;

use crate::codec::consts::{STATE_HOLE, STATE_ZERO};

/// One run of bytes with the same allocation status, as answered by
/// [`Export::block_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusExtent {
    /// Bytes in this extent; never zero.
    pub length: u32,
    /// Not allocated (`NBD_STATE_HOLE`).
    pub hole: bool,
    /// Reads as zeroes (`NBD_STATE_ZERO`).
    pub zero: bool,
}

impl StatusExtent {
    /// Allocated data of unknown content: always a correct answer.
    pub fn data(length: u32) -> Self {
        StatusExtent {
            length,
            hole: false,
            zero: false,
        }
    }

    /// The `base:allocation` status flags of this extent.
    pub fn status(&self) -> u32 {
        let hole = if self.hole { STATE_HOLE } else { 0 };
        let zero = if self.zero { STATE_ZERO } else { 0 };
        hole | zero
    }
}

/// A block device the server exposes. Every call is blocking (disk I/O): the server runs
/// them on a bounded pool of blocking threads, many at once, so implementations must be safe
/// to call concurrently.
///
/// The server validates every request before calling: ranges are within [`Export::size`],
/// lengths are within the configured maximum, writes never reach a read-only export. An
/// implementation may therefore treat a bad range as a bug (assert).
pub trait Export: Send + Sync + 'static {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` with the bytes at `offset`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `data` at `offset`; with `fua` the data is durable when this returns.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()>;
    /// Makes every write completed before this call durable.
    fn flush(&self) -> io::Result<()>;
    /// Discards the range; afterwards its content is unspecified (our exports read zeroes).
    fn trim(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Zeroes the range; `may_trim` allows leaving a hole instead of allocated zeroes.
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> io::Result<()>;
    /// Allocation status of `[offset, offset + len)`: at least one extent, extents in order
    /// from `offset`. The default, "all data", is always correct.
    fn block_status(&self, _offset: u64, len: u32) -> io::Result<Vec<StatusExtent>> {
        Ok(vec![StatusExtent::data(len)])
    }
    /// The I/O size that avoids read-modify-write (one full stripe of data). The server
    /// advertises it rounded up to a power of two, as the protocol requires.
    fn preferred_block_size(&self) -> u32 {
        4096
    }
    /// True only if a flush on any connection makes durable every write completed on any
    /// connection before it (then clients may use several connections).
    fn can_multi_conn(&self) -> bool {
        false
    }
    /// True if [`Export::write_zeroes`] is faster than writing zeroes; otherwise a client's
    /// FAST_ZERO request fails at once with `NBD_ENOTSUP`.
    fn can_fast_zero(&self) -> bool {
        false
    }
    /// A hint that the range will be read soon (`NBD_CMD_CACHE`). Default: nothing.
    fn cache(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
}
