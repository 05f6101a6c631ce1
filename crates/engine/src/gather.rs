//! Stripe gathering for RAID 5/6: two concurrent writes of a sequential stream that share a
//! stripe write it once, whole, instead of each reading the other's part to compute parity.
//!
//! A client writing sequentially with requests that are not multiples of the stripe (1 MiB
//! requests on a 3-data-member RAID 5 with 128 KiB chunks: 384 KiB stripes) leaves a partial
//! stripe at each request boundary. Written separately, the first request reads the rest of the
//! stripe (reconstruct-write), writes its part and parity; the second reads the first's part
//! and writes its part and parity again. md avoids this with its stripe cache, which delays
//! partial stripes while more writes arrive. Here, only where a partner is likely:
//!
//! - Every RAID 5/6 write registers its range while it is in flight (`Table::in_flight`), and
//!   its end is remembered for a while (`recent_ends`).
//! - **Tail.** A write whose end falls inside a stripe (its tail covers the start of that
//!   stripe) leaves the tail *pending* instead of writing it, if the write looks sequential
//!   (it starts where another write ends or recently ended), other writes are in flight (a
//!   client at queue depth 1 waits for this one before sending the next), no write that
//!   starts at its end is registered already (that one has decided without us), and fewer
//!   than [`PENDING_MAX`] tails are pending. It writes the rest, then waits for the tail.
//! - **Head.** A write whose start falls inside a stripe where a pending tail ends exactly
//!   there *takes* it: it writes the tail's data and its own head together as one full-stripe
//!   write (no reads), and reports the result to the tail's owner.
//! - A tail nobody took within the wait ([`GATHER_WAIT_DEFAULT`]) is written by its owner.
//!
//! No write is acknowledged before its data is on the members: the owner of a tail returns only
//! once the tail is written, by whichever request. A waiting owner holds no stripe lock (its
//! other stripes are written and unlocked), so gathering adds no lock-order constraint; a taker
//! writes the union through the normal path (stripe locks, journal, fault handling). The union
//! is written while both requests are in flight, so the bytes either of them wrote are in
//! their write-intent bitmap regions (both intents are held). If a taker panics, its guard puts
//! the tail back (open), and the owner writes it itself when its wait ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::IoError;

/// How long a pending tail waits for the next write of its stream.
pub const GATHER_WAIT_DEFAULT: Duration = Duration::from_millis(2);
/// Pending tails at most (each holds at most one stripe of data).
pub(crate) const PENDING_MAX: usize = 64;
/// Ends of recent writes remembered to recognise a sequential stream.
const RECENT_ENDS: usize = 32;

/// See the module documentation.
pub(crate) struct Gather {
    table: Mutex<Table>,
    changed: Condvar,
    /// Microseconds a pending tail waits; 0 turns gathering off.
    wait_us: AtomicU64,
    /// Stripes written whole by gathering (two requests' parts in one write).
    gathered: AtomicU64,
}

struct Table {
    next_id: u64,
    in_flight: Vec<Flight>,
    recent_ends: [u64; RECENT_ENDS],
    recent_next: usize,
    pending: HashMap<u64, Pending>,
}

#[derive(Clone, Copy)]
struct Flight {
    id: u64,
    start: u64,
    end: u64,
}

/// A tail waiting for the head of the next write: bytes `[lo, lo + data.len())`, `lo` being
/// the start of its stripe.
struct Pending {
    lo: u64,
    data: Vec<u8>,
    state: State,
}

enum State {
    /// Waiting to be taken.
    Open,
    /// A head took it and is writing the stripe.
    Taken,
    /// Written by the taker, with this outcome.
    Done(Result<(), IoError>),
}

/// What a write does about its head and tail stripes, decided when it registers.
pub(crate) struct GatherPlan {
    id: u64,
    /// The head took a pending tail: write `union` (a whole stripe) at `lo`, for `stripe`.
    pub take: Option<Taken>,
    /// The tail is pending in this stripe: wait for it after writing the body.
    pub tail_stripe: Option<u64>,
    /// The bytes this write writes itself: `[body.0, body.1)`.
    pub body: (u64, u64),
}

/// A taken tail plus the taker's head: one whole stripe.
pub(crate) struct Taken {
    pub stripe: u64,
    pub lo: u64,
    pub union: Vec<u8>,
}

