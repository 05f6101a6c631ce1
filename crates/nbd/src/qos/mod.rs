//! Quality of service between exports: a latency target per export, and the throttle that
//! holds back the exports without one (or with a looser one) while a target is missed.
//!
//! A [`QosGroup`] is the set of exports that compete (the daemon's arrays, over all its
//! listeners); each export [`QosGroup::join`]s it as a [`QosClass`], which its
//! [`ServerConfig::qos`](crate::ServerConfig::qos) carries to the request threads. Every request
//! of a class is admitted after its header is read and before its payload is (so a held-back
//! write's bytes stay in the socket and its client waits), and finishes after its reply is
//! sent: a class with a target has the time between recorded, and the group's
//! [`controller::Controller`] (pure; the model is in its documentation) decides each window,
//! on the thread of whichever request finishes after the window's end (no thread of its own:
//! with no requests there is nothing to throttle). A throttled class admits at most its level's
//! requests at once — the others wait, each its connection's reader, so nothing more is read
//! from those clients — and at the harder levels the request thread pauses after the reply,
//! holding its slot, for a multiple of the time the request took.
//!
//! A class may also be capped (io.max: `bucket::Caps`, bytes and requests per second): a
//! request over its cap waits, at the same point, until its bucket holds it — whatever the
//! other classes do.
//!
//! Bounds: waiting requests are request threads (bounded per connection); the pause is at most
//! `controller::MAX_PAUSE`; the controller holds a few counters per class.

pub mod bucket;
pub mod controller;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bucket::Caps;
use controller::{Controller, Judged, LEVELS};

/// The exports that compete for the machine; see the module documentation.
pub struct QosGroup {
    epoch: Instant,
    controller: Mutex<Controller>,
    /// The classes, by id, to publish new levels to.
    members: Mutex<Vec<Arc<ClassShared>>>,
    /// When the controller's window ends, in ns since `epoch` (read without the lock).
    decide_at: AtomicU64,
    next_id: AtomicU64,
}

impl fmt::Debug for QosGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QosGroup").finish_non_exhaustive()
    }
}

/// What the request threads of one class share.
struct ClassShared {
    id: u64,
    /// The level the controller set (an index into `LEVELS`).
    level: AtomicUsize,
    /// The latency target in ns; 0: none.
    target_ns: AtomicU64,
    in_flight: AtomicU32,
    waiters: AtomicU32,
    lock: Mutex<()>,
    wake: Condvar,
    throttled_requests: AtomicU64,
    throttled_ns: AtomicU64,
    /// io.max's caps (none: `Caps::default()`), and what they made wait.
    caps: Mutex<Caps>,
    /// Whether `caps` holds any cap: read without the lock by every request, so a class
    /// without caps (the default) never takes `caps`'s mutex on its way in. Written under
    /// that mutex by `set_caps`.
    capped: AtomicBool,
    capped_requests: AtomicU64,
    capped_ns: AtomicU64,
}

/// One export's membership of a [`QosGroup`]; leaves the group when dropped.
pub struct QosClass {
    group: Arc<QosGroup>,
    shared: Arc<ClassShared>,
}

impl fmt::Debug for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QosClass")
            .field("id", &self.shared.id)
            .finish_non_exhaustive()
    }
}

/// What `status` and the metrics show of a class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosSnapshot {
    pub latency_target: Option<Duration>,
    /// 0: not throttled; up to `controller::MAX_LEVEL`.
    pub level: usize,
    /// Requests admitted at once at this level (`None`: no limit of the throttle's).
    pub max_in_flight: Option<u32>,
    /// The pause after each request, as a multiple of the time it took.
    pub pause_factor: u32,
    /// Requests that waited for admission or paused after their reply, and the time they
    /// spent so.
    pub throttled_requests: u64,
    pub throttled: Duration,
    /// Times the class was throttled one level further.
    pub scale_downs: u64,
    /// With a target: windows in which it was missed, and the last judgement.
    pub windows_missed: u64,
    pub last_window: Option<Judged>,
    /// io.max's caps, and the requests that waited for them and that time.
    pub max_bytes_per_sec: Option<u64>,
    pub max_iops: Option<u64>,
    pub capped_requests: u64,
    pub capped: Duration,
}

