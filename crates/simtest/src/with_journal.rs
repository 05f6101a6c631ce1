//! Power loss with a journal (issue 5's "software battery") in front of the volume, attached
//! by the `export` crate — the code `raidkit serve` runs: write-back — a write is
//! acknowledged once durable in the journal, FLUSH returns at once, trims drain the buffer then
//! go to the volume; write-through on RAID 5/6 — every stripe is logged before it is written
//! in place, FLUSH and FUA need no member flush. After the cut the journal member's image is
//! attached to the reassembled volume as at a server start (replay, then a new session) before
//! the usual checks; with write-back every acknowledged write must read back.

use std::io;
use std::sync::Arc;

use export::{AttachOptions, JournalExport};
use member::Member;
use nbd::Export;
use volume::Volume;

use crate::rig::Target;

/// Size of the simulated journal member.
pub const JOURNAL_BYTES: u64 = 8 << 20;

/// A volume with a journal in front, exported as `raidkit serve --journal` exports it.
pub struct JournalTarget {
    attached: Arc<export::JournalLayer>,
    export: JournalExport,
}

impl JournalTarget {
    /// Starts a journal session on `jm` (already formatted) over `volume`.
    pub fn start(volume: Arc<Volume>, jm: Arc<dyn Member>) -> JournalTarget {
        let attached = attach(&volume, jm, "start");
        let export = attached.export();
        JournalTarget { attached, export }
    }
}

impl Target for JournalTarget {
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.export.write(offset, data, false)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.export.read(offset, buf)
    }
    fn flush(&self) -> io::Result<()> {
        self.export.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.export.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.export.write_zeroes(offset, len, true)
    }
    fn close(&self) -> Option<io::Result<()>> {
        None
    }
    fn ack_is_durable(&self) -> bool {
        self.attached.acks_are_durable()
    }
}

/// Attaches the journal on `jm` to `volume` as `raidkit serve` does at start: replay, then a
/// new session hooked into the write path.
pub fn attach(
    volume: &Arc<Volume>,
    jm: Arc<dyn Member>,
    context: &str,
) -> Arc<export::JournalLayer> {
    let jsb = journal::read_superblock(jm.as_ref())
        .unwrap_or_else(|e| panic!("{context}: journal superblock: {e}"));
    let (attached, _) = export::JournalLayer::attach(jm, jsb, volume, AttachOptions::default())
        .unwrap_or_else(|e| panic!("{context}: attaching the journal: {e}"));
    Arc::new(attached)
}

/// Clean shutdown of an attached journal around `Volume::close`, as `raidkit serve` does.
pub fn close(volume: &Volume, attached: &export::JournalLayer, context: &str) {
    attached
        .drain()
        .unwrap_or_else(|e| panic!("{context}: draining the journal: {e}"));
    volume
        .close()
        .unwrap_or_else(|e| panic!("{context}: close after recovery: {e}"));
    attached
        .close()
        .unwrap_or_else(|e| panic!("{context}: closing the journal: {e}"));
}
