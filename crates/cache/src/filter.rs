//! [`ReadCache`]: the filter. It changes reads (served from memory when it can, with
//! read-ahead), wraps writes, trims and write-zeroes in the invalidation protocol, and
//! forwards everything else unchanged.

use std::fmt;
use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use nbd::{Export, StatusExtent};

use crate::config::{CacheConfig, ConfigError, ReadAhead};
use crate::prefetch::{Pool, Shared};
use crate::shard::Snapshot;
use crate::stats::{add, CacheStats};
use crate::store::Store;
use crate::stream::Streams;

/// Why a cache could not be built.
#[derive(Debug)]
pub enum CacheError {
    /// The configuration is refused.
    Config(ConfigError),
    /// A read-ahead worker thread could not be started.
    Spawn(io::Error),
}

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheError::Config(e) => write!(f, "read cache: {e}"),
            CacheError::Spawn(e) => write!(f, "read cache: starting a read-ahead thread: {e}"),
        }
    }
}

impl std::error::Error for CacheError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CacheError::Config(e) => Some(e),
            CacheError::Spawn(e) => Some(e),
        }
    }
}

impl From<ConfigError> for CacheError {
    fn from(e: ConfigError) -> Self {
        CacheError::Config(e)
    }
}

/// A read cache with read-ahead in front of an [`Export`]; itself an `Export`. One instance
/// serves every connection. Dropping it stops the read-ahead workers: queued jobs are dropped
/// and the drop waits for the ones running (at most one read below per worker).
pub struct ReadCache<E: Export> {
    shared: Arc<Shared<E>>,
    streams: Option<Mutex<Streams>>,
    pool: Option<Pool>,
    /// Read-ahead job size: a quarter window (at least a block), so a window is fetched by
    /// up to four workers at once.
    piece_bytes: u64,
    config: CacheConfig,
}

/// A quarter of the window in whole blocks, at least one block.
fn piece_bytes(config: &CacheConfig) -> u64 {
    let bb = config.block_bytes;
    (config.window_bytes / 4 / bb).max(1) * bb
}

