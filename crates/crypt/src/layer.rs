//! [`Encrypted`]: the export filter that encrypts every write on its way down and decrypts every
//! read on its way up (between the read cache and the journal layer: docs/DESIGN.md
//! "Encryption at rest"). Without a cipher it passes every call through unchanged.
//!
//! - **Units.** AES-256-XTS works on whole 512-byte units ([`crate::UNIT_BYTES`]), the tweak
//!   being the unit's array sector number. A request that does not start or end on a unit
//!   boundary reads the partial head and tail units, decrypts them, merges its bytes and
//!   writes the units back (read-modify-write), under `member::BlockLocks` over units: the
//!   partial units exclusively, the whole ones shared, so a write of whole units landing
//!   between the read and the write of a partial unit is never undone; a read holds its units
//!   shared, so it never decrypts a unit half rewritten.
//! - **Zero units.** A unit whose ciphertext is all zero reads as zeroes: a new array (whose
//!   members `create` zeroed), a trimmed range and a range written with `write_zeroes` read
//!   zeroes, and `write_zeroes` and `trim` of whole units pass down as they are (no data is
//!   encrypted; the members learn which units are zero, as with dm-crypt's discards). A unit
//!   whose real ciphertext is all zero has probability 2^-4096. Partial units of a
//!   `write_zeroes` are written as encrypted zeroes; those of a `trim` are left as they are
//!   (a trim's content is unspecified).
//! - **Block status.** A unit whose ciphertext is all zero is reported as reading zeroes;
//!   holes below pass through at the units they cover whole; everything else is data. At most
//!   [`PIECE_BYTES`] is looked at per request (the ciphertext read, under the units' shared
//!   locks); the reply covers that much and the client asks again for the rest.
//! - **Bounds.** Writes are encrypted into a per-thread buffer of at most [`PIECE_BYTES`]
//!   (longer writes go down in pieces), so the layer adds at most 1 MiB per request thread.
//!   Reads decrypt in place in the caller's buffer (unaligned ones through that buffer).

use std::cell::RefCell;
use std::io;

use member::BlockLocks;
use nbd::{Export, StatusExtent};

use crate::cipher::{is_zero, DataCipher};
use crate::UNIT_BYTES;

/// Largest piece encrypted at once (and so the per-thread buffer).
pub const PIECE_BYTES: u64 = 1 << 20;
const UNIT: u64 = UNIT_BYTES as u64;

