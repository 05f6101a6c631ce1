//! Stripe locks: a fixed table of mutexes indexed by stripe (or mirror chunk) number modulo
//! the table size. Bounded memory whatever the array size; distinct keys mostly map to
//! distinct locks, so requests on different stripes proceed in parallel.
//!
//! Deadlock freedom: a request takes all its locks at once, in ascending table-index order,
//! and holds no other lock meanwhile.

use std::sync::{Mutex, MutexGuard};

/// Entries in the lock table.
pub const STRIPE_LOCKS_COUNT: usize = 1024;

pub(crate) struct StripeLocks {
    table: Box<[Mutex<()>]>,
}

/// Locks held by one request; released on drop.
pub(crate) struct Held<'a> {
    _guards: Vec<MutexGuard<'a, ()>>,
}

impl StripeLocks {
    pub(crate) fn new() -> StripeLocks {
        StripeLocks {
            table: (0..STRIPE_LOCKS_COUNT).map(|_| Mutex::new(())).collect(),
        }
    }

    /// Locks every key in `keys` (stripe or chunk numbers, any order, duplicates allowed).
    pub(crate) fn lock(&self, keys: impl Iterator<Item = u64>) -> Held<'_> {
        let indexes = StripeLocks::indexes(keys);
        assert!(indexes.len() <= STRIPE_LOCKS_COUNT);
        let guards = indexes
            .into_iter()
            // A panic elsewhere while holding a lock leaves no torn state behind the lock
            // itself (the data is on members), so a poisoned lock is still usable.
            .map(|i| self.table[i].lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        Held { _guards: guards }
    }
}

impl StripeLocks {
    /// Table indexes of `keys`, ascending, without duplicates: the order they are taken in.
    pub(crate) fn indexes(keys: impl Iterator<Item = u64>) -> Vec<usize> {
        let mut indexes: Vec<usize> = keys
            .map(|k| (k % STRIPE_LOCKS_COUNT as u64) as usize)
            .collect();
        indexes.sort_unstable();
        indexes.dedup();
        indexes
    }

    /// Locks every index of `indexes` (from [`StripeLocks::indexes`]) without waiting; `None`
    /// (nothing held) when any of them is taken — also by the calling thread itself.
    pub(crate) fn try_lock_indexes(&self, indexes: &[usize]) -> Option<Held<'_>> {
        let mut guards = Vec::with_capacity(indexes.len());
        for &i in indexes {
            match self.table[i].try_lock() {
                Ok(g) => guards.push(g),
                Err(std::sync::TryLockError::Poisoned(e)) => guards.push(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => return None,
            }
        }
        Some(Held { _guards: guards })
    }

    /// Locks the whole table: no request is between planning and issuing its member I/O while
    /// it is held (member swaps and health moves that writes must not straddle).
    pub(crate) fn lock_all(&self) -> Held<'_> {
        self.lock_range(0, STRIPE_LOCKS_COUNT as u64)
    }

    /// Locks keys `first..end`; a range longer than the table locks the whole table.
    pub(crate) fn lock_range(&self, first: u64, end: u64) -> Held<'_> {
        assert!(first <= end);
        let end = end.min(first + STRIPE_LOCKS_COUNT as u64);
        self.lock(first..end)
    }
}
