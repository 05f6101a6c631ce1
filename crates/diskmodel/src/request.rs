//! What a drive is asked to do: the requests every model (disk, flash) serves.

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read `len` bytes.
    Read,
    /// Write `len` bytes (write-zeroes too: a disk writes the zeroes).
    Write,
    /// Make every acknowledged write durable.
    Flush,
    /// Release a range (no media work on a disk; a table update on flash).
    Trim,
}

/// One request to a drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What it does.
    pub op: Op,
    /// Byte offset.
    pub offset: u64,
    /// Bytes (0 for a flush).
    pub len: u64,
}
