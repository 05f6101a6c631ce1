//! Around serving an assembled array: [`start_resync`] of an array found dirty,
//! [`LeaseRenewal`] of its owner record while it serves, and `close` in the order that keeps
//! acknowledged writes (drain the write-back journal, close the volume, checkpoint the
//! journal, release the owner record).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use export::JournalLayer;
use volume::{TakenOver, Volume, VolumeError};

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
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl LeaseRenewal {
    pub fn start(
        volume: &Arc<Volume>,
        taken_over: impl FnOnce(TakenOver) + Send + 'static,
    ) -> LeaseRenewal {
        let (stop, stopped) = mpsc::channel::<()>();
        let volume = Arc::clone(volume);
        let renew = move || {
            while volume.owner().is_some() {
                match stopped.recv_timeout(ondisk::owner::LEASE_RENEW_INTERVAL) {
                    Err(RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
                if let Err(taken) = volume.renew_owner() {
                    return taken_over(taken);
                }
            }
        };
        LeaseRenewal {
            stop: Some(stop),
            thread: Some(std::thread::spawn(renew)),
        }
    }
}

impl Drop for LeaseRenewal {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
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
