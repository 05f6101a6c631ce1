//! One shard of the block store: resident blocks under 2Q replacement, write generations, and
//! the blocks read-ahead is fetching. No I/O: every method runs under the shard's mutex (see
//! the locking contract in `store.rs`).
//!
//! Blocks of a shard are named by their *local index* `k`: global block `k * shards + shard`.
//!
//! **2Q** (Johnson & Shasha, 1994): a block read once enters `A1in`, a FIFO of about a quarter
//! of the shard; hits there do not promote it. When it leaves `A1in` its number is remembered
//! in the ghost FIFO `A1out` (half the shard, numbers only). A block missed again while its
//! ghost is remembered enters `Am`, an LRU of the rest. A sequential scan or a read-ahead
//! stream therefore only cycles through `A1in` and cannot flush the re-used blocks in `Am`.
//!
//! **Generations** (atomics in [`Gens`], shared with the store so writes need no lock when
//! nothing they overlap is cached): every block hashes to one of `GEN_BUCKETS` buckets
//! `{seq, writers}`. A write bumps `seq` and `writers` before it reaches the export below
//! (and drops the block), and bumps `seq` and releases `writers` after. A reader takes a [`Snapshot`] before reading
//! below and may insert only if the bucket is unchanged and no write was in flight at the
//! snapshot — so data read before or during a write is never inserted after it. Collisions
//! only make the check more conservative.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use crate::gens::Gens;
pub(crate) use crate::gens::Snapshot;
use crate::list::{LinkStore, Links, List};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    In,
    Main,
    Free,
}

#[derive(Debug)]
struct Slot {
    local: u64,
    data: Box<[u8]>,
    queue: Queue,
    prefetched: bool,
    links: Links,
}

impl LinkStore for Vec<Slot> {
    fn links(&mut self, index: u32) -> &mut Links {
        &mut self[index as usize].links
    }
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Copied out; `prefetched` if read-ahead brought it and no client had read it yet.
    Hit { prefetched: bool },
    /// Read-ahead is reading it now: wait and look again.
    Loading,
    /// Not here: read it below, then insert with this snapshot.
    Miss(Snapshot),
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    Inserted {
        evicted: bool,
        allocated: bool,
    },
    /// A write overlapped the block since the snapshot: not inserted.
    Stale,
    /// Already cached (by a concurrent reader, with the same data).
    Present,
}

/// The ghost FIFO `A1out`: block numbers only, at most `max` remembered.
#[derive(Debug)]
struct Ghosts {
    max: usize,
    order: VecDeque<(u64, u64)>,
    live: HashMap<u64, u64>,
    next_seq: u64,
}

impl Ghosts {
    fn new(max: usize) -> Self {
        assert!(max >= 1);
        Ghosts {
            max,
            order: VecDeque::new(),
            live: HashMap::new(),
            next_seq: 0,
        }
    }

    fn push(&mut self, local: u64) {
        self.next_seq += 1;
        self.live.insert(local, self.next_seq);
        self.order.push_back((local, self.next_seq));
        while self.live.len() > self.max || self.order.len() > 2 * self.max {
            let Some((old, seq)) = self.order.pop_front() else {
                break;
            };
            if self.live.get(&old) == Some(&seq) {
                self.live.remove(&old);
            }
        }
        assert!(self.live.len() <= self.max && self.order.len() <= 2 * self.max);
    }

    /// Forgets `local` and says whether it was remembered.
    fn take(&mut self, local: u64) -> bool {
        self.live.remove(&local).is_some()
    }
}

/// One shard. See the module documentation.
#[derive(Debug)]
pub(crate) struct Shard {
    block_bytes: usize,
    capacity: usize,
    in_max: usize,
    slots: Vec<Slot>,
    map: HashMap<u64, u32>,
    a1in: List,
    am: List,
    free: List,
    ghosts: Ghosts,
    gens: Arc<Gens>,
    loading: HashSet<u64>,
}

impl Shard {
    /// A shard holding at most `capacity` blocks of `block_bytes`, with its generations.
    pub fn new(block_bytes: usize, capacity: usize, gens: Arc<Gens>) -> Self {
        assert!(capacity >= 1 && block_bytes >= 1);
        assert!(capacity < u32::MAX as usize);
        Shard {
            block_bytes,
            capacity,
            in_max: (capacity / 4).max(1),
            slots: Vec::new(),
            map: HashMap::with_capacity(capacity),
            a1in: List::new(),
            am: List::new(),
            free: List::new(),
            ghosts: Ghosts::new((capacity / 2).max(1)),
            gens,
            loading: HashSet::new(),
        }
    }