/// How a pending tail ended.
pub(crate) enum Outcome {
    /// A head wrote it, with this result.
    Written(Result<(), IoError>),
    /// Nobody took it: the owner writes `data` at `lo` itself.
    Untaken { lo: u64, data: Vec<u8> },
}

impl Gather {
    pub fn new() -> Gather {
        Gather {
            table: Mutex::new(Table {
                next_id: 0,
                in_flight: Vec::new(),
                recent_ends: [u64::MAX; RECENT_ENDS],
                recent_next: 0,
                pending: HashMap::new(),
            }),
            changed: Condvar::new(),
            wait_us: AtomicU64::new(GATHER_WAIT_DEFAULT.as_micros() as u64),
            gathered: AtomicU64::new(0),
        }
    }

    /// Stripes written whole by gathering so far.
    pub fn gathered(&self) -> u64 {
        self.gathered.load(Ordering::Relaxed)
    }

    pub fn set_wait(&self, wait: Duration) {
        self.wait_us
            .store(wait.as_micros() as u64, Ordering::Relaxed);
    }

    fn wait(&self) -> Duration {
        Duration::from_micros(self.wait_us.load(Ordering::Relaxed))
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the write of `buf` at `offset` (stripes of `stripe_bytes` data bytes) and
    /// decides its plan. Must be paired with [`Gather::leave`].
    pub fn enter(&self, offset: u64, buf: &[u8], stripe_bytes: u64) -> GatherPlan {
        assert!(!buf.is_empty() && stripe_bytes > 0);
        let end = offset + buf.len() as u64;
        let (first, last) = (offset / stripe_bytes, (end - 1) / stripe_bytes);
        let mut t = self.lock();
        let id = t.next_id;
        t.next_id += 1;
        let mut plan = GatherPlan {
            id,
            take: None,
            tail_stripe: None,
            body: (offset, end),
        };
        // A head runs from inside a stripe to its end (the request may end there); a tail
        // runs from a stripe's start to inside it, after a part in earlier stripes (a write
        // inside one stripe is not a tail: the next small write would not complete it).
        let reaches_end = end >= (first + 1) * stripe_bytes;
        if reaches_end && !offset.is_multiple_of(stripe_bytes) {
            plan.take = t.take_tail(first, offset, buf, stripe_bytes);
            if plan.take.is_some() {
                plan.body.0 = (first + 1) * stripe_bytes;
            }
        }
        let wants_tail = first != last && !end.is_multiple_of(stripe_bytes);
        if wants_tail && !self.wait().is_zero() && t.tail_may_wait(offset, end, last) {
            let lo = last * stripe_bytes;
            let data = buf[(lo - offset) as usize..].to_vec();
            let pending = Pending {
                lo,
                data,
                state: State::Open,
            };
            t.pending.insert(last, pending);
            plan.tail_stripe = Some(last);
            plan.body.1 = lo;
        }
        t.in_flight.push(Flight {
            id,
            start: offset,
            end,
        });
        let at = t.recent_next;
        t.recent_ends[at] = end;
        t.recent_next = (at + 1) % RECENT_ENDS;
        assert!(
            plan.body.0 <= plan.body.1,
            "body of a gathered write inverted"
        );
        plan
    }

    /// After the taker wrote the union of a taken tail: tells the tail's owner.
    pub fn finish_taken(&self, taken: &Taken, result: &Result<(), IoError>) {
        if result.is_ok() {
            self.gathered.fetch_add(1, Ordering::Relaxed);
        }
        let outcome = match result {
            Ok(()) => Ok(()),
            Err(e) => Err(e.clone()),
        };
        let mut t = self.lock();
        let pending = t
            .pending
            .get_mut(&taken.stripe)
            .expect("a taken tail stays until its owner has the outcome");
        assert!(matches!(pending.state, State::Taken));
        pending.state = State::Done(outcome);
        drop(t);
        self.changed.notify_all();
    }

    /// Puts a taken tail back (its taker failed without writing it): the owner writes it.
    pub fn untake(&self, stripe: u64) {
        let mut t = self.lock();
        if let Some(pending) = t.pending.get_mut(&stripe) {
            if matches!(pending.state, State::Taken) {
                pending.state = State::Open;
            }
        }
        drop(t);
        self.changed.notify_all();
    }

    /// The owner of the pending tail in `stripe` waits until a head wrote it, or until the
    /// wait is over and nobody took it.
    pub fn wait_for_tail(&self, stripe: u64) -> Outcome {
        let deadline = Instant::now() + self.wait();
        let mut t = self.lock();
        loop {
            let now = Instant::now();
            let state = &t
                .pending
                .get(&stripe)
                .expect("the owner's tail is pending")
                .state;
            let (open, finished) = match state {
                State::Done(_) => (false, true),
                State::Open => (true, now >= deadline),
                // Being written: the taker is doing member I/O, bounded by member timeouts.
                State::Taken => (false, false),
            };
            if finished {
                let pending = t.pending.remove(&stripe).expect("present");
                return match pending.state {
                    State::Done(result) => Outcome::Written(result),
                    _ => Outcome::Untaken {
                        lo: pending.lo,
                        data: pending.data,
                    },
                };
            }
            t = if open {
                let left = deadline - now;
                let waited = self.changed.wait_timeout(t, left);
                waited.unwrap_or_else(|p| p.into_inner()).0
            } else {
                self.changed.wait(t).unwrap_or_else(|p| p.into_inner())
            };
        }
    }

    /// The write `plan` was made for has finished.
    pub fn leave(&self, plan: &GatherPlan) {
        let mut t = self.lock();
        let at = t
            .in_flight
            .iter()
            .position(|f| f.id == plan.id)
            .expect("a registered write leaves once");
        t.in_flight.swap_remove(at);
    }

    /// Pending tails now (for tests).
    #[cfg(test)]
    fn pending_count(&self) -> usize {
        self.lock().pending.len()
    }
}

impl Table {
    /// If the open pending tail of `stripe` ends exactly at `offset`, takes it: its data then
    /// this write's head (to the stripe's end) make the whole stripe.
    fn take_tail(
        &mut self,
        stripe: u64,
        offset: u64,
        buf: &[u8],
        stripe_bytes: u64,
    ) -> Option<Taken> {
        let pending = self.pending.get_mut(&stripe)?;
        let adjacent = pending.lo + pending.data.len() as u64 == offset;
        if !matches!(pending.state, State::Open) || !adjacent {
            return None;
        }
        assert_eq!(
            pending.lo,
            stripe * stripe_bytes,
            "a tail starts its stripe"
        );
        let head = &buf[..((stripe + 1) * stripe_bytes - offset) as usize];
        let mut union = Vec::with_capacity(stripe_bytes as usize);
        union.extend_from_slice(&pending.data);
        union.extend_from_slice(head);
        assert_eq!(
            union.len() as u64,
            stripe_bytes,
            "a taken tail and head fill the stripe"
        );
        pending.state = State::Taken;
        Some(Taken {
            stripe,
            lo: pending.lo,
            union,
        })
    }

