//! Bad-block lists in the running array (docs/DESIGN.md "Bad-block lists"): every member whose
//! superblock names a list (docs/FORMAT.md "Bad-block list") is given to the engine through a
//! [`BadBlockWindow`], its data-area view that
//! - fails reads touching a recorded range with [`member::BadBlock`] (which the engine does not
//!   count against the member, and serves from redundancy where some is left);
//! - clears, after a write or write-zeroes covering recorded sectors has completed and been
//!   flushed, those sectors from the list and writes the list (the data there is valid again);
//! - records a range the engine's rebuild could not provide ([`Member::record_lost`]), durably
//!   before the rebuild goes on.
//!
//! With an empty list (the normal case) every call goes straight to the data area, io_uring and
//! detached calls included: one atomic load per call.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use member::{BadBlock, Member};
use ondisk::badblocks::{read_list, write_list, ReadListError};
use ondisk::{BadBlockList, BadBlocksRef, BadRange, Superblock};
use uuid::Uuid;

/// One member's list: kept in memory, written (both copies alternately) on every change.
#[derive(Debug)]
pub(crate) struct BadBlocks {
    whole: Arc<dyn Member>,
    array_uuid: Uuid,
    at: BadBlocksRef,
    list: Mutex<BadBlockList>,
    /// Whether `list` has a range (read without the lock on every call).
    any: AtomicBool,
}

impl BadBlocks {
    /// The list `sb` names on `whole`, read from disk; `None` when the member keeps none.
    pub(crate) fn load(
        whole: &Arc<dyn Member>,
        sb: &Superblock,
    ) -> Result<Option<Arc<BadBlocks>>, ReadListError> {
        let Some(at) = sb.bad_blocks else {
            return Ok(None);
        };
        let list = read_list(whole.as_ref(), &sb.array_uuid, &at)?;
        Ok(Some(Arc::new(BadBlocks::with(
            whole,
            sb.array_uuid,
            at,
            list,
        ))))
    }

    /// An empty list for a member whose area was just written blank.
    pub(crate) fn blank(whole: &Arc<dyn Member>, sb: &Superblock) -> Option<Arc<BadBlocks>> {
        let at = sb.bad_blocks?;
        let mut list = BadBlockList::default();
        list.generation = 1;
        Some(Arc::new(BadBlocks::with(whole, sb.array_uuid, at, list)))
    }

