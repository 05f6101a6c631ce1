//! [`Gate`]: a blocking counting semaphore for the request threads (export calls at once,
//! buffer bytes held at once).
//!
//! The uncontended path is one atomic compare-and-swap to take units and one atomic
//! subtraction to give them back, with no lock and no system call: every request passes two
//! gates, and on a 2-core machine a futex per request costs more than the request. When units
//! run out, waiters queue in arrival order (tickets), and while anyone waits, newcomers queue
//! too, so a large request is never starved by a stream of small ones.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// A counting semaphore of `limit` units for blocking threads.
pub(crate) struct Gate {
    limit: u64,
    /// Units taken now; never above `limit`.
    used: AtomicU64,
    /// Threads in the slow path (queued or about to queue).
    waiters: AtomicU64,
    queue: Mutex<Queue>,
    /// Times a waiting thread woke (tests: one per waiter, not one per waiter per release).
    #[cfg(test)]
    wakeups: AtomicU64,
}

/// The waiting threads, in arrival order. Only the first may take units; it is woken alone
/// (`Thread::unpark`) when units come back or when the one before it got its own. A
/// `notify_all` over a condition variable woke every waiter at each release instead: with 4
/// connections of 32 requests over the 32 export-call slots, ~96 threads woke per finished
/// request and all but one slept again (407,000 context switches in 7 s, 181 µs of server CPU
/// per 4 KiB write, docs/PERFORMANCE.md "Several connections").
#[derive(Default)]
struct Queue {
    next: u64,
    waiting: std::collections::VecDeque<(u64, std::thread::Thread)>,
}

impl Gate {
    pub fn new(limit: u64) -> Gate {
        assert!(limit > 0, "a gate needs at least one unit");
        Gate {
            limit,
            used: AtomicU64::new(0),
            waiters: AtomicU64::new(0),
            queue: Mutex::new(Queue::default()),
            #[cfg(test)]
            wakeups: AtomicU64::new(0),
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
        queue.waiting.push_back((ticket, std::thread::current()));
        // First in line and units free: go. Otherwise sleep until woken (a release wakes the
        // first in line; the first, once served, wakes the next). An unpark that comes before
        // the park makes it return at once, so no wake-up is lost; a stray one only loops.
        while queue.waiting.front().map(|w| w.0) != Some(ticket) || !self.try_take(units) {
            drop(queue);
            std::thread::park();
            #[cfg(test)]
            self.wakeups.fetch_add(1, Ordering::SeqCst);
            queue = self.lock();
        }
        queue.waiting.pop_front();
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        if let Some((_, next)) = queue.waiting.front() {
            // Units may be left for the next one too.
            next.unpark();
        }
    }

    fn release(&self, units: u64) {
        let before = self.used.fetch_sub(units, Ordering::SeqCst);
        assert!(before >= units, "gate released more units than taken");
        if self.waiters.load(Ordering::SeqCst) > 0 {
            if let Some((_, first)) = self.lock().waiting.front() {
                first.unpark();
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
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

    /// Each release wakes the first waiter only: 32 threads queued on a gate of one unit,
    /// served one after the other, wake about once each (a stray wake-up may add a few), not
    /// once per release each (with `notify_all`, 32 + 31 + ... = 528).
    #[test]
    fn a_release_wakes_the_first_waiter_not_all() {
        let gate = Arc::new(Gate::new(1));
        let held = gate.acquire(1);
        let threads: Vec<_> = (0..32)
            .map(|_| {
                let gate = gate.clone();
                std::thread::spawn(move || {
                    let p = gate.acquire(1);
                    std::thread::sleep(Duration::from_millis(1));
                    drop(p);
                })
            })
            .collect();
        while gate.waiters.load(Ordering::SeqCst) < 32 {
            std::thread::sleep(Duration::from_millis(1));
        }
        gate.wakeups.store(0, Ordering::SeqCst);
        drop(held);
        for t in threads {
            t.join().expect("waiter");
        }
        let woke = gate.wakeups.load(Ordering::SeqCst);
        assert!(woke <= 64, "32 waiters woke {woke} times");
        assert_eq!(gate.used(), 0);
    }
}