thread_local! {
    /// The ciphertext of a write, or the plaintext of an unaligned read: one per request
    /// thread, at most [`PIECE_BYTES`].
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's buffer of `len` bytes (≤ [`PIECE_BYTES`]).
fn with_buffer<T>(len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    assert!(len as u64 <= PIECE_BYTES);
    BUFFER.with(|b| {
        let mut b = b.borrow_mut();
        if b.len() < len {
            b.resize(len, 0);
        }
        f(&mut b[..len])
    })
}

/// An export whose data below is encrypted; see the module documentation.
pub struct Encrypted<E> {
    inner: E,
    cipher: Option<DataCipher>,
    units: BlockLocks,
}

impl<E: Export> Encrypted<E> {
    /// `inner` seen through `cipher`; `None`: a pass-through.
    pub fn new(inner: E, cipher: Option<DataCipher>) -> Encrypted<E> {
        Encrypted {
            inner,
            cipher,
            units: BlockLocks::new(),
        }
    }

    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// True when the data below is encrypted.
    pub fn is_encrypted(&self) -> bool {
        self.cipher.is_some()
    }

    /// Reads whole units `[at, at + buf.len())` and decrypts them.
    fn read_units(&self, cipher: &DataCipher, at: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read(at, buf)?;
        cipher.decrypt_nonzero(buf, at / UNIT);
        Ok(())
    }

    /// One piece `[at, at + buf.len())` (whole units) of a write of `data` at `offset`: the
    /// partial units it has are read first, then the piece is encrypted and written.
    fn write_piece(
        &self,
        cipher: &DataCipher,
        at: u64,
        buf: &mut [u8],
        offset: u64,
        data: &[u8],
        fua: bool,
    ) -> io::Result<()> {
        let end = at + buf.len() as u64;
        let data_end = offset + data.len() as u64;
        let head = at < offset;
        if head {
            self.read_units(cipher, at, &mut buf[..UNIT_BYTES])?;
        }
        let tail_unit = end - UNIT;
        if end > data_end && !(head && tail_unit == at) {
            let n = buf.len();
            self.read_units(cipher, tail_unit, &mut buf[n - UNIT_BYTES..])?;
        }
        let lo = at.max(offset);
        let hi = end.min(data_end);
        // The units the data covers whole are encrypted from it straight into the buffer (one
        // pass); the bytes of the partial head and tail units (read and decrypted above) are
        // merged in the buffer, and those units encrypted there.
        let (whole_lo, whole_hi) = (lo.div_ceil(UNIT) * UNIT, hi / UNIT * UNIT);
        let copy = |buf: &mut [u8], from: u64, to: u64| {
            if from < to {
                buf[(from - at) as usize..(to - at) as usize]
                    .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
            }
        };
        copy(buf, lo, whole_lo.min(hi));
        copy(buf, whole_hi.max(lo), hi);
        if whole_lo < whole_hi {
            cipher.encrypt_to(
                &data[(whole_lo - offset) as usize..(whole_hi - offset) as usize],
                &mut buf[(whole_lo - at) as usize..(whole_hi - at) as usize],
                whole_lo / UNIT,
            );
        }
        let head_part = (!lo.is_multiple_of(UNIT)).then_some(lo / UNIT * UNIT);
        let tail_part = (!hi.is_multiple_of(UNIT)).then_some(hi / UNIT * UNIT);
        let tail_part = tail_part.filter(|&t| Some(t) != head_part);
        for unit in [head_part, tail_part].into_iter().flatten() {
            cipher.encrypt(
                &mut buf[(unit - at) as usize..(unit + UNIT - at) as usize],
                unit / UNIT,
            );
        }
        self.inner.write(at, buf, fua)
    }
}

/// The whole units covering `[offset, offset + len)`.
fn cover(offset: u64, len: u64) -> (u64, u64) {
    (offset / UNIT * UNIT, (offset + len).div_ceil(UNIT) * UNIT)
}

/// Which units of `[start, end)` (whole units) lie wholly inside an extent `below` (which
/// starts at `start`) says is a hole: allocation is the storage's, so it passes through at
/// the units it covers whole.
fn whole_unit_holes(start: u64, end: u64, below: &[StatusExtent]) -> Vec<bool> {
    let mut holes = vec![false; ((end - start) / UNIT) as usize];
    let mut at = start;
    for e in below {
        let e_end = (at + u64::from(e.length)).min(end);
        if e.hole {
            let (lo, hi) = (at.div_ceil(UNIT) * UNIT, e_end / UNIT * UNIT);
            for unit in (lo..hi).step_by(UNIT_BYTES) {
                holes[((unit - start) / UNIT) as usize] = true;
            }
        }
        at = e_end;
        if at >= end {
            break;
        }
    }
    holes
}

/// The status of bytes `[from, to)` of `ciphertext` (whole units): a unit whose ciphertext is
/// all zero reads as zeroes (`zero`), whatever part of it is asked about; any other is data.
/// Runs of units alike make one extent.
fn unit_extents(ciphertext: &[u8], holes: &[bool], from: u64, to: u64) -> Vec<StatusExtent> {
    let mut extents: Vec<StatusExtent> = Vec::new();
    for (i, unit) in ciphertext.chunks_exact(UNIT_BYTES).enumerate() {
        let (lo, hi) = ((i as u64 * UNIT).max(from), ((i as u64 + 1) * UNIT).min(to));
        if lo >= hi {
            continue;
        }
        let zero = is_zero(unit);
        let (hole, length) = (holes[i], (hi - lo) as u32);
        match extents.last_mut() {
            Some(last) if last.zero == zero && last.hole == hole => last.length += length,
            _ => extents.push(StatusExtent { length, hole, zero }),
        }
    }
    extents
}

impl<E: Export> Export for Encrypted<E> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let Some(cipher) = &self.cipher else {
            return self.inner.read(offset, buf);
        };
        let len = buf.len() as u64;
        if len == 0 {
            return self.inner.read(offset, buf);
        }
        let _held = self.units.read(UNIT, offset, len);
        let (start, end) = cover(offset, len);
        if (start, end) == (offset, offset + len) {
            return self.read_units(cipher, offset, buf);
        }
        let mut at = start;
        while at < end {
            let piece = (end - at).min(PIECE_BYTES);
            with_buffer(piece as usize, |b| -> io::Result<()> {
                self.read_units(cipher, at, b)?;
                let lo = at.max(offset);
                let hi = (at + piece).min(offset + len);
                buf[(lo - offset) as usize..(hi - offset) as usize]
                    .copy_from_slice(&b[(lo - at) as usize..(hi - at) as usize]);
                Ok(())
            })?;
            at += piece;
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        let Some(cipher) = &self.cipher else {
            return self.inner.write(offset, data, fua);
        };
        let len = data.len() as u64;
        if len == 0 {
            return self.inner.write(offset, data, fua);
        }
        let _held = self.units.hold(UNIT, offset, len);
        let (start, end) = cover(offset, len);
        let mut at = start;
        while at < end {
            let piece = (end - at).min(PIECE_BYTES);
            with_buffer(piece as usize, |b| {
                self.write_piece(cipher, at, b, offset, data, fua)
            })?;
            at += piece;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        if self.cipher.is_none() {
            return self.inner.trim(offset, len);
        }
        let (lo, hi) = (offset.div_ceil(UNIT) * UNIT, (offset + len) / UNIT * UNIT);
        if lo >= hi {
            return Ok(());
        }
        let _held = self.units.hold(UNIT, lo, hi - lo);
        self.inner.trim(lo, hi - lo)
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> io::Result<()> {
        if self.cipher.is_none() {
            return self.inner.write_zeroes(offset, len, may_trim);
        }
        let (lo, hi) = (offset.div_ceil(UNIT) * UNIT, (offset + len) / UNIT * UNIT);
        if lo >= hi {
            // Within one unit: a read-modify-write of zeroes.
            return self.write(offset, &vec![0; len as usize], false);
        }
        {
            let _held = self.units.hold(UNIT, lo, hi - lo);
            self.inner.write_zeroes(lo, hi - lo, may_trim)?;
        }
        if offset < lo {
            self.write(offset, &vec![0; (lo - offset) as usize], false)?;
        }
        if offset + len > hi {
            self.write(hi, &vec![0; (offset + len - hi) as usize], false)?;
        }
        Ok(())
    }

    fn block_status(&self, offset: u64, len: u32) -> io::Result<Vec<StatusExtent>> {
        if self.cipher.is_none() || len == 0 {
            return self.inner.block_status(offset, len);
        }
        // At most one piece is looked at (the reply may cover less than asked, as the spec
        // allows: the client asks again from where it ends).
        let (start, _) = cover(offset, u64::from(len));
        let end = (offset + u64::from(len)).min(start + PIECE_BYTES);
        let (_, cover_end) = cover(offset, end - offset);
        let below = self.inner.block_status(start, (cover_end - start) as u32)?;
        let holes = whole_unit_holes(start, cover_end, &below);
        let _held = self.units.read(UNIT, offset, end - offset);
        with_buffer((cover_end - start) as usize, |b| -> io::Result<_> {
            self.inner.read(start, b)?;
            Ok(unit_extents(b, &holes, offset - start, end - start))
        })
    }

    fn preferred_block_size(&self) -> u32 {
        self.inner.preferred_block_size()
    }

    fn can_multi_conn(&self) -> bool {
        self.inner.can_multi_conn()
    }

    fn can_fast_zero(&self) -> bool {
        self.inner.can_fast_zero()
    }

    fn cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.cache(offset, len)
    }
}