    /// Blocks holding data.
    #[cfg(test)]
    pub fn resident(&self) -> usize {
        self.map.len()
    }

    /// Block buffers allocated (resident or free for reuse); never above the capacity.
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.slots.len()
    }

    pub fn snapshot(&self, local: u64) -> Snapshot {
        self.gens.snapshot(local)
    }

    /// Copies `within` of block `local` into `dst` if it is cached.
    pub fn lookup(&mut self, local: u64, within: Range<usize>, dst: &mut [u8]) -> Lookup {
        let Some(&index) = self.map.get(&local) else {
            if self.loading.contains(&local) {
                return Lookup::Loading;
            }
            return Lookup::Miss(self.snapshot(local));
        };
        let slot = &mut self.slots[index as usize];
        assert!(slot.local == local && slot.queue != Queue::Free);
        dst.copy_from_slice(&slot.data[within]);
        let prefetched = std::mem::replace(&mut slot.prefetched, false);
        if slot.queue == Queue::Main {
            self.am.remove(&mut self.slots, index);
            self.am.push_front(&mut self.slots, index);
        }
        Lookup::Hit { prefetched }
    }

    /// Caches `data` (the block's first `data.len()` bytes: the whole block, or the export's
    /// tail) if no write overlapped it since `snapshot`.
    pub fn insert(
        &mut self,
        local: u64,
        data: &[u8],
        snapshot: Snapshot,
        prefetched: bool,
    ) -> Insert {
        assert!(!data.is_empty() && data.len() <= self.block_bytes);
        if self.map.contains_key(&local) {
            return Insert::Present;
        }
        if !self.gens.try_admit(local, snapshot) {
            return Insert::Stale;
        }
        let (index, evicted, allocated) = self.take_slot();
        let slot = &mut self.slots[index as usize];
        slot.data[..data.len()].copy_from_slice(data);
        slot.local = local;
        slot.prefetched = prefetched;
        if self.ghosts.take(local) {
            slot.queue = Queue::Main;
            self.am.push_front(&mut self.slots, index);
        } else {
            slot.queue = Queue::In;
            self.a1in.push_front(&mut self.slots, index);
        }
        self.map.insert(local, index);
        self.check();
        Insert::Inserted { evicted, allocated }
    }

    /// A slot for a new block: a free one, a new allocation below capacity, or a victim.
    fn take_slot(&mut self) -> (u32, bool, bool) {
        if let Some(index) = self.free.back() {
            self.free.remove(&mut self.slots, index);
            return (index, false, false);
        }
        if self.slots.len() < self.capacity {
            self.slots.push(Slot {
                local: 0,
                data: vec![0; self.block_bytes].into_boxed_slice(),
                queue: Queue::Free,
                prefetched: false,
                links: Links::UNLINKED,
            });
            return ((self.slots.len() - 1) as u32, false, true);
        }
        (self.evict(), true, false)
    }

    /// Unlinks the 2Q victim and returns its slot (off every list).
    fn evict(&mut self) -> u32 {
        let from_in = self.a1in.len() > self.in_max || self.am.is_empty();
        let list = if from_in {
            &mut self.a1in
        } else {
            &mut self.am
        };
        let index = list
            .back()
            .expect("a full shard with no free slot has a resident block");
        list.remove(&mut self.slots, index);
        let slot = &mut self.slots[index as usize];
        let local = slot.local;
        slot.queue = Queue::Free;
        slot.prefetched = false;
        if from_in {
            self.ghosts.push(local);
        }
        self.gens.evicted(local);
        let removed = self.map.remove(&local);
        assert_eq!(removed, Some(index));
        index
    }

    /// Drops block `local` if cached; true if it was.
    fn invalidate(&mut self, local: u64) -> bool {
        let Some(index) = self.map.remove(&local) else {
            return false;
        };
        self.gens.evicted(local);
        let slot = &mut self.slots[index as usize];
        let queue = std::mem::replace(&mut slot.queue, Queue::Free);
        slot.prefetched = false;
        match queue {
            Queue::In => self.a1in.remove(&mut self.slots, index),
            Queue::Main => self.am.remove(&mut self.slots, index),
            Queue::Free => unreachable!("mapped slot {index} on the free list"),
        }
        self.free.push_front(&mut self.slots, index);
        true
    }

    /// A write to local blocks `range` has bumped their generations ([`Gens::begin_write`])
    /// and found some may be cached: drop those that are. Returns how many were dropped.
    pub fn drop_range(&mut self, range: Range<u64>) -> u64 {
        let doomed: Vec<u64> = if range.end - range.start > self.map.len() as u64 {
            self.map
                .keys()
                .copied()
                .filter(|k| range.contains(k))
                .collect()
        } else {
            range.filter(|k| self.map.contains_key(k)).collect()
        };
        for &local in &doomed {
            assert!(self.invalidate(local));
        }
        self.check();
        doomed.len() as u64
    }

    /// Tests: a whole write's start (generations, then drop).
    #[cfg(test)]
    pub fn begin_write(&mut self, range: Range<u64>) -> u64 {
        self.gens.begin_write(range.clone());
        self.drop_range(range)
    }

    #[cfg(test)]
    pub fn end_write(&mut self, range: Range<u64>) {
        self.gens.end_write(range);
    }

    /// Claims `local` for read-ahead unless it is cached or already being fetched.
    pub fn try_mark_loading(&mut self, local: u64) -> Option<Snapshot> {
        if self.map.contains_key(&local) || !self.loading.insert(local) {
            return None;
        }
        Some(self.snapshot(local))
    }

    pub fn clear_loading(&mut self, local: u64) {
        assert!(self.loading.remove(&local), "block {local} was not loading");
    }

    fn check(&self) {
        assert_eq!(self.a1in.len() + self.am.len(), self.map.len());
        assert_eq!(self.map.len() + self.free.len(), self.slots.len());
        assert!(
            self.slots.len() <= self.capacity,
            "shard above its capacity"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(shard: &mut Shard, local: u64, byte: u8) -> Insert {
        let snap = shard.snapshot(local);
        shard.insert(local, &[byte; 4], snap, false)
    }

    fn hit(shard: &mut Shard, local: u64) -> bool {
        let mut buf = [0u8; 4];
        matches!(shard.lookup(local, 0..4, &mut buf), Lookup::Hit { .. })
    }

    #[test]
    fn scan_does_not_evict_hot_blocks() {
        let mut shard = Shard::new(4, 8, Arc::new(Gens::new()));
        // Block 1 becomes hot: read, evicted from A1in, read again (ghost hit) -> Am.
        fill(&mut shard, 1, 1);
        for k in 100..110 {
            fill(&mut shard, k, 0);
        }
        assert!(!hit(&mut shard, 1));
        assert!(matches!(fill(&mut shard, 1, 1), Insert::Inserted { .. }));
        // A long scan passes through A1in only.
        for k in 1000..1100 {
            fill(&mut shard, k, 0);
            assert!(shard.allocated() <= 8);
        }
        assert!(hit(&mut shard, 1), "hot block survived the scan");
    }

    #[test]
    fn write_in_flight_blocks_insert_and_invalidates() {
        let mut shard = Shard::new(4, 4, Arc::new(Gens::new()));
        let before = shard.snapshot(7);
        assert_eq!(shard.begin_write(7..8), 0);
        assert_eq!(shard.insert(7, &[1; 4], before, false), Insert::Stale);
        let during = shard.snapshot(7);
        assert_eq!(during, Snapshot(None));
        shard.end_write(7..8);
        assert_eq!(shard.insert(7, &[1; 4], during, false), Insert::Stale);
        assert!(matches!(fill(&mut shard, 7, 2), Insert::Inserted { .. }));
        assert_eq!(
            shard.begin_write(0..100_000),
            1,
            "bulk write drops the block"
        );
        shard.end_write(0..100_000);
        assert!(!hit(&mut shard, 7));
        assert!(matches!(fill(&mut shard, 7, 3), Insert::Inserted { .. }));
    }

    #[test]
    fn loading_is_exclusive() {
        let mut shard = Shard::new(4, 4, Arc::new(Gens::new()));
        let snap = shard.try_mark_loading(3).expect("free to load");
        assert_eq!(shard.try_mark_loading(3), None);
        let mut buf = [0u8; 4];
        assert_eq!(shard.lookup(3, 0..4, &mut buf), Lookup::Loading);
        assert!(matches!(
            shard.insert(3, &[9; 4], snap, true),
            Insert::Inserted { .. }
        ));
        shard.clear_loading(3);
        assert_eq!(
            shard.lookup(3, 0..4, &mut buf),
            Lookup::Hit { prefetched: true }
        );
        assert_eq!(
            shard.lookup(3, 0..4, &mut buf),
            Lookup::Hit { prefetched: false }
        );
        assert_eq!(buf, [9; 4]);
        assert_eq!(
            shard.try_mark_loading(3),
            None,
            "cached blocks are not fetched"
        );
    }
}
