//! `SimMember`: an in-memory member that simulates power loss, for crash tests.
//!
//! Like redb's crash tests and TigerBeetle's simulated storage, it keeps what was written apart
//! from what was made durable. Writes (and trims, write-zeroes) land in the current image that
//! reads see, and are logged as unflushed; `flush` makes everything written so far durable;
//! `write_durable_at` makes only its own bytes durable (earlier unflushed writes stay at risk).
//! [`SimMember::crash`] returns the image a power loss could leave: the durable data plus an
//! arbitrary, seeded subset of the unflushed writes, each kept write possibly torn at
//! [`SECTOR_BYTES`] granularity (some of its sectors kept, some not). Sector writes are atomic:
//! a sector of one write is kept whole or not at all. Memory is bounded: the member is at most
//! [`SIM_MAX_BYTES`], unflushed data at most [`SIM_UNFLUSHED_MAX_BYTES`] (asserted).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::check_member_range;
use crate::Member;
use crate::SimRng;

/// The unit a power loss tears writes at (sector writes are atomic).
pub const SECTOR_BYTES: u64 = 512;
/// Largest simulated member.
pub const SIM_MAX_BYTES: u64 = 1 << 30;
/// Largest amount of unflushed written data held for a crash.
pub const SIM_UNFLUSHED_MAX_BYTES: u64 = 256 << 20;
/// Allocation unit of the sparse images.
const PAGE_BYTES: u64 = 4096;

type Page = [u8; PAGE_BYTES as usize];

/// A sparse byte image in pages; absent pages read as zeroes. Pages are shared copy-on-write,
/// so cloning an image (flush, crash) copies only the page table.
#[derive(Debug, Clone, Default)]
struct Image {
    pages: HashMap<u64, Arc<Page>>,
}

impl Image {
    fn for_each_piece(
        offset: u64,
        len: u64,
        mut f: impl FnMut(u64, usize, std::ops::Range<usize>),
    ) {
        let mut done = 0u64;
        while done < len {
            let pos = offset + done;
            let piece = (PAGE_BYTES - pos % PAGE_BYTES).min(len - done);
            f(
                pos / PAGE_BYTES,
                (pos % PAGE_BYTES) as usize,
                done as usize..(done + piece) as usize,
            );
            done += piece;
        }
    }

    fn read(&self, buf: &mut [u8], offset: u64) {
        Self::for_each_piece(offset, buf.len() as u64, |page, at, range| {
            let out = &mut buf[range];
            match self.pages.get(&page) {
                Some(p) => out.copy_from_slice(&p[at..at + out.len()]),
                None => out.fill(0),
            }
        });
    }

    fn write(&mut self, data: &[u8], offset: u64) {
        Self::for_each_piece(offset, data.len() as u64, |page, at, range| {
            let p = self
                .pages
                .entry(page)
                .or_insert_with(|| Arc::new([0u8; PAGE_BYTES as usize]));
            Arc::make_mut(p)[at..at + range.len()].copy_from_slice(&data[range]);
        });
    }

    fn zero(&mut self, offset: u64, len: u64) {
        Self::for_each_piece(offset, len, |page, at, range| {
            if range.len() as u64 == PAGE_BYTES {
                self.pages.remove(&page);
            } else if let Some(p) = self.pages.get_mut(&page) {
                Arc::make_mut(p)[at..at + range.len()].fill(0);
            }
        });
    }
}

/// What an unflushed operation wrote.
#[derive(Debug)]
enum Written {
    Bytes(Vec<u8>),
    Zeroes(u64),
}

impl Written {
    fn len(&self) -> u64 {
        match self {
            Written::Bytes(b) => b.len() as u64,
            Written::Zeroes(n) => *n,
        }
    }

    /// Applies `[from, to)` (relative to the write) to `image` at `offset + from`.
    fn apply(&self, image: &mut Image, offset: u64, from: u64, to: u64) {
        assert!(from <= to && to <= self.len());
        match self {
            Written::Bytes(b) => image.write(&b[from as usize..to as usize], offset + from),
            Written::Zeroes(_) => image.zero(offset + from, to - from),
        }
    }
}

#[derive(Debug)]
struct SimState {
    current: Image,
    durable: Image,
    unflushed: Vec<Pending>,
    unflushed_bytes: u64,
}

/// One operation since the last flush. A `durable` one (`write_durable_at`) is already in the
/// durable image and is kept by every crash; it stays in the log so that a crash replays it
/// after any older unflushed write to the same bytes.
#[derive(Debug)]
struct Pending {
    offset: u64,
    written: Written,
    durable: bool,
}