impl QosGroup {
    pub fn new() -> Arc<QosGroup> {
        Arc::new(QosGroup {
            epoch: Instant::now(),
            controller: Mutex::new(Controller::new(Duration::ZERO)),
            members: Mutex::new(Vec::new()),
            decide_at: AtomicU64::new(controller::WINDOW.as_nanos() as u64),
            next_id: AtomicU64::new(1),
        })
    }

    /// A new class in the group, with `target` (or none).
    pub fn join(self: &Arc<Self>, target: Option<Duration>) -> Arc<QosClass> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(ClassShared {
            id,
            level: AtomicUsize::new(0),
            target_ns: AtomicU64::new(target_ns(target)),
            in_flight: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            throttled_requests: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            caps: Mutex::new(Caps::default()),
            capped: AtomicBool::new(false),
            capped_requests: AtomicU64::new(0),
            capped_ns: AtomicU64::new(0),
        });
        self.lock_controller().add(id, target);
        lock(&self.members).push(Arc::clone(&shared));
        Arc::new(QosClass {
            group: Arc::clone(self),
            shared,
        })
    }

    fn lock_controller(&self) -> MutexGuard<'_, Controller> {
        lock(&self.controller)
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Runs the controller if its window is over, and publishes the levels it changed.
    fn maybe_decide(&self, now: Duration) {
        if (now.as_nanos() as u64) < self.decide_at.load(Ordering::Relaxed) {
            return;
        }
        let mut controller = self.lock_controller();
        let changed = controller.tick(now);
        self.decide_at
            .store(controller.window_end().as_nanos() as u64, Ordering::Relaxed);
        if !changed {
            return;
        }
        for class in lock(&self.members).iter() {
            let level = controller.level(class.id);
            if class.level.swap(level, Ordering::SeqCst) > level {
                // Looser now: waiters may fit.
                let _guard = lock(&class.lock);
                class.wake.notify_all();
            }
        }
    }
}

impl QosClass {
    /// A new latency target (or none), from now on.
    pub fn set_target(&self, target: Option<Duration>) {
        let mut controller = self.group.lock_controller();
        controller.set_target(self.shared.id, target);
        self.shared
            .target_ns
            .store(target_ns(target), Ordering::Relaxed);
    }

    /// New caps (io.max: bytes and requests per second; `None`: no cap), from now on; the
    /// buckets start full.
    pub fn set_caps(&self, bytes_per_sec: Option<u64>, iops: Option<u64>) {
        let caps = Caps::new(bytes_per_sec, iops);
        let mut current = lock(&self.shared.caps);
        if current.bytes_per_sec() != caps.bytes_per_sec() || current.iops() != caps.iops() {
            self.shared
                .capped
                .store(!caps.is_empty(), Ordering::Release);
            *current = caps;
        }
    }

    pub fn snapshot(&self) -> QosSnapshot {
        let (max_bytes_per_sec, max_iops) = {
            let caps = lock(&self.shared.caps);
            (caps.bytes_per_sec(), caps.iops())
        };
        let controller = self.group.lock_controller();
        let state = controller
            .class(self.shared.id)
            .cloned()
            .unwrap_or_default();
        let limits = LEVELS[state.level];
        QosSnapshot {
            latency_target: state.target,
            level: state.level,
            max_in_flight: limits.max_in_flight,
            pause_factor: limits.pause_factor,
            throttled_requests: self.shared.throttled_requests.load(Ordering::Relaxed),
            throttled: Duration::from_nanos(self.shared.throttled_ns.load(Ordering::Relaxed)),
            scale_downs: state.scale_downs,
            windows_missed: state.windows_missed,
            last_window: state.last,
            max_bytes_per_sec,
            max_iops,
            capped_requests: self.shared.capped_requests.load(Ordering::Relaxed),
            capped: Duration::from_nanos(self.shared.capped_ns.load(Ordering::Relaxed)),
        }
    }