    /// Whether the tail of the write `[start, end)` in `stripe` should wait for a partner.
    fn tail_may_wait(&self, start: u64, end: u64, stripe: u64) -> bool {
        let sequential =
            self.recent_ends.contains(&start) || self.in_flight.iter().any(|f| f.end == start);
        let partner_decided = self.in_flight.iter().any(|f| f.start == end);
        sequential
            && !self.in_flight.is_empty()
            && !partner_decided
            && self.pending.len() < PENDING_MAX
            && !self.pending.contains_key(&stripe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRIPE: u64 = 100;

    fn bytes(len: usize, value: u8) -> Vec<u8> {
        vec![value; len]
    }

    #[test]
    fn a_sequential_tail_is_taken_by_the_next_head() {
        let g = Gather::new();
        // An earlier write of the stream ended at 50 and another write is in flight.
        let other = g.enter(0, &bytes(50, 0), STRIPE);
        let a = g.enter(50, &bytes(200, 1), STRIPE); // 50..250: tail 200..250 in stripe 2
        assert_eq!(a.tail_stripe, Some(2));
        assert_eq!(a.body, (50, 200));
        assert!(a.take.is_none());
        let b = g.enter(250, &bytes(100, 2), STRIPE); // head 250..300 completes stripe 2
        let taken = b.take.as_ref().expect("taken");
        assert_eq!((taken.stripe, taken.lo), (2, 200));
        assert_eq!(&taken.union[..50], &bytes(50, 1)[..]);
        assert_eq!(&taken.union[50..], &bytes(50, 2)[..]);
        // b continues the stream too: its own tail (300..350) waits for the next write.
        assert_eq!((b.body, b.tail_stripe), ((300, 300), Some(3)));
        g.finish_taken(taken, &Ok(()));
        assert!(matches!(g.wait_for_tail(2), Outcome::Written(Ok(()))));
        assert_eq!(g.gathered.load(Ordering::Relaxed), 1);
        match g.wait_for_tail(3) {
            Outcome::Untaken { lo, data } => assert_eq!((lo, data), (300, bytes(50, 2))),
            Outcome::Written(_) => panic!("no write came after b"),
        }
        for plan in [&other, &a, &b] {
            g.leave(plan);
        }
        assert_eq!(g.pending_count(), 0);
    }

    #[test]
    fn an_untaken_tail_comes_back_to_its_owner_after_the_wait() {
        let g = Gather::new();
        g.set_wait(Duration::from_millis(20));
        let other = g.enter(1000, &bytes(10, 0), STRIPE);
        let first = g.enter(0, &bytes(50, 0), STRIPE);
        g.leave(&first); // its end (50) is remembered
        let a = g.enter(50, &bytes(200, 1), STRIPE);
        assert_eq!(a.tail_stripe, Some(2));
        let started = Instant::now();
        match g.wait_for_tail(2) {
            Outcome::Untaken { lo, data } => assert_eq!((lo, data), (200, bytes(50, 1))),
            Outcome::Written(_) => panic!("nobody took it"),
        }
        assert!(started.elapsed() >= Duration::from_millis(20));
        g.leave(&a);
        g.leave(&other);
        // A head arriving after the owner took its tail back finds nothing to take.
        let late = g.enter(250, &bytes(100, 2), STRIPE);
        assert!(late.take.is_none());
        assert_eq!(late.body, (250, 350));
        g.leave(&late);
    }

    #[test]
    fn tails_wait_only_when_a_partner_is_likely() {
        let g = Gather::new();
        // Alone (queue depth 1): no other write in flight.
        let first = g.enter(0, &bytes(50, 0), STRIPE);
        g.leave(&first);
        let alone = g.enter(50, &bytes(200, 1), STRIPE);
        assert_eq!(alone.tail_stripe, None, "nobody else in flight");
        g.leave(&alone);
        // Not sequential: no write ended at its start.
        let other = g.enter(5000, &bytes(10, 0), STRIPE);
        let random = g.enter(1234, &bytes(200, 1), STRIPE);
        assert_eq!(random.tail_stripe, None);
        g.leave(&random);
        // The next write already registered: it decided without us.
        let next = g.enter(250, &bytes(100, 2), STRIPE);
        let seq = g.enter(50, &bytes(200, 1), STRIPE);
        assert_eq!(seq.tail_stripe, None);
        // Off (this one would wait if on: it continues `other`, which is in flight).
        g.set_wait(Duration::ZERO);
        let off = g.enter(5010, &bytes(200, 1), STRIPE);
        assert_eq!(off.tail_stripe, None);
        g.set_wait(GATHER_WAIT_DEFAULT);
        for plan in [&other, &next, &seq, &off] {
            g.leave(plan);
        }
        // A write inside one stripe, or ending on a boundary, has no tail to gather.
        let other = g.enter(5000, &bytes(10, 0), STRIPE);
        let inside = g.enter(5010, &bytes(20, 0), STRIPE);
        let aligned = g.enter(5030, &bytes(70, 0), STRIPE);
        assert_eq!((inside.tail_stripe, aligned.tail_stripe), (None, None));
        for plan in [&other, &inside, &aligned] {
            g.leave(plan);
        }
    }

    #[test]
    fn a_failed_union_fails_the_owner_too_and_untake_reopens() {
        let g = Gather::new();
        let other = g.enter(0, &bytes(50, 0), STRIPE);
        let a = g.enter(50, &bytes(200, 1), STRIPE);
        let b = g.enter(250, &bytes(100, 2), STRIPE);
        let taken = b.take.as_ref().expect("taken");
        g.untake(taken.stripe);
        let c = g.enter(250, &bytes(100, 3), STRIPE);
        let retaken = c.take.as_ref().expect("open again after untake");
        let failure = Err(IoError::ArrayFailed {
            level: layout::Level::Raid5,
            missing: vec![0, 1],
        });
        g.finish_taken(retaken, &failure);
        match g.wait_for_tail(2) {
            Outcome::Written(Err(IoError::ArrayFailed { missing, .. })) => {
                assert_eq!(missing, vec![0, 1])
            }
            _ => panic!("the owner must see the union's failure"),
        }
        assert_eq!(g.gathered.load(Ordering::Relaxed), 0);
        for plan in [&other, &a, &b, &c] {
            g.leave(plan);
        }
    }
}
