//! State shared by every connection of one export.

use std::sync::Arc;

use tokio::sync::watch;

use super::buffers::BufferPool;
use super::config::{ServerConfig, BUFFER_UNIT_BYTES};
use super::gate::{Gate, Permit};
use crate::codec::consts::*;
use crate::export::Export;

pub(crate) struct Shared {
    pub export: Arc<dyn Export>,
    pub config: ServerConfig,
    /// Size of the export, read once: it does not change while serving.
    pub size: u64,
    /// Bounds export calls running at once.
    pub blocking: Gate,
    /// Bounds request/reply buffer bytes held at once, in units of `BUFFER_UNIT_BYTES`.
    pub buffers: Gate,
    /// Idle request/reply buffers kept for reuse.
    pub pool: BufferPool,
    /// Set when the export is removed or the listener shuts down: its connections stop
    /// taking requests.
    pub stop: watch::Sender<bool>,
    /// Connections that selected this export and have not closed (`exports::Selected`).
    pub live: watch::Sender<usize>,
}

impl Shared {
    pub fn new(export: Arc<dyn Export>, config: ServerConfig) -> Self {
        let units = config.max_buffer_bytes / BUFFER_UNIT_BYTES;
        Shared {
            size: export.size(),
            blocking: Gate::new(config.max_blocking_calls as u64),
            buffers: Gate::new(units),
            pool: BufferPool::new(config.max_request_bytes, config.max_idle_buffer_bytes),
            stop: watch::channel(false).0,
            live: watch::channel(0).0,
            export,
            config,
        }
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

    /// Reserves buffer budget for a buffer of `bytes` (blocks while the budget is
    /// exhausted); charged what the pool really allocates for it.
    pub fn reserve_buffer(&self, bytes: u32) -> Permit<'_> {
        let charged = BufferPool::charged_bytes(bytes as usize);
        let units = charged.div_ceil(BUFFER_UNIT_BYTES).max(1);
        self.buffers.acquire(units)
    }
}