/// An in-memory member with separate written and durable data. See the module docs.
#[derive(Debug)]
pub struct SimMember {
    name: String,
    size_bytes: u64,
    state: Mutex<SimState>,
}

impl SimMember {
    /// A new all-zero member of `size_bytes` (at most [`SIM_MAX_BYTES`]).
    pub fn new(name: &str, size_bytes: u64) -> SimMember {
        SimMember::from_image(name, size_bytes, Image::default())
    }

    fn from_image(name: &str, size_bytes: u64, image: Image) -> SimMember {
        assert!(size_bytes > 0, "simulated member {name} of zero bytes");
        assert!(
            size_bytes <= SIM_MAX_BYTES,
            "simulated member {name} larger than {SIM_MAX_BYTES}"
        );
        SimMember {
            name: name.to_string(),
            size_bytes,
            state: Mutex::new(SimState {
                current: image.clone(),
                durable: image,
                unflushed: Vec::new(),
                unflushed_bytes: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Operations written but not yet flushed.
    pub fn unflushed_count(&self) -> usize {
        self.lock().unflushed.len()
    }

    /// Reads the durable image (what survives any crash), for test assertions.
    pub fn read_durable(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "read durable", offset, buf.len() as u64)?;
        self.lock().durable.read(buf, offset);
        Ok(())
    }

    /// A power loss: returns a new member (same name and size, everything durable, nothing
    /// unflushed) holding the durable data plus a subset of the unflushed writes chosen by
    /// `seed`: each unflushed write is lost, kept whole, or torn (each of its sectors kept or
    /// lost independently). Kept pieces are applied in write order. `self` is unchanged.
    pub fn crash(&self, seed: u64) -> SimMember {
        let state = self.lock();
        let mut image = state.durable.clone();
        let mut rng = SimRng::new(seed);
        for p in &state.unflushed {
            let (offset, written) = (p.offset, &p.written);
            if p.durable {
                written.apply(&mut image, offset, 0, written.len());
                continue;
            }
            match rng.below(3) {
                0 => {}
                1 => written.apply(&mut image, offset, 0, written.len()),
                _ => tear(&mut image, offset, written, &mut rng),
            }
        }
        drop(state);
        SimMember::from_image(&self.name, self.size_bytes, image)
    }

    fn record(&self, offset: u64, written: Written, durable: bool) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let len = written.len();
        match &written {
            Written::Bytes(b) => state.current.write(b, offset),
            Written::Zeroes(n) => state.current.zero(offset, *n),
        }
        let cost = match &written {
            Written::Bytes(b) => b.len() as u64,
            Written::Zeroes(_) => 0,
        };
        state.unflushed_bytes += cost;
        assert!(
            state.unflushed_bytes <= SIM_UNFLUSHED_MAX_BYTES,
            "simulated member {}: more than {SIM_UNFLUSHED_MAX_BYTES} bytes unflushed (flush more often)",
            self.name
        );
        if durable {
            written.apply(&mut state.durable, offset, 0, len);
        }
        if len > 0 {
            state.unflushed.push(Pending {
                offset,
                written,
                durable,
            });
        }
    }
}

/// Applies the sectors of `written` that `rng` keeps (each with probability 1/2).
fn tear(image: &mut Image, offset: u64, written: &Written, rng: &mut SimRng) {
    let end = offset + written.len();
    let mut pos = offset;
    while pos < end {
        let sector_end = ((pos / SECTOR_BYTES) + 1) * SECTOR_BYTES;
        let piece_end = sector_end.min(end);
        if rng.chance(1, 2) {
            written.apply(image, offset, pos - offset, piece_end - offset);
        }
        pos = piece_end;
    }
}

impl Member for SimMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "read", offset, buf.len() as u64)?;
        self.lock().current.read(buf, offset);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "write", offset, buf.len() as u64)?;
        self.record(offset, Written::Bytes(buf.to_vec()), false);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut guard = self.lock();
        let state = &mut *guard;
        for p in state.unflushed.drain(..) {
            p.written
                .apply(&mut state.durable, p.offset, 0, p.written.len());
        }
        state.unflushed_bytes = 0;
        Ok(())
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "write", offset, buf.len() as u64)?;
        self.record(offset, Written::Bytes(buf.to_vec()), true);
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "trim", offset, len)?;
        self.record(offset, Written::Zeroes(len), false);
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "write-zeroes", offset, len)?;
        self.record(offset, Written::Zeroes(len), false);
        Ok(())
    }
}
