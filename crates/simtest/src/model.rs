//! `RegionModel`: what a byte range of the array may hold after a power loss.
//!
//! One model per workload thread, over that thread's own range of the array (ranges are
//! disjoint but share stripes, so parity updates of different threads interleave). The model
//! keeps, per byte, the value it must have survived with (`durable`: the value at the last
//! completed FLUSH, or of the last completed FUA write over it) and the writes issued after that
//! point (`maybe`). After a crash a byte is acceptable when it holds its durable value or the
//! value of one of those later writes: unflushed data may be old or new, torn anywhere.

use std::fmt::Write as _;

/// Most writes remembered between two flushes; the workload flushes before reaching it.
pub const MAYBE_OPS_MAX: usize = 64;

#[derive(Debug, Clone)]
struct MaybeOp {
    seq: u32,
    offset: u64,
    /// `None`: zeroes (trim, write-zeroes).
    data: Option<Vec<u8>>,
    len: u64,
}

impl MaybeOp {
    fn value_at(&self, pos: u64) -> Option<u8> {
        if pos < self.offset || pos >= self.offset + self.len {
            return None;
        }
        let at = (pos - self.offset) as usize;
        Some(self.data.as_ref().map_or(0, |d| d[at]))
    }
}

/// What `[start, start + len)` of the array may hold. See the module docs.
#[derive(Debug, Clone)]
pub struct RegionModel {
    start: u64,
    current: Vec<u8>,
    durable: Vec<u8>,
    /// Per byte: the sequence number of its durable point; later writes are "maybe".
    durable_seq: Vec<u32>,
    maybe: Vec<MaybeOp>,
    seq: u32,
}

impl RegionModel {
    /// A model of `[start, start + len)` of a new (all-zero) array.
    pub fn new(start: u64, len: u64) -> RegionModel {
        assert!(len > 0);
        RegionModel {
            start,
            current: vec![0; len as usize],
            durable: vec![0; len as usize],
            durable_seq: vec![0; len as usize],
            maybe: Vec::new(),
            seq: 0,
        }
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    pub fn len(&self) -> u64 {
        self.current.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.current.is_empty()
    }

    /// Writes remembered since the last flush.
    pub fn maybe_count(&self) -> usize {
        self.maybe.len()
    }

    fn local(&self, offset: u64, len: u64) -> std::ops::Range<usize> {
        assert!(offset >= self.start && offset + len <= self.start + self.len());
        let at = (offset - self.start) as usize;
        at..at + len as usize
    }

    /// A write (or, with `data == None`, zeroes) of `len` bytes at `offset` is about to be
    /// issued. Returns its sequence number.
    pub fn issue(&mut self, offset: u64, len: u64, data: Option<&[u8]>) -> u32 {
        if let Some(d) = data {
            assert_eq!(d.len() as u64, len);
        }
        assert!(
            self.maybe.len() < MAYBE_OPS_MAX,
            "too many unflushed writes"
        );
        let range = self.local(offset, len);
        match data {
            Some(d) => self.current[range].copy_from_slice(d),
            None => self.current[range].fill(0),
        }
        self.seq += 1;
        self.maybe.push(MaybeOp {
            seq: self.seq,
            offset,
            data: data.map(<[u8]>::to_vec),
            len,
        });
        self.seq
    }

    /// A FLUSH completed (before any power loss): everything issued so far is durable.
    pub fn flushed(&mut self) {
        self.durable.copy_from_slice(&self.current);
        self.durable_seq.fill(self.seq);
        self.maybe.clear();
    }

    /// The FUA write `seq` completed (before any power loss): its bytes are durable.
    pub fn fua_done(&mut self, seq: u32) {
        let op = self
            .maybe
            .iter()
            .find(|op| op.seq == seq)
            .expect("FUA write not issued")
            .clone();
        let range = self.local(op.offset, op.len);
        for (i, pos) in range.clone().zip(op.offset..) {
            self.durable[i] = op.value_at(pos).expect("inside the write");
        }
        self.durable_seq[range].fill(seq);
    }

    /// Checks a live read of `[offset, offset + buf.len())` (no crash): the newest data.
    pub fn check_live(&self, offset: u64, buf: &[u8]) -> Result<(), String> {
        let range = self.local(offset, buf.len() as u64);
        match buf
            .iter()
            .zip(&self.current[range])
            .position(|(a, b)| a != b)
        {
            None => Ok(()),
            Some(i) => Err(format!(
                "live read at {}: byte {} is {:#04x}, the last write put {:#04x}",
                offset,
                offset + i as u64,
                buf[i],
                self.current[(offset - self.start) as usize + i]
            )),
        }
    }

    fn acceptable(&self, i: usize, value: u8) -> bool {
        if value == self.durable[i] || value == self.current[i] {
            return true;
        }
        let pos = self.start + i as u64;
        self.maybe
            .iter()
            .filter(|op| op.seq > self.durable_seq[i])
            .any(|op| op.value_at(pos) == Some(value))
    }

    /// Checks the whole region as read after a crash and recovery.
    pub fn check_after_crash(&self, region: &[u8]) -> Result<(), String> {
        assert_eq!(region.len(), self.current.len());
        let bad: Vec<usize> = (0..region.len())
            .filter(|&i| !self.acceptable(i, region[i]))
            .collect();
        if bad.is_empty() {
            return Ok(());
        }
        let mut text = format!(
            "{} bytes of [{}, {}) hold a value no write left there; first ones:",
            bad.len(),
            self.start,
            self.start + self.len()
        );
        for &i in bad.iter().take(8) {
            let later: Vec<u8> = self
                .maybe
                .iter()
                .filter(|op| op.seq > self.durable_seq[i])
                .filter_map(|op| op.value_at(self.start + i as u64))
                .collect();
            let _ = write!(
                text,
                "\n  byte {}: read {:#04x}, durable {:#04x}, later writes {:02x?}",
                self.start + i as u64,
                region[i],
                self.durable[i],
                later
            );
        }
        Err(text)
    }
}

#[cfg(test)]
mod tests {
    use super::RegionModel;

    #[test]
    fn durable_and_later_values_accepted_others_not() {
        let mut m = RegionModel::new(100, 10);
        m.issue(100, 4, Some(&[1, 1, 1, 1]));
        m.flushed();
        m.issue(102, 4, Some(&[2, 2, 2, 2]));
        assert!(m.check_after_crash(&[1, 1, 1, 2, 0, 2, 0, 0, 0, 0]).is_ok());
        assert!(m.check_after_crash(&[1, 1, 2, 1, 2, 2, 0, 0, 0, 0]).is_ok());
        let err = m
            .check_after_crash(&[0, 1, 1, 1, 0, 0, 0, 0, 0, 0])
            .unwrap_err();
        assert!(err.contains("byte 100: read 0x00, durable 0x01"), "{err}");
        let seq = m.issue(100, 2, None);
        m.fua_done(seq);
        assert!(m
            .check_after_crash(&[1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
            .is_err());
        assert!(m.check_after_crash(&[0, 0, 1, 1, 0, 0, 0, 0, 0, 0]).is_ok());
        assert!(m.check_live(102, &[2, 2, 2, 2]).is_ok());
        assert!(m.check_live(100, &[1]).is_err());
    }
}