impl<E: Export> fmt::Debug for ReadCache<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadCache")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<E: Export> ReadCache<E> {
    /// Puts a cache configured by `config` in front of `inner`. With `size_bytes == 0` every
    /// call is forwarded and no memory or thread is used.
    pub fn new(inner: E, config: CacheConfig) -> Result<Self, CacheError> {
        config.validate()?;
        let export_bytes = inner.size();
        let store = config.enabled().then(|| Store::new(&config, export_bytes));
        let shared = Arc::new(Shared { inner, store });
        let read_ahead =
            config.enabled() && config.read_ahead != ReadAhead::Off && export_bytes > 0;
        let mut cache = ReadCache {
            shared,
            streams: None,
            pool: None,
            piece_bytes: 0,
            config,
        };
        if read_ahead {
            cache.start_read_ahead(export_bytes)?;
        }
        Ok(cache)
    }

    fn start_read_ahead(&mut self, export_bytes: u64) -> Result<(), CacheError> {
        let c = &self.config;
        let streams = Streams::new(c.streams, c.read_ahead, c.window_bytes, export_bytes);
        self.piece_bytes = piece_bytes(c);
        // A piece that starts and ends mid-block touches two extra blocks.
        let job_blocks_max = self.piece_bytes / c.block_bytes + 2;
        let pool = Pool::start(
            &self.shared,
            c.prefetch_workers,
            c.prefetch_queue,
            job_blocks_max,
        )
        .map_err(CacheError::Spawn)?;
        self.streams = Some(Mutex::new(streams));
        self.pool = Some(pool);
        Ok(())
    }

    /// The export below.
    pub fn inner(&self) -> &E {
        &self.shared.inner
    }

    /// Stops read-ahead (jobs still queued are dropped, those running finish) and returns
    /// the export below.
    pub fn into_inner(mut self) -> E {
        self.pool = None; // joins the workers, which hold the only other references
        match Arc::try_unwrap(self.shared) {
            Ok(shared) => shared.inner,
            Err(_) => unreachable!("read-ahead workers outlived their pool"),
        }
    }

    /// Drops every cached block overlapping `[offset, offset + len)` and keeps reads in
    /// flight from caching what they read there: for changes made below the cache (a scrub
    /// that repairs data, a tool writing to the volume directly).
    pub fn invalidate(&self, offset: u64, len: u64) {
        let size = self.size();
        assert!(offset <= size, "invalidate past the export");
        let len = len.min(size - offset);
        if let (Some(store), true) = (&self.shared.store, len > 0) {
            drop(WriteGuard::begin(store, offset, len));
        }
    }

    /// Drops every cached block (see [`ReadCache::invalidate`]).
    pub fn invalidate_all(&self) {
        self.invalidate(0, self.size());
    }

    /// The configuration in force.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Counters since start (all zero, capacity 0, when the cache is disabled).
    pub fn stats(&self) -> CacheStats {
        match &self.shared.store {
            Some(store) => store.stats(),
            None => CacheStats::default(),
        }
    }

    /// Queues read-ahead of the bytes `range` as jobs cut at multiples of the piece size
    /// (so workers fetch pieces in parallel, aligned like chunks); returns where the queued
    /// part ends (`range.start` if the queue was full at once).
    fn submit(&self, store: &Store, range: Range<u64>) -> u64 {
        let pool = self.pool.as_ref().expect("read-ahead is running");
        let bb = store.block_bytes();
        let piece = self.piece_bytes;
        let mut at = range.start;
        while at < range.end {
            let next = ((at / piece + 1) * piece).min(range.end);
            if !pool.try_submit(at / bb..next.div_ceil(bb)) {
                add(&store.counters.prefetch_dropped, 1);
                break;
            }
            add(&store.counters.prefetch_jobs, 1);
            at = next;
        }
        at
    }

    /// Feeds the stream detectors; says whether read-ahead is serving this read's stream.
    fn read_ahead(&self, store: &Store, offset: u64, len: u64) -> bool {
        match &self.streams {
            Some(streams) => {
                let mut streams = streams.lock().expect("stream table lock poisoned");
                streams.observe(offset, len, |range| self.submit(store, range))
            }
            None => false,
        }
    }

    /// A read that bypasses the cache entirely, in adaptive mode (the default): one at least
    /// a read-ahead window long, which read-ahead cannot help and which caching would only
    /// cost a copy per byte (such reads are scans). With read-ahead `on` every read goes
    /// through the cache; with `off` large reads are cached too (the user asked for a cache
    /// without read-ahead). Reading below is always coherent: cached blocks hold exactly
    /// what is below.
    fn bypasses(&self, len: u64) -> bool {
        self.config.read_ahead == ReadAhead::Adaptive && len >= self.config.window_bytes
    }

    /// Serves `buf` from cached blocks, then reads each run of missing blocks below in one
    /// request. With `whole` (read-ahead serves the stream) the run's whole blocks are read
    /// and cached; otherwise exactly the requested bytes go straight into `buf` and only the
    /// blocks the request fully covers are cached.
    fn read_cached(
        &self,
        store: &Store,
        offset: u64,
        buf: &mut [u8],
        whole: bool,
    ) -> io::Result<()> {
        let bb = store.block_bytes();
        let end = offset + buf.len() as u64;
        let mut misses: Vec<(u64, Snapshot)> = Vec::new();
        for block in offset / bb..end.div_ceil(bb) {
            let (within, dst) = piece(bb, block, offset, end);
            if let Some(snapshot) = store.lookup(block, within, &mut buf[dst]) {
                misses.push((block, snapshot));
            }
        }
        let mut rest = &misses[..];
        while !rest.is_empty() {
            let run = rest
                .iter()
                .enumerate()
                .take_while(|&(i, &(b, _))| b == rest[0].0 + i as u64)
                .count();
            self.read_run(store, offset, buf, &rest[..run], whole)?;
            rest = &rest[run..];
        }
        Ok(())
    }

    /// Reads the consecutive missing blocks `run` below and caches them, copying the requested
    /// part into `buf` (the client's read at `offset`). `whole`: reads every block of the run
    /// (through a scratch buffer where the run sticks out of the client's read) and caches
    /// them all; otherwise reads only the requested part, straight into `buf`, and caches the
    /// blocks it fully covers.
    fn read_run(
        &self,
        store: &Store,
        offset: u64,
        buf: &mut [u8],
        run: &[(u64, Snapshot)],
        whole: bool,
    ) -> io::Result<()> {
        let bb = store.block_bytes();
        let last = run[run.len() - 1].0;
        let (run_start, run_end) = (run[0].0 * bb, last * bb + store.block_len(last) as u64);
        let end = offset + buf.len() as u64;
        let (lo, hi) = match whole {
            true => (run_start, run_end),
            false => (run_start.max(offset), run_end.min(end)),
        };
        assert!(lo < hi, "missing run outside the read");
        // Page-aligned: a direct-I/O member reads into it without a bounce copy.
        let mut scratch: member::AlignedBuf;
        let data: &[u8] = if lo >= offset && hi <= end {
            let dst = &mut buf[(lo - offset) as usize..(hi - offset) as usize];
            self.shared.inner.read(lo, dst)?;
            dst
        } else {
            scratch = member::AlignedBuf::zeroed((hi - lo) as usize, 0);
            let (from, to) = (lo.max(offset), hi.min(end));
            if self.shared.inner.read(lo, &mut scratch).is_err() {
                // Some of the wider range cannot be read (a range recorded as lost, say): the
                // client's part alone may be readable, and is then served, uncached.
                let dst = &mut buf[(from - offset) as usize..(to - offset) as usize];
                return self.shared.inner.read(from, dst);
            }
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&scratch[(from - lo) as usize..(to - lo) as usize]);
            &scratch
        };
        for &(block, snapshot) in run {
            let start = block * bb;
            let block_end = start + store.block_len(block) as u64;
            if start >= lo && block_end <= hi {
                let bytes = &data[(start - lo) as usize..(block_end - lo) as usize];
                store.insert(block, bytes, snapshot, false);
            }
        }
        Ok(())
    }

    /// Runs `op` (a change to `[offset, offset + len)` below) inside the invalidation
    /// protocol: overlapping blocks are dropped before it and no read that overlapped it can
    /// cache what it read. Success or failure, the cache claims nothing about the range.
    fn changing<T>(&self, offset: u64, len: u64, op: impl FnOnce(&E) -> T) -> T {
        let inner = &self.shared.inner;
        match &self.shared.store {
            Some(store) if len > 0 => {
                let _guard = WriteGuard::begin(store, offset, len);
                op(inner)
            }
            _ => op(inner),
        }
    }
}

