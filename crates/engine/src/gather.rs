//! Stripe gathering for RAID 5/6: concurrent writes of a sequential stream that share a stripe
//! write it once, whole, instead of each reading the others' parts to compute parity.
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
//! - **Tail.** A write whose end falls inside a stripe, and that covers the start of that
//!   stripe (after a part in earlier stripes, or starting exactly there), leaves the tail
//!   *pending* instead of writing it, if the write looks sequential (it starts where another
//!   write ends or recently ended), other writes are in flight (a client at queue depth 1 waits
//!   for this one before sending the next), no write that starts at its end is registered
//!   already (that one has decided without us), and fewer than [`PENDING_MAX`] tails are
//!   pending. It writes the rest, then waits for the tail.
//! - **Middle.** A write inside one stripe that starts exactly where a pending tail ends *joins*
//!   it (under the same conditions but sequence and load, which the tail proved): its bytes are
//!   appended to the tail and it waits with the tail's owner. So a stripe cut into three or
//!   more requests (the Linux client's 128 KiB requests on a stripe of 384 KiB) is gathered too.
//! - **Head.** A write whose start falls inside a stripe where a pending tail ends exactly
//!   there *takes* it: it writes the tail's data and its own head together as one full-stripe
//!   write (no reads), and reports the result to everyone waiting for the tail.
//! - A tail nobody took within the wait ([`GATHER_WAIT_DEFAULT`]) is *claimed* by the first of
//!   its waiters whose wait ends (the owner: it waited first): it writes the tail, joined bytes
//!   included, and reports the result to the others.
//!
//! No write is acknowledged before its data is on the members: every waiter of a tail returns
//! only once the tail is written, by whichever request. A waiting owner holds no stripe lock (its
//! other stripes are written and unlocked), so gathering adds no lock-order constraint; a taker
//! writes the union through the normal path (stripe locks, journal, fault handling). The union
//! is written while every contributing request is in flight, so the bytes each of them wrote
//! are in their write-intent bitmap regions (all intents are held). If a taker or claimer
//! panics, its guard puts the tail back (open), and a waiter writes it when its wait ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::IoError;

/// How long a pending tail waits for the next write of its stream.
pub const GATHER_WAIT_DEFAULT: Duration = Duration::from_millis(2);
/// Pending tails at most (each holds at most one stripe of data; any number of writes may wait
/// for one, each of them a request in flight, bounded by the server's requests in flight).
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
/// the start of its stripe; the owner's tail and the bytes of the writes that joined it.
struct Pending {
    lo: u64,
    data: Vec<u8>,
    state: State,
    /// Writes waiting for the outcome (the owner and those that joined, less a claimer); the
    /// last to learn it removes the tail.
    waiters: usize,
}

