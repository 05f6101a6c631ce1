//! State shared by every connection of one server.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::config::{ServerConfig, BUFFER_UNIT_BYTES};
use crate::codec::consts::*;
use crate::export::Export;

pub(crate) struct Shared {
    pub export: Arc<dyn Export>,
    pub config: ServerConfig,
    /// Size of the export, read once: it does not change while serving.
    pub size: u64,
    /// Bounds export calls running at once.
    pub blocking: Arc<Semaphore>,
    /// Bounds request/reply buffer bytes held at once, in units of `BUFFER_UNIT_BYTES`.
    pub buffers: Arc<Semaphore>,
}

impl Shared {
    pub fn new(export: Arc<dyn Export>, config: ServerConfig) -> Self {
        let units = (config.max_buffer_bytes / BUFFER_UNIT_BYTES) as usize;
        Shared {
            size: export.size(),
            blocking: Arc::new(Semaphore::new(config.max_blocking_calls)),
            buffers: Arc::new(Semaphore::new(units)),
            export,
            config,
        }
    }

    /// True if `name` selects our export (its name, or the default empty name).
    pub fn is_our_export(&self, name: &str) -> bool {
        name.is_empty() || name == self.config.export_name
    }

    /// Transmission flags: exactly the features that work on this export.
    pub fn transmission_flags(&self, structured: bool) -> u16 {
        let mut flags = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_CACHE;
        if self.config.read_only {
            flags |= FLAG_READ_ONLY;
        } else {
            flags |= FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
        }
        if structured {
            // Reads are always answered with a single content chunk.
            flags |= FLAG_SEND_DF;
        }
        if self.export.can_multi_conn() {
            flags |= FLAG_CAN_MULTI_CONN;
        }
        flags
    }

    /// (minimum, preferred, maximum) block sizes. The protocol requires a power-of-two
    /// preferred size in [512, maximum]: the export's wish is rounded up to one.
    pub fn block_sizes(&self) -> (u32, u32, u32) {
        let maximum = self.config.max_request_bytes;
        let wish = self.export.preferred_block_size().clamp(512, 1 << 31);
        let mut preferred = wish.next_power_of_two();
        while preferred > maximum {
            preferred /= 2;
        }
        assert!(preferred.is_power_of_two() && preferred >= 512 && preferred <= maximum);
        (1, preferred, maximum)
    }

    /// Reserves buffer budget for `bytes` (waits while the budget is exhausted).
    pub async fn reserve_buffer(&self, bytes: u64) -> OwnedSemaphorePermit {
        let units = bytes.div_ceil(BUFFER_UNIT_BYTES).max(1);
        assert!(units <= u64::from(u32::MAX));
        self.buffers
            .clone()
            .acquire_many_owned(units as u32)
            .await
            .expect("buffer semaphore is never closed")
    }
}
