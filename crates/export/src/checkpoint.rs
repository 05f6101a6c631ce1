//! The journal's checkpoints, run here because this layer owns both the journal and the
//! volume it protects: flush the volume (every in-place write of the records released has
//! returned, and a member failed by the flush is recorded in the superblocks by the volume's
//! settle), then advance the journal's tail. The journal itself calls nothing above it.

use std::io;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use journal::{Journal, JournalError};
use volume::Volume;

/// Flushes `volume` and checkpoints `journal`: releases every complete, durable record at
/// the front of its ring. Returns the number released.
pub fn checkpoint(journal: &Journal, volume: &Volume) -> Result<u64, JournalError> {
    match journal.begin_checkpoint()? {
        Some(checkpoint) => checkpoint.finish(volume.flush().map_err(io::Error::from)),
        None => Ok(0),
    }
}

/// A thread that checkpoints whenever the journal says one is due (every
/// `journal::CHECKPOINT_INTERVAL`, when the ring is half full, when a writer waits for room).
/// Stops when the journal is closed, the volume is gone, or this is dropped.
pub struct Checkpointer {
    journal: Arc<Journal>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl Checkpointer {
    pub fn start(journal: &Arc<Journal>, volume: &Arc<Volume>) -> io::Result<Checkpointer> {
        let (j, volume): (Arc<Journal>, Weak<Volume>) =
            (Arc::clone(journal), Arc::downgrade(volume));
        let handle = std::thread::Builder::new()
            .name("journal-checkpoint".into())
            .spawn(move || {
                while j.wait_checkpoint_due() {
                    let Some(volume) = volume.upgrade() else {
                        return;
                    };
                    // A failure is sticky in the journal: writers see it.
                    let _ = checkpoint(&j, &volume);
                }
            })?;
        Ok(Checkpointer {
            journal: Arc::clone(journal),
            handle: Mutex::new(Some(handle)),
        })
    }

    /// Closes the journal and waits for the thread to end. Returns the records still live.
    pub fn stop(&self) -> u64 {
        let live = self.journal.close();
        let handle = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        live
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop();
    }
}