/// The part of `block` inside the read `[offset, end)`: bytes within the block and the
/// matching range of the client's buffer.
fn piece(bb: u64, block: u64, offset: u64, end: u64) -> (Range<usize>, Range<usize>) {
    let block_start = block * bb;
    let lo = offset.max(block_start);
    let hi = end.min(block_start + bb);
    assert!(lo < hi, "block {block} outside the read");
    let within = (lo - block_start) as usize..(hi - block_start) as usize;
    (within, (lo - offset) as usize..(hi - offset) as usize)
}

/// Pairs `begin_write` with `end_write`, even if the export below panics.
struct WriteGuard<'a> {
    store: &'a Store,
    offset: u64,
    len: u64,
}

impl<'a> WriteGuard<'a> {
    fn begin(store: &'a Store, offset: u64, len: u64) -> Self {
        store.begin_write(offset, len);
        WriteGuard { store, offset, len }
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        self.store.end_write(self.offset, self.len);
    }
}

impl<E: Export> Export for ReadCache<E> {
    fn size(&self) -> u64 {
        self.shared.inner.size()
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let store = match &self.shared.store {
            Some(store) if !buf.is_empty() => store,
            _ => return self.shared.inner.read(offset, buf),
        };
        let len = buf.len() as u64;
        assert!(offset + len <= self.size(), "read past the export");
        if self.bypasses(len) {
            return self.shared.inner.read(offset, buf);
        }
        let streaming = self.read_ahead(store, offset, len);
        self.read_cached(store, offset, buf, streaming)
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        self.changing(offset, data.len() as u64, |e| e.write(offset, data, fua))
    }

    fn flush(&self) -> io::Result<()> {
        self.shared.inner.flush()
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.changing(offset, len, |e| e.trim(offset, len))
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> io::Result<()> {
        self.changing(offset, len, |e| e.write_zeroes(offset, len, may_trim))
    }

    fn block_status(&self, offset: u64, len: u32) -> io::Result<Vec<StatusExtent>> {
        self.shared.inner.block_status(offset, len)
    }

    fn preferred_block_size(&self) -> u32 {
        self.shared.inner.preferred_block_size()
    }

    /// One cache serves every connection and is coherent with all their writes, so what
    /// holds below holds here.
    fn can_multi_conn(&self) -> bool {
        self.shared.inner.can_multi_conn()
    }

    fn can_fast_zero(&self) -> bool {
        self.shared.inner.can_fast_zero()
    }

    /// `NBD_CMD_CACHE`: queues read-ahead of the range (piece by piece, until the queue is
    /// full); without read-ahead workers the hint goes below.
    fn cache(&self, offset: u64, len: u64) -> io::Result<()> {
        let (Some(store), Some(_)) = (&self.shared.store, &self.pool) else {
            return self.shared.inner.cache(offset, len);
        };
        let end = offset.saturating_add(len).min(self.size());
        if offset < end {
            self.submit(store, offset..end);
        }
        Ok(())
    }
}