    /// Admits one request of this class carrying `bytes` (read or written): once its caps
    /// hold it, then at once unless the class is throttled to fewer requests at a time than it
    /// has in flight, else once one of them finished.
    pub(crate) fn admit(&self, bytes: u64) -> Admitted<'_> {
        let c = &*self.shared;
        // Without caps (the flag read first), no lock and no clock: one atomic load.
        let capped = match c.capped.load(Ordering::Acquire) {
            false => Duration::ZERO,
            true => {
                let mut caps = lock(&c.caps);
                if caps.is_empty() {
                    Duration::ZERO
                } else {
                    caps.reserve(self.group.now(), bytes)
                }
            }
        };
        if !capped.is_zero() {
            std::thread::sleep(capped);
            c.capped_requests.fetch_add(1, Ordering::Relaxed);
            c.capped_ns
                .fetch_add(capped.as_nanos() as u64, Ordering::Relaxed);
        }
        let mut waited = Duration::ZERO;
        if !self.try_take() {
            let start = Instant::now();
            let mut guard = lock(&c.lock);
            c.waiters.fetch_add(1, Ordering::SeqCst);
            while !self.try_take() {
                // The timeout is a safety net only: a finished request and a looser level both
                // notify.
                guard = c
                    .wake
                    .wait_timeout(guard, Duration::from_millis(10))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            c.waiters.fetch_sub(1, Ordering::SeqCst);
            drop(guard);
            waited = start.elapsed();
        }
        Admitted {
            class: self,
            start: Instant::now(),
            waited,
        }
    }

    /// Takes a slot if the level allows one more request in flight.
    fn try_take(&self) -> bool {
        let c = &*self.shared;
        let limit = LEVELS[c.level.load(Ordering::SeqCst)].max_in_flight;
        let mut now = c.in_flight.load(Ordering::SeqCst);
        loop {
            if limit.is_some_and(|limit| now >= limit) {
                return false;
            }
            match c.in_flight.compare_exchange_weak(
                now,
                now + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    fn release(&self) {
        let c = &*self.shared;
        c.in_flight.fetch_sub(1, Ordering::SeqCst);
        if c.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&c.lock);
            c.wake.notify_one();
        }
    }
}

impl Drop for QosClass {
    fn drop(&mut self) {
        let id = self.shared.id;
        self.group.lock_controller().remove(id);
        lock(&self.group.members).retain(|c| c.id != id);
    }
}

/// One admitted request, holding its slot until dropped; [`Admitted::finish`] once its reply
/// is sent.
pub(crate) struct Admitted<'a> {
    class: &'a QosClass,
    start: Instant,
    waited: Duration,
}

impl Admitted<'_> {
    /// The request was answered: its latency recorded (a class with a target), the controller
    /// run if its window is over, the pause of a throttled class taken (holding the slot), and
    /// the slot given back.
    pub fn finish(self) {
        let class = self.class;
        let c = &*class.shared;
        let took = self.start.elapsed();
        let group = &*class.group;
        let now = group.now();
        if c.target_ns.load(Ordering::Relaxed) != 0 {
            group.lock_controller().record(c.id, took, now);
        }
        group.maybe_decide(now);
        let pause = controller::pause_after(c.level.load(Ordering::SeqCst), took);
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
        let throttled = self.waited + pause;
        if !throttled.is_zero() {
            c.throttled_requests.fetch_add(1, Ordering::Relaxed);
            c.throttled_ns
                .fetch_add(throttled.as_nanos() as u64, Ordering::Relaxed);
        }
        // The slot is given back as `self` drops.
    }
}

impl Drop for Admitted<'_> {
    /// Gives the slot back, also for a request that ended before its reply (its payload could
    /// not be read).
    fn drop(&mut self) {
        self.class.release();
    }
}

