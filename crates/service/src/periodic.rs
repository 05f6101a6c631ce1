//! [`Periodic`]: a thread that does one thing every interval until it is dropped, the shape
//! of the service's background threads (the monitor, the scheduler, the mdstat file, the
//! owner lease renewal, the daemon's systemd watchdog).

use std::ops::ControlFlow;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Runs a tick every interval on a thread of its own; dropping it stops the thread and waits
/// for a tick in progress to end.
pub struct Periodic {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Periodic {
    /// Starts thread `name`: it waits `interval`, runs `tick`, and again, until `tick` breaks
    /// or the `Periodic` is dropped. The error: the thread could not be spawned.
    pub fn start(
        name: &str,
        interval: Duration,
        mut tick: impl FnMut() -> ControlFlow<()> + Send + 'static,
    ) -> std::io::Result<Periodic> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    if tick().is_break() {
                        return;
                    }
                }
            })?;
        Ok(Periodic {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
