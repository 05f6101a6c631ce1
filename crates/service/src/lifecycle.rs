//! Around serving an assembled array: [`start_resync`] of an array found dirty,
//! [`LeaseRenewal`] of its owner record while it serves, and `close` in the order that keeps
//! acknowledged writes (drain the write-back journal, close the volume, checkpoint the
//! journal, release the owner record).

use std::ops::ControlFlow;
use std::sync::Arc;

use anyhow::Context;
use export::JournalLayer;
use volume::{TakenOver, Volume, VolumeError};

use crate::periodic::Periodic;

/// Makes redundancy consistent after an unclean shutdown while the array is served, on a
/// thread of its own; `finished` hears how it ended. Until it finishes, `Volume::close`
/// leaves the array marked dirty.
pub fn start_resync(
    volume: &Arc<Volume>,
    finished: impl FnOnce(Result<(), VolumeError>) + Send + 'static,
) {
    let volume = Arc::clone(volume);
    std::thread::spawn(move || finished(volume.resync()));
}

/// Renews the array's owner lease every `ondisk::owner::LEASE_RENEW_INTERVAL` while it is
/// served (see `ondisk::owner`); stops when dropped. If the renewal finds the array taken
/// over by another process, `taken_over` is called and the renewal ends: the front end must
/// then stop writing to the array at once (two writers would corrupt it).
pub struct LeaseRenewal {
    _renewing: Periodic,
}

impl LeaseRenewal {
    pub fn start(
        volume: &Arc<Volume>,
        taken_over: impl FnOnce(TakenOver) + Send + 'static,
    ) -> LeaseRenewal {
        let volume = Arc::clone(volume);
        let mut taken_over = Some(taken_over);
        let renew = move || {
            if volume.owner().is_none() {
                return ControlFlow::Break(());
            }
            let Err(taken) = volume.renew_owner() else {
                return ControlFlow::Continue(());
            };
            if let Some(taken_over) = taken_over.take() {
                taken_over(taken);
            }
            ControlFlow::Break(())
        };
        let interval = ondisk::owner::LEASE_RENEW_INTERVAL;
        LeaseRenewal {
            _renewing: Periodic::start("lease", interval, renew)
                .expect("spawning the lease renewal thread"),
        }
    }
}

/// What `close` (run by [`crate::stack::ArrayStack::close`]) did, step by step; the first
/// error is the one to report.
pub struct Closed {
    /// The write-back journal applied every buffered write.
    pub drained: anyhow::Result<()>,
    /// The volume flushed its members and marked the array clean (skipped, `Ok`, when the
    /// drain failed: the array stays dirty and the next start replays the journal).
    pub volume: anyhow::Result<()>,
    /// The journal was checkpointed empty: the records it still held for replay (none after a
    /// drain), by journal name; `None` without a journal.
    pub journal: anyhow::Result<Option<(String, u64)>>,
}

/// Closes a served array once no request is in flight (the NBD server returned and the
/// reconnect thread stopped): drains the write-back journal, closes the volume (flush, mark
/// clean) unless the drain failed, checkpoints the journal, and releases the owner record if
/// the volume closed. Every step runs even if serving failed: requests already answered must
/// be flushed.
pub(crate) fn close(volume: &Volume, journaled: &JournalLayer) -> Closed {
    let drained = journaled.drain().context("draining the write-back journal");
    let closed = match drained {
        Ok(()) => volume
            .close()
            .with_context(|| format!("closing array \"{}\" (flush and mark clean)", volume.name())),
        Err(_) => Ok(()),
    };
    let journal = journaled.close().context("closing the journal");
    if closed.is_ok() {
        volume.release_owner();
    }
    Closed {
        drained,
        volume: closed,
        journal,
    }
}