fn target_ns(target: Option<Duration>) -> u64 {
    target.map_or(0, |t| (t.as_nanos() as u64).max(1))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives the group's controller to `level` for `class` by recording misses of `protected`.
    fn throttle(group: &Arc<QosGroup>, protected: &QosClass, throttled: &QosClass, level: usize) {
        while throttled.shared.level.load(Ordering::SeqCst) < level {
            let now = group.now();
            {
                let mut c = group.lock_controller();
                for _ in 0..10 {
                    c.record(protected.shared.id, Duration::from_secs(1), now);
                }
            }
            // The next window's end, as a finishing request would find it.
            let end = Duration::from_nanos(group.decide_at.load(Ordering::SeqCst));
            group.maybe_decide(end.max(now));
        }
    }

    #[test]
    fn a_throttled_class_admits_its_level_of_requests_at_once_and_the_rest_wait() {
        let group = QosGroup::new();
        let a = group.join(Some(Duration::from_micros(100)));
        let b = group.join(None);
        throttle(&group, &a, &b, 4); // one at a time, no pause
        assert_eq!(b.snapshot().max_in_flight, Some(1));
        let first = b.admit(1 << 20);
        let b2 = Arc::clone(&b);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let second = b2.admit(1 << 20);
            tx.send(()).unwrap();
            second.finish();
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a second request was admitted at level 4"
        );
        // The protected class is not held back meanwhile.
        a.admit(4096).finish();
        first.finish();
        rx.recv_timeout(Duration::from_secs(5))
            .expect("the waiting request was admitted once the first finished");
        waiter.join().unwrap();
        let s = b.snapshot();
        assert!(s.throttled_requests >= 1 && !s.throttled.is_zero(), "{s:?}");
        assert_eq!(a.snapshot().throttled_requests, 0);
    }

    #[test]
    fn at_the_pausing_levels_a_request_is_followed_by_its_pause() {
        let group = QosGroup::new();
        let a = group.join(Some(Duration::from_micros(100)));
        let b = group.join(None);
        throttle(&group, &a, &b, controller::MAX_LEVEL);
        let admitted = b.admit(1 << 20);
        std::thread::sleep(Duration::from_millis(5));
        let start = Instant::now();
        admitted.finish();
        // 9 × (≥ 5 ms), capped at 100 ms... minus nothing: the pause is at least 45 ms.
        assert!(start.elapsed() >= Duration::from_millis(45));
        assert_eq!(b.snapshot().throttled_requests, 1);
    }

    #[test]
    fn a_capped_class_waits_for_its_bucket_and_counts_it() {
        let group = QosGroup::new();
        let b = group.join(None);
        b.set_caps(Some(bucket::MIN_BYTES_PER_SEC), None);
        // 1 MiB/s: the burst (100 ms) holds 0.1 MiB, so a 1 MiB request waits ~0.9 s.
        let start = Instant::now();
        b.admit(1 << 20).finish();
        assert!(start.elapsed() >= Duration::from_millis(800));
        let s = b.snapshot();
        assert_eq!((s.max_bytes_per_sec, s.capped_requests), (Some(1 << 20), 1));
        assert!(s.capped >= Duration::from_millis(800));
        assert_eq!(s.throttled_requests, 0, "a cap is not the latency throttle");
        // Uncapped again: nothing waits.
        b.set_caps(None, None);
        let start = Instant::now();
        b.admit(1 << 20).finish();
        assert!(start.elapsed() < Duration::from_millis(500));
    }

    /// Whether `class` admits a request within 2 s while this thread holds its caps' mutex.
    fn admits_while_the_caps_are_locked(class: &Arc<QosClass>) -> bool {
        let held = lock(&class.shared.caps);
        let other = Arc::clone(class);
        let (tx, rx) = std::sync::mpsc::channel();
        let admitting = std::thread::spawn(move || {
            other.admit(4096).finish();
            tx.send(()).unwrap();
        });
        let admitted = rx.recv_timeout(Duration::from_secs(2)).is_ok();
        drop(held);
        admitting.join().unwrap();
        admitted
    }

    #[test]
    fn a_class_without_caps_admits_without_the_caps_lock() {
        let group = QosGroup::new();
        let b = group.join(None);
        // Another thread holds the caps' mutex (as `set_caps` or `snapshot` may at any
        // moment): an uncapped request must not wait for it. Before the flag every request
        // took that mutex, and this admission blocked until the holder let go.
        let admitted = admits_while_the_caps_are_locked(&b);
        assert!(admitted, "an uncapped request waited for the caps' lock");
        // Capped, the lock is taken (and the cap applies); uncapped again, it is not.
        b.set_caps(None, Some(1_000_000));
        assert_eq!(b.snapshot().max_iops, Some(1_000_000));
        b.admit(4096).finish();
        b.set_caps(None, None);
        let admitted = admits_while_the_caps_are_locked(&b);
        assert!(admitted, "caps removed, the lock is still taken");
    }

    #[test]
    fn leaving_the_group_forgets_the_class() {
        let group = QosGroup::new();
        let a = group.join(None);
        let id = a.shared.id;
        drop(a);
        assert!(group.lock_controller().class(id).is_none());
        assert!(lock(&group.members).is_empty());
    }
}