enum State {
    /// Waiting to be taken.
    Open,
    /// A head took it, or a waiter claimed it, and is writing it.
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

/// A tail to write at `lo`: taken with the taker's head (`union` is one whole stripe), or
/// claimed by a waiter whose wait ended (`union` is the tail and the bytes joined to it).
pub(crate) struct Taken {
    pub stripe: u64,
    pub lo: u64,
    pub union: Vec<u8>,
}

/// How a pending tail ended for one of its waiters.
pub(crate) enum Outcome {
    /// Another write wrote it, with this result.
    Written(Result<(), IoError>),
    /// Nobody took it: this waiter writes it, then reports with [`Gather::finish_taken`].
    Claimed(Taken),
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
    /// decides its plan: take a pending tail with its head, join one, leave its own tail
    /// pending, or none. Must be paired with [`Gather::leave`].
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
        // A head runs from inside a stripe to its end (the request may end there); a middle
        // lies inside one stripe; a tail runs from a stripe's start to inside it.
        let reaches_end = end >= (first + 1) * stripe_bytes;
        let mut joined = false;
        if !offset.is_multiple_of(stripe_bytes) {
            if reaches_end {
                plan.take = t.take_tail(first, offset, buf, stripe_bytes);
                if plan.take.is_some() {
                    plan.body.0 = (first + 1) * stripe_bytes;
                }
            } else if !self.wait().is_zero() && t.join_tail(first, offset, end, buf) {
                joined = true;
                plan.tail_stripe = Some(first);
                plan.body = (offset, offset);
            }
        }
        let wants_tail = !joined
            && !end.is_multiple_of(stripe_bytes)
            && (first != last || offset.is_multiple_of(stripe_bytes));
        if wants_tail && !self.wait().is_zero() && t.tail_may_wait(offset, end, last) {
            let lo = last * stripe_bytes;
            let data = buf[(lo - offset) as usize..].to_vec();
            let pending = Pending {
                lo,
                data,
                state: State::Open,
                waiters: 1,
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

    /// After the taker (or claimer) wrote a taken tail: tells the tail's waiters.
    pub fn finish_taken(&self, taken: &Taken, result: &Result<(), IoError>, stripe_bytes: u64) {
        if result.is_ok() && taken.union.len() as u64 == stripe_bytes {
            self.gathered.fetch_add(1, Ordering::Relaxed);
        }
        let mut t = self.lock();
        let pending = t
            .pending
            .get_mut(&taken.stripe)
            .expect("a taken tail stays until its waiters have the outcome");
        assert!(matches!(pending.state, State::Taken));
        if pending.waiters == 0 {
            // A claimer that was the last waiter: nobody else needs the outcome.
            t.pending.remove(&taken.stripe);
            return;
        }
        pending.state = State::Done(result.clone());
        drop(t);
        self.changed.notify_all();
    }

    /// Puts a taken tail back (its taker or claimer failed without writing it): a waiter
    /// writes it when its wait ends. A claimer that was the last waiter drops it instead (its
    /// request fails, and nobody else wrote the bytes).
    pub fn untake(&self, stripe: u64) {
        let mut t = self.lock();
        if let Some(pending) = t.pending.get_mut(&stripe) {
            if matches!(pending.state, State::Taken) {
                if pending.waiters == 0 {
                    t.pending.remove(&stripe);
                } else {
                    pending.state = State::Open;
                }
            }
        }
        drop(t);
        self.changed.notify_all();
    }

    /// A waiter of the pending tail in `stripe` (its owner, or a write that joined it) waits
    /// until another write wrote it, or until its wait is over and nobody took it: then it
    /// claims the tail and writes it itself.
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
                let pending = t.pending.get_mut(&stripe).expect("present");
                pending.waiters -= 1;
                return match &pending.state {
                    State::Done(result) => {
                        let result = result.clone();
                        if pending.waiters == 0 {
                            t.pending.remove(&stripe);
                        }
                        Outcome::Written(result)
                    }
                    _ => {
                        pending.state = State::Taken;
                        Outcome::Claimed(Taken {
                            stripe,
                            lo: pending.lo,
                            union: std::mem::take(&mut pending.data),
                        })
                    }
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

    /// Writes waiting for pending tails now (owners and joiners).
    pub fn waiting(&self) -> usize {
        self.lock().pending.values().map(|p| p.waiters).sum()
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

    /// If the open pending tail of `stripe` ends exactly at `offset`, and no write starting
    /// at `end` has registered (it decided without us), appends `buf` (`[offset, end)`, inside
    /// the stripe) to it: this write then waits for the tail with its owner.
    fn join_tail(&mut self, stripe: u64, offset: u64, end: u64, buf: &[u8]) -> bool {
        let partner_decided = self.in_flight.iter().any(|f| f.start == end);
        let Some(pending) = self.pending.get_mut(&stripe) else {
            return false;
        };
        let adjacent = pending.lo + pending.data.len() as u64 == offset;
        if !matches!(pending.state, State::Open) || !adjacent || partner_decided {
            return false;
        }
        pending.data.extend_from_slice(buf);
        pending.waiters += 1;
        true
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
        g.finish_taken(taken, &Ok(()), STRIPE);
        assert!(matches!(g.wait_for_tail(2), Outcome::Written(Ok(()))));
        assert_eq!(g.gathered.load(Ordering::Relaxed), 1);
        let claimed = match g.wait_for_tail(3) {
            Outcome::Claimed(c) => c,
            Outcome::Written(_) => panic!("no write came after b"),
        };
        assert_eq!((claimed.lo, &claimed.union), (300, &bytes(50, 2)));
        g.finish_taken(&claimed, &Ok(()), STRIPE);
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
        let claimed = match g.wait_for_tail(2) {
            Outcome::Claimed(c) => c,
            Outcome::Written(_) => panic!("nobody took it"),
        };
        assert_eq!((claimed.lo, &claimed.union), (200, &bytes(50, 1)));
        assert!(started.elapsed() >= Duration::from_millis(20));
        g.finish_taken(&claimed, &Ok(()), STRIPE);
        assert_eq!(
            g.pending_count(),
            0,
            "the last waiter's claim removes the tail"
        );
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
        g.finish_taken(retaken, &failure, STRIPE);
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

    #[test]
    fn a_stripe_in_three_pieces_is_gathered_whole() {
        let g = Gather::new();
        // The stream ended at 200 (a stripe boundary); another write is in flight.
        let other = g.enter(150, &bytes(50, 0), STRIPE);
        // 200..230 starts stripe 2 and ends inside it: all of it is a pending tail.
        let a = g.enter(200, &bytes(30, 1), STRIPE);
        assert_eq!((a.body, a.tail_stripe), ((200, 200), Some(2)));
        // 230..260 lies inside stripe 2 and continues the tail: it joins.
        let b = g.enter(230, &bytes(30, 2), STRIPE);
        assert_eq!((b.body, b.tail_stripe), ((230, 230), Some(2)));
        assert!(b.take.is_none());
        assert_eq!(g.waiting(), 2);
        // 260..300 completes it: one whole stripe with all three writes' bytes.
        let c = g.enter(260, &bytes(40, 3), STRIPE);
        let taken = c.take.as_ref().expect("taken");
        assert_eq!(taken.lo, 200);
        let want: Vec<u8> = [bytes(30, 1), bytes(30, 2), bytes(40, 3)].concat();
        assert_eq!(taken.union, want);
        assert_eq!((c.body, c.tail_stripe), ((300, 300), None));
        g.finish_taken(taken, &Ok(()), STRIPE);
        for _ in 0..2 {
            assert!(matches!(g.wait_for_tail(2), Outcome::Written(Ok(()))));
        }
        assert_eq!((g.pending_count(), g.waiting()), (0, 0));
        assert_eq!(g.gathered.load(Ordering::Relaxed), 1);
        for plan in [&other, &a, &b, &c] {
            g.leave(plan);
        }
    }

    #[test]
    fn a_joined_tail_nobody_completes_is_written_once_by_its_first_waiter() {
        let g = Gather::new();
        g.set_wait(Duration::from_millis(20));
        let other = g.enter(150, &bytes(50, 0), STRIPE);
        let a = g.enter(200, &bytes(30, 1), STRIPE);
        let b = g.enter(230, &bytes(30, 2), STRIPE);
        assert_eq!((a.tail_stripe, b.tail_stripe), (Some(2), Some(2)));
        // The owner's wait ends first: it claims the tail with the joined bytes.
        let claimed = match g.wait_for_tail(2) {
            Outcome::Claimed(c) => c,
            Outcome::Written(_) => panic!("nobody completed the stripe"),
        };
        assert_eq!(claimed.union, [bytes(30, 1), bytes(30, 2)].concat());
        // A write arriving now cannot join or take a tail being written.
        let late = g.enter(260, &bytes(40, 3), STRIPE);
        assert!(late.take.is_none() && late.tail_stripe.is_none());
        assert_eq!(late.body, (260, 300));
        let failure = Err(IoError::ArrayFailed {
            level: layout::Level::Raid5,
            missing: vec![0, 1],
        });
        g.finish_taken(&claimed, &failure, STRIPE);
        // The joined write learns the claimer's result; not a whole stripe, not counted.
        assert!(matches!(
            g.wait_for_tail(2),
            Outcome::Written(Err(IoError::ArrayFailed { .. }))
        ));
        assert_eq!(
            (g.pending_count(), g.gathered.load(Ordering::Relaxed)),
            (0, 0)
        );
        for plan in [&other, &a, &b, &late] {
            g.leave(plan);
        }
    }

    #[test]
    fn a_middle_write_joins_only_an_open_adjacent_tail_nobody_decided_past() {
        let g = Gather::new();
        let other = g.enter(150, &bytes(50, 0), STRIPE);
        let a = g.enter(200, &bytes(30, 1), STRIPE);
        // Not adjacent (a gap at 230..240): written by itself.
        let gap = g.enter(240, &bytes(10, 2), STRIPE);
        assert_eq!((gap.body, gap.tail_stripe), ((240, 250), None));
        // The write after it (260..) registered first: 230..260 does not join.
        let next = g.enter(260, &bytes(40, 3), STRIPE);
        assert!(next.take.is_none(), "no tail ends at 260");
        let mid = g.enter(230, &bytes(30, 2), STRIPE);
        assert_eq!((mid.body, mid.tail_stripe), ((230, 260), None));
        assert_eq!(g.waiting(), 1);
        // Gathering off: nothing joins.
        g.set_wait(Duration::ZERO);
        let off = g.enter(230, &bytes(5, 2), STRIPE);
        assert_eq!((off.body, off.tail_stripe), ((230, 235), None));
        for plan in [&other, &a, &gap, &next, &mid, &off] {
            g.leave(plan);
        }
    }
}
