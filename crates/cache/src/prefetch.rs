//! Read-ahead workers: a fixed pool of threads fed by a bounded queue. Submitting never
//! blocks: when the queue is full the job is dropped (read-ahead is only a hint), unlike
//! nbdkit's readahead filter whose queue grows without limit.
//!
//! A worker claims the job's blocks that are neither cached nor being fetched (marking them
//! *loading*, so client reads of them wait instead of reading twice), reads each run of
//! claimed blocks from the export in one request, inserts them under the same generation
//! rule as client reads, then releases the claims.

use member::AlignedBuf;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use nbd::Export;

use crate::shard::Snapshot;
use crate::stats::add;
use crate::store::Store;

/// What the workers share with the filter.
#[derive(Debug)]
pub(crate) struct Shared<E> {
    pub inner: E,
    /// `None` when the cache is disabled (pass-through).
    pub store: Option<Store>,
}

/// Blocks to fetch.
pub(crate) type Job = Range<u64>;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Pool {
    sender: Option<SyncSender<Job>>,
    /// Set when the pool is dropped: workers skip the jobs still queued.
    stopping: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    job_blocks_max: u64,
}

impl Pool {
    /// Starts `workers` threads; jobs cover at most `job_blocks_max` blocks.
    pub fn start<E: Export>(
        shared: &Arc<Shared<E>>,
        workers: usize,
        queue: usize,
        job_blocks_max: u64,
    ) -> io::Result<Pool> {
        assert!(workers >= 1 && queue >= 1 && job_blocks_max >= 1);
        let (sender, receiver) = mpsc::sync_channel(queue);
        let receiver = Arc::new(Mutex::new(receiver));
        let stopping = Arc::new(AtomicBool::new(false));
        let mut pool = Pool {
            sender: Some(sender),
            stopping: Arc::clone(&stopping),
            workers: Vec::with_capacity(workers),
            job_blocks_max,
        };
        for index in 0..workers {
            let shared = Arc::clone(shared);
            let receiver = Arc::clone(&receiver);
            let stopping = Arc::clone(&stopping);
            let handle = std::thread::Builder::new()
                .name(format!("readahead-{index}"))
                .spawn(move || work(&shared, &receiver, &stopping))?;
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// Queues `job` unless the queue is full; says whether it was queued.
    pub fn try_submit(&self, job: Job) -> bool {
        assert!(!job.is_empty() && job.end - job.start <= self.job_blocks_max);
        let sender = self.sender.as_ref().expect("pool is running");
        match sender.try_send(job) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => false,
            Err(TrySendError::Disconnected(_)) => panic!("read-ahead workers exited early"),
        }
    }
}

impl Drop for Pool {
    /// Closes the queue, drops the jobs still queued (a stalled member must not hold up
    /// shutdown once per queued job) and waits for the workers to finish their current job.
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.sender = None;
        for worker in self.workers.drain(..) {
            // A worker that panicked has already reported it; nothing is left to clean up.
            let _ = worker.join();
        }
    }
}

fn work<E: Export>(shared: &Shared<E>, receiver: &Mutex<Receiver<Job>>, stopping: &AtomicBool) {
    let mut buffer = AlignedBuf::default();
    loop {
        let job = {
            let receiver = receiver.lock().expect("read-ahead queue lock poisoned");
            receiver.recv()
        };
        match job {
            Ok(_) if stopping.load(Ordering::SeqCst) => {}
            Ok(job) => fetch(shared, job, &mut buffer),
            Err(mpsc::RecvError) => return,
        }
    }
}

/// Releases loading claims when dropped, so waiting readers wake even if a read panics.
struct Claims<'a> {
    store: &'a Store,
    blocks: Vec<(u64, Snapshot)>,
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        for &(block, _) in &self.blocks {
            self.store.clear_loading(block);
        }
    }
}

fn fetch<E: Export>(shared: &Shared<E>, job: Job, buffer: &mut AlignedBuf) {
    let store = shared
        .store
        .as_ref()
        .expect("read-ahead runs only with a cache");
    let mut block = job.start;
    while block < job.end {
        let claims = claim_run(store, block..job.end);
        if claims.blocks.is_empty() {
            block += 1;
            continue;
        }
        block += claims.blocks.len() as u64;
        fetch_run(shared, store, &claims, buffer);
    }
}

/// Claims the blocks at the start of `blocks` up to the first that is cached or loading.
fn claim_run(store: &Store, blocks: Range<u64>) -> Claims<'_> {
    let mut claims = Claims {
        store,
        blocks: Vec::new(),
    };
    for block in blocks {
        match store.try_mark_loading(block) {
            Some(snapshot) => claims.blocks.push((block, snapshot)),
            None => break,
        }
    }
    claims
}

/// `buffer` is the worker's, kept between runs and grown when a run needs more; page-aligned,
/// so a direct-I/O member reads into it without a bounce copy.
fn fetch_run<E: Export>(
    shared: &Shared<E>,
    store: &Store,
    claims: &Claims,
    buffer: &mut AlignedBuf,
) {
    let first = claims.blocks[0].0;
    let offset = first * store.block_bytes();
    let len: usize = claims.blocks.iter().map(|&(b, _)| store.block_len(b)).sum();
    if buffer.len() < len {
        *buffer = AlignedBuf::zeroed(len, 0);
    }
    if shared.inner.read(offset, &mut buffer[..len]).is_err() {
        add(&store.counters.prefetch_errors, 1);
        return;
    }
    add(&store.counters.prefetched_bytes, len as u64);
    let mut at = 0;
    for &(block, snapshot) in &claims.blocks {
        let block_len = store.block_len(block);
        store.insert(block, &buffer[at..at + block_len], snapshot, true);
        at += block_len;
    }
    assert_eq!(at, len);
}