    fn with(
        whole: &Arc<dyn Member>,
        array_uuid: Uuid,
        at: BadBlocksRef,
        list: BadBlockList,
    ) -> Self {
        BadBlocks {
            whole: Arc::clone(whole),
            array_uuid,
            any: AtomicBool::new(!list.is_empty()),
            list: Mutex::new(list),
            at,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BadBlockList> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The recorded ranges (bytes of the data area).
    pub(crate) fn ranges(&self) -> Vec<BadRange> {
        match self.any.load(Ordering::Acquire) {
            true => self.lock().ranges().to_vec(),
            false => Vec::new(),
        }
    }

    /// The first recorded range overlapping `[offset, offset + len)`.
    fn first_overlap(&self, offset: u64, len: u64) -> Option<BadRange> {
        if !self.any.load(Ordering::Acquire) || len == 0 {
            return None;
        }
        self.lock().overlapping(offset, len).next().copied()
    }

    /// Records `[offset, offset + len)` and writes the list (flushed). False: the list is full.
    fn record(&self, offset: u64, len: u64) -> io::Result<bool> {
        let mut list = self.lock();
        let mut next = list.clone();
        match next.add(offset, len) {
            Err(_) => return Ok(false),
            Ok(false) => return Ok(true),
            Ok(true) => {}
        }
        write_list(self.whole.as_ref(), &self.array_uuid, &self.at, &mut next)?;
        *list = next;
        self.any.store(true, Ordering::Release);
        eprintln!(
            "raidkit: member {}: bytes {offset}..{} of its data area recorded as lost (bad-block list, {} ranges)",
            self.whole.name(),
            offset + len,
            list.ranges().len()
        );
        Ok(true)
    }

    /// After `[offset, offset + len)` was written: if it covers recorded sectors, makes the
    /// write durable, then clears them and writes the list.
    fn written(&self, data: &dyn Member, offset: u64, len: u64) -> io::Result<()> {
        if self.first_overlap(offset, len).is_none() {
            return Ok(());
        }
        let mut list = self.lock();
        let mut next = list.clone();
        if !next.clear(offset, len) {
            return Ok(());
        }
        data.flush()?;
        write_list(self.whole.as_ref(), &self.array_uuid, &self.at, &mut next)?;
        *list = next;
        self.any.store(!list.is_empty(), Ordering::Release);
        Ok(())
    }
}

/// A member's data area with its bad-block list (see the module docs).
#[derive(Debug)]
pub(crate) struct BadBlockWindow {
    data: Arc<dyn Member>,
    bad: Arc<BadBlocks>,
}

impl BadBlockWindow {
    pub(crate) fn new(data: Arc<dyn Member>, bad: Arc<BadBlocks>) -> BadBlockWindow {
        BadBlockWindow { data, bad }
    }

    fn check_read(&self, offset: u64, len: u64) -> io::Result<()> {
        match self.bad.first_overlap(offset, len) {
            None => Ok(()),
            Some(r) => Err(BadBlock {
                member: self.data.name().to_string(),
                offset: r.offset,
                len: r.len,
            }
            .into_io()),
        }
    }

    fn plain(&self) -> bool {
        !self.bad.any.load(Ordering::Acquire)
    }
}

impl Member for BadBlockWindow {
    fn name(&self) -> &str {
        self.data.name()
    }

    fn len(&self) -> u64 {
        self.data.len()
    }

    fn identity(&self) -> Option<member::Identity> {
        self.data.identity()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_read(offset, buf.len() as u64)?;
        self.data.read_at(buf, offset)
    }

    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.check_read(offset, len)?;
        self.data.read_vectored_at(bufs, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.data.write_at(buf, offset)?;
        self.bad
            .written(self.data.as_ref(), offset, buf.len() as u64)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.data.write_vectored_at(bufs, offset)?;
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.bad.written(self.data.as_ref(), offset, len)
    }

    fn write_durable_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.data.write_durable_at(buf, offset)?;
        self.bad
            .written(self.data.as_ref(), offset, buf.len() as u64)
    }

    fn flush(&self) -> io::Result<()> {
        self.data.flush()
    }

    /// A trim leaves the content undefined: a recorded range stays recorded.
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.data.trim(offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.data.write_zeroes(offset, len)?;
        self.bad.written(self.data.as_ref(), offset, len)
    }

    fn reconnect(&self) -> io::Result<()> {
        self.data.reconnect()
    }

    /// Only while the list is empty: otherwise the call must pass the checks above.
    fn start(&self, call: member::StartCall<'_>) -> Option<member::Started> {
        match self.plain() {
            true => self.data.start(call),
            false => None,
        }
    }

    /// Only while the list is empty (as `start`).
    fn ring_target(&self, ask: member::RingAsk) -> Option<member::RingTarget<'_>> {
        match self.plain() {
            true => self.data.ring_target(ask),
            false => None,
        }
    }

    fn stuck_calls(&self) -> (usize, u64) {
        self.data.stuck_calls()
    }

    fn record_lost(&self, offset: u64, len: u64) -> Option<io::Result<bool>> {
        Some(self.bad.record(offset, len))
    }

    fn settle(&self, offset: u64, len: u64, candidate: Option<&[u8]>) -> Option<io::Result<()>> {
        self.data.settle(offset, len, candidate)
    }
}

/// Where `role`'s data-area byte `member_offset` sits in the array: the array offset of the
/// unit (RAID 5/6 stripe, mirror chunk) holding its row, and the array byte it holds (`None`
/// for parity).
pub(crate) fn array_offset_of(
    geometry: &layout::Geometry,
    role: usize,
    member_offset: u64,
) -> (u64, Option<u64>) {
    let chunk = geometry.chunk_bytes();
    let row = member_offset / chunk;
    let unit = geometry.unit_of_row(role, row);
    let start = unit * geometry.unit_bytes();
    let end = (start + geometry.unit_bytes()).min(geometry.size_bytes());
    let held = (start..end).step_by(chunk as usize).find(|&at| {
        geometry
            .locate(at)
            .iter()
            .any(|a| a.role == role && a.member_offset == row * chunk)
    });
    (start, held.map(|at| at + member_offset % chunk))
}
