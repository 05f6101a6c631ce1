//! [`Gate`]: a blocking counting semaphore for the request threads (export calls at once,
//! buffer bytes held at once).
//!
//! The uncontended path is one atomic compare-and-swap to take units and one atomic
//! subtraction to give them back, with no lock and no system call: every request passes two
//! gates, and on a 2-core machine a futex per request costs more than the request. When units
//! run out, waiters queue in arrival order (tickets), and while anyone waits, newcomers queue
//! too, so a large request is never starved by a stream of small ones.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// A counting semaphore of `limit` units for blocking threads.
pub(crate) struct Gate {
    limit: u64,
    /// Units taken now; never above `limit`.
    used: AtomicU64,
    /// Threads in the slow path (queued or about to queue).
    waiters: AtomicU64,
    queue: Mutex<Tickets>,
    wake: Condvar,
}

#[derive(Default)]
struct Tickets {
    next: u64,
    serving: u64,
}

impl Gate {
    pub fn new(limit: u64) -> Gate {
        assert!(limit > 0, "a gate needs at least one unit");
        Gate {
            limit,
            used: AtomicU64::new(0),
            waiters: AtomicU64::new(0),
            queue: Mutex::new(Tickets::default()),
            wake: Condvar::new(),
        }
    }

    /// Takes `units` (at most the limit), waiting while they are not available.
    pub fn acquire(&self, units: u64) -> Permit<'_> {
        assert!(
            units > 0 && units <= self.limit,
            "gate asked for {units} of {} units",
            self.limit
        );
        if self.waiters.load(Ordering::SeqCst) > 0 || !self.try_take(units) {
            self.acquire_slow(units);
        }
        Permit { gate: self, units }
    }

    fn try_take(&self, units: u64) -> bool {
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            if used + units > self.limit {
                return false;
            }
            match self.used.compare_exchange_weak(
                used,
                used + units,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
    }

    /// Queues behind earlier waiters; takes the units when first in line and they fit.
    fn acquire_slow(&self, units: u64) {
        let mut queue = self.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let ticket = queue.next;
        queue.next += 1;
        // `waiters` is raised before `used` is read again (both SeqCst): a release that
        // lowered `used` after our last look sees `waiters > 0` and wakes us.
        while queue.serving != ticket || !self.try_take(units) {
            queue = self.wake.wait(queue).unwrap_or_else(|p| p.into_inner());
        }
        queue.serving += 1;
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(queue);
        // The next in line may fit too.
        self.wake.notify_all();
    }

    fn release(&self, units: u64) {
        let before = self.used.fetch_sub(units, Ordering::SeqCst);
        assert!(before >= units, "gate released more units than taken");
        if self.waiters.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders this wake after a waiter's check-then-wait.
            drop(self.lock());
            self.wake.notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tickets> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Units taken now (for tests).
    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }
}

/// Units taken from a [`Gate`]; given back on drop.
pub(crate) struct Permit<'a> {
    gate: &'a Gate,
    units: u64,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.gate.release(self.units);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn units_are_bounded_and_given_back() {
        let gate = Gate::new(10);
        let a = gate.acquire(4);
        let b = gate.acquire(6);
        assert_eq!(gate.used(), 10);
        drop(a);
        assert_eq!(gate.used(), 6);
        drop(b);
        assert_eq!(gate.used(), 0);
    }

    #[test]
    fn many_threads_never_exceed_the_limit_and_all_finish() {
        let gate = Arc::new(Gate::new(8));
        let peak = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (gate, peak) = (gate.clone(), peak.clone());
                std::thread::spawn(move || {
                    for i in 0..2000u64 {
                        let units = 1 + (t * 7 + i) % 8;
                        let _p = gate.acquire(units);
                        let used = gate.used();
                        assert!(used <= 8 && used >= units, "used {used} with {units} held");
                        peak.fetch_max(used, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("gate thread");
        }
        assert_eq!(gate.used(), 0);
        assert!(peak.load(Ordering::Relaxed) <= 8);
    }

    #[test]
    fn a_large_request_is_served_before_later_small_ones() {
        let gate = Arc::new(Gate::new(4));
        let held = gate.acquire(3);
        let big = {
            let gate = gate.clone();
            std::thread::spawn(move || drop(gate.acquire(4)))
        };
        while gate.waiters.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // One unit is free, but the big request waits first: a small one must queue behind it.
        let small = {
            let gate = gate.clone();
            std::thread::spawn(move || drop(gate.acquire(1)))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !small.is_finished(),
            "a newcomer overtook a waiting request"
        );
        drop(held);
        big.join().expect("big");
        small.join().expect("small");
        assert_eq!(gate.used(), 0);
    }
}
