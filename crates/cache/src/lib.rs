//! A bounded, write-coherent read cache with read-ahead, as a filter over [`nbd::Export`]
//! (in the nbdkit sense: it changes reads, and forwards everything else).
//!
//! - [`ReadCache`]: the filter; `ReadCache<E>` is itself an `Export`. One instance is shared
//!   by every connection (`raidkit serve`: volume → `ReadCache` → NBD server).
//! - [`CacheConfig`]: memory (`size_bytes`, default 64 MiB; 0 = pass-through), block size
//!   (default 64 KiB), [`ReadAhead`] mode (`off | on | adaptive`, default adaptive), window
//!   (default 1 MiB), worker, queue and stream-table bounds.
//! - [`CacheStats`]: hits, misses, prefetch hits, prefetched bytes, evictions and memory, for
//!   `raidkit status` (serde-serializable).
//!
//! Inside: blocks are spread over up to 16 shards (`store`), each replacing blocks by 2Q so
//! sequential scans and read-ahead cannot flush re-used blocks (`shard`); writes invalidate
//! the blocks they overlap and bump per-block generations (atomics, `gens`: a write that
//! overlaps nothing cached takes no lock) so that a read racing a write can never cache
//! stale data; a bounded table of stream detectors (`stream`) decides read-ahead
//! and a fixed pool of workers with a bounded, never-blocking queue fetches it (`prefetch`).
//!
//! Memory: at most `size_bytes` (rounded down to whole blocks) of block buffers, plus per
//! worker one buffer of up to `window_bytes` + 2 blocks, plus bookkeeping (16 KiB of
//! generations per shard, a ghost list of half the blocks, the stream table).
//!
//! ```
//! use cache::{CacheConfig, CacheError, ReadCache};
//!
//! fn with_cache<E: nbd::Export>(volume: E) -> Result<ReadCache<E>, CacheError> {
//!     let config = CacheConfig {
//!         size_bytes: 256 << 20,
//!         read_ahead: "adaptive".parse()?,
//!         ..CacheConfig::default()
//!     };
//!     ReadCache::new(volume, config)
//! }
//! ```

mod config;
mod filter;
mod gens;
mod list;
mod prefetch;
mod shard;
mod stats;
mod store;
mod stream;

pub use config::{
    CacheConfig, ConfigError, ReadAhead, BLOCK_BYTES_DEFAULT, BLOCK_BYTES_MAX, BLOCK_BYTES_MIN,
    PREFETCH_QUEUE_DEFAULT, PREFETCH_QUEUE_MAX, PREFETCH_WORKERS_DEFAULT, PREFETCH_WORKERS_MAX,
    SIZE_BYTES_DEFAULT, SIZE_BYTES_MAX, STREAMS_DEFAULT, STREAMS_MAX, WINDOW_BYTES_DEFAULT,
    WINDOW_BYTES_MAX,
};
pub use filter::{CacheError, ReadCache};
pub use stats::CacheStats;
