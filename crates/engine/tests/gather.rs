//! Stripe gathering (RAID 5/6): the tail of a sequential write waits for the head of the next,
//! and the two are written as one whole stripe without reads.
//!
//! - A scripted case: a write is held in flight (a member that blocks writes past an offset),
//!   one write ends the stream's first stripe, the next leaves its tail pending, and the write
//!   after it takes the tail: one gathered stripe, no member read while the taker writes, data
//!   and parity right, both writers return.
//! - A stripe cut into three requests (tail, middle, head) is written once, whole, no reads.
//! - A failing union fails both writes.
//! - Seeded streams: threads take sequential, unaligned requests from one counter (as the
//!   request threads of a client at queue depth 8 do), for RAID 5 and 6, healthy and with a
//!   member missing; every byte reads back and `check()` finds no parity mismatch, with
//!   gathering on and off. Replay with `RAIDKIT_SEED=N`.

mod common;

use common::*;
use engine::{Array, Level};
use member::{Call, Hooked, MemMember, Member, Op};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const CHUNK: u64 = 4 * KIB;

/// What steers a RAM member: its writes at or past `latch_from` block until `release`; counts
/// reads and writes blocked so far; writes fail while `writes_fail`.
#[derive(Debug)]
struct Latch {
    latch_from: u64,
    released: Mutex<bool>,
    wake: Condvar,
    blocked: AtomicU64,
    reads: AtomicU64,
    writes_fail: AtomicBool,
}

impl Latch {
    fn new(latch_from: u64) -> Arc<Latch> {
        Arc::new(Latch {
            latch_from,
            released: Mutex::new(false),
            wake: Condvar::new(),
            blocked: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes_fail: AtomicBool::new(false),
        })
    }

    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.wake.notify_all();
    }

    /// A RAM member of `len` bytes steered by `self`.
    fn member(self: &Arc<Latch>, name: &str, len: u64) -> Arc<dyn Member> {
        let latch = Arc::clone(self);
        let inner = Arc::new(MemMember::new(name, len).expect("mem"));
        Arc::new(Hooked::new(inner, move |call: &Call| latch.before(call)))
    }

    fn before(&self, call: &Call) -> std::io::Result<()> {
        if call.op == Op::Read {
            self.reads.fetch_add(1, Ordering::SeqCst);
        }
        if !call.is_write() {
            return Ok(());
        }
        if call.offset >= self.latch_from {
            self.blocked.fetch_add(1, Ordering::SeqCst);
            let mut released = self.released.lock().unwrap();
            while !*released {
                released = self.wake.wait(released).unwrap();
            }
        }
        if self.writes_fail.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("injected write error"));
        }
        Ok(())
    }
}

/// RAID 5 over 4 latch members (chunk 4 KiB: stripes of 12 KiB of data), writes blocked from
/// member offset 64 KiB (array offset 192 KiB) on.
fn latched_raid5() -> (Arc<Array>, Vec<Arc<Latch>>) {
    let latches: Vec<Arc<Latch>> = (0..4).map(|_| Latch::new(64 * KIB)).collect();
    let members: Vec<Arc<dyn Member>> = (latches.iter().enumerate())
        .map(|(i, l)| l.member(&format!("latch{i}"), 128 * KIB))
        .collect();
    let array = Arc::new(array_over(Level::Raid5, CHUNK, &members, &[]));
    // Long enough that only the scripted head ends the wait in time.
    array.set_gather_wait(Duration::from_secs(20));
    (array, latches)
}

fn pattern(len: u64, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Starts a write far away (array offset 192 KiB: latched) and waits until it blocks, so that
/// the array has a write in flight.
fn hold_a_write(
    array: &Arc<Array>,
    latches: &[Arc<Latch>],
) -> thread::JoinHandle<Result<(), engine::IoError>> {
    let held = Arc::clone(array);
    let handle = thread::spawn(move || held.write(192 * KIB, &pattern(12 * KIB, 9)));
    wait_until("the held write to block", || {
        latches.iter().any(|l| l.blocked.load(Ordering::SeqCst) > 0)
    });
    handle
}

#[test]
fn a_pending_tail_is_completed_by_the_next_write_without_reads() {
    let (array, latches) = latched_raid5();
    let held = hold_a_write(&array, &latches);
    let stripe = 12 * KIB;
    let mut model = vec![0u8; 256 * KIB as usize];
    let write = |model: &mut Vec<u8>, offset: u64, data: &[u8]| {
        model[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        array.write(offset, data).unwrap();
    };
    write(&mut model, 0, &pattern(6 * KIB, 1)); // the stream so far ends at 6 KiB
                                                // 6..26 KiB: head in stripe 0, stripe 1 whole, tail 24..26 KiB pending in stripe 2.
    let a = pattern(20 * KIB, 2);
    let writer = {
        let array = Arc::clone(&array);
        let a = a.clone();
        thread::spawn(move || array.write(6 * KIB, &a).unwrap())
    };
    model[6 * KIB as usize..26 * KIB as usize].copy_from_slice(&a);
    // The tail is pending once the writer's body (0..24 KiB) is on the members.
    let mut probe = vec![0u8; 18 * KIB as usize];
    wait_until("the writer's body", || {
        array.read(6 * KIB, &mut probe).unwrap();
        probe == a[..18 * KIB as usize]
    });
    thread::sleep(Duration::from_millis(20));
    assert!(!writer.is_finished(), "the tail waits for the next write");
    let reads_before: u64 = latches.iter().map(|l| l.reads.load(Ordering::SeqCst)).sum();
    // 26..36 KiB completes stripe 2 (24..36 KiB): written whole, nothing read.
    write(&mut model, 26 * KIB, &pattern(stripe - 2 * KIB, 3));
    let reads_after: u64 = latches.iter().map(|l| l.reads.load(Ordering::SeqCst)).sum();
    assert_eq!(
        reads_after, reads_before,
        "a whole-stripe write reads nothing"
    );
    writer
        .join()
        .expect("the tail's owner returns once the stripe is written");
    assert_eq!(array.gathered_stripes(), 1);
    for l in &latches {
        l.release();
    }
    held.join().unwrap().expect("the held write");
    model[192 * KIB as usize..204 * KIB as usize].copy_from_slice(&pattern(12 * KIB, 9));
    assert_reads(&array, &model, 0, 256 * KIB, "after gathering");
    assert_eq!(array.check().unwrap().mismatch_count, 0);
}

#[test]
fn a_stripe_written_in_three_requests_is_gathered_without_reads() {
    // The Linux client's case (issue 17): requests smaller than a stripe, so one stripe is cut
    // into a tail, a middle and a head.
    let (array, latches) = latched_raid5();
    let held = hold_a_write(&array, &latches);
    let mut model = vec![0u8; 256 * KIB as usize];
    model[..24 * KIB as usize].copy_from_slice(&pattern(24 * KIB, 1));
    array.write(0, &model[..24 * KIB as usize]).unwrap(); // the stream ends at stripe 2
    let piece = |offset: u64, len: u64, seed: u8, model: &mut Vec<u8>| {
        let data = pattern(len, seed);
        model[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        let array = Arc::clone(&array);
        thread::spawn(move || array.write(offset, &data))
    };
    let reads_before: u64 = latches.iter().map(|l| l.reads.load(Ordering::SeqCst)).sum();
    // Stripe 2 is 24..36 KiB: 24..28 (tail: waits), 28..32 (middle: joins it), 32..36 (head).
    let tail = piece(24 * KIB, 4 * KIB, 2, &mut model);
    wait_until("the tail to wait", || array.gather_waiting() == 1);
    let middle = piece(28 * KIB, 4 * KIB, 3, &mut model);
    wait_until("the middle to join it", || array.gather_waiting() == 2);
    piece(32 * KIB, 4 * KIB, 4, &mut model)
        .join()
        .unwrap()
        .expect("the head writes the whole stripe");
    tail.join().unwrap().expect("the tail's owner");
    middle.join().unwrap().expect("the middle");
    let reads_after: u64 = latches.iter().map(|l| l.reads.load(Ordering::SeqCst)).sum();
    assert_eq!(
        reads_after, reads_before,
        "three pieces, one whole stripe, no reads"
    );
    assert_eq!(array.gathered_stripes(), 1);
    for l in &latches {
        l.release();
    }
    held.join().unwrap().expect("the held write");
    model[192 * KIB as usize..204 * KIB as usize].copy_from_slice(&pattern(12 * KIB, 9));
    assert_reads(&array, &model, 0, 256 * KIB, "after a three-piece stripe");
    assert_eq!(array.check().unwrap().mismatch_count, 0);
}

#[test]
fn a_failed_whole_stripe_write_fails_both_writes() {
    let (array, latches) = latched_raid5();
    let held = hold_a_write(&array, &latches);
    array.write(0, &pattern(6 * KIB, 1)).unwrap();
    let writer = {
        let array = Arc::clone(&array);
        thread::spawn(move || array.write(6 * KIB, &pattern(20 * KIB, 2)))
    };
    let mut probe = vec![0u8; 18 * KIB as usize];
    let want = pattern(20 * KIB, 2);
    wait_until("the writer's body", || {
        array.read(6 * KIB, &mut probe).unwrap();
        probe == want[..18 * KIB as usize]
    });
    thread::sleep(Duration::from_millis(20));
    // Two members of a RAID 5 failing: the union cannot be written.
    latches[0].writes_fail.store(true, Ordering::SeqCst);
    latches[1].writes_fail.store(true, Ordering::SeqCst);
    let taker = array.write(26 * KIB, &pattern(10 * KIB, 3));
    assert!(taker.is_err(), "the taker sees the failure");
    let owner = writer.join().unwrap();
    assert!(owner.is_err(), "the tail's owner sees the same failure");
    for l in &latches {
        l.release();
    }
    let _ = held.join();
}

/// Threads take sequential requests of random, unaligned sizes from one counter and write a
/// pattern derived from the offset; afterwards every byte and all parity must be right.
fn stream(level: Level, n: usize, missing: &[usize], gather: bool, rng: &mut Rng) -> u64 {
    let members = mem_members(&member_sizes(n, CHUNK, 64));
    let array = Arc::new(array_over(level, CHUNK, &members, missing));
    if !gather {
        array.set_gather_wait(Duration::ZERO);
    }
    let size = array.size_bytes();
    let next = Arc::new(Mutex::new((0u64, rng.next_u64())));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (array, next) = (Arc::clone(&array), Arc::clone(&next));
            thread::spawn(move || loop {
                let (offset, len) = {
                    let mut next = next.lock().unwrap();
                    let (at, state) = *next;
                    let mut rng = Rng(state);
                    let len = (1 + rng.below(3 * CHUNK * 4)).min(size - at);
                    *next = (at + len, rng.next_u64());
                    (at, len)
                };
                if len == 0 {
                    return;
                }
                let data: Vec<u8> = (offset..offset + len)
                    .map(|i| (i * 7 + i / 4093) as u8)
                    .collect();
                array.write(offset, &data).expect("write");
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
    let model: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4093) as u8).collect();
    let what = format!("{level} n={n} missing {missing:?} gather {gather}");
    assert_reads(&array, &model, 0, size, &what);
    if missing.is_empty() {
        assert_eq!(array.check().unwrap().mismatch_count, 0, "{what}");
    }
    array.gathered_stripes()
}

#[test]
fn sequential_streams_read_back_and_keep_parity() {
    let mut gathered = 0;
    for seed in seeds() {
        with_seed("gather streams", seed, |rng| {
            for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5), (Level::Raid5, 3)] {
                for missing in [vec![], vec![1]] {
                    gathered += stream(level, n, &missing, true, rng);
                    assert_eq!(stream(level, n, &missing, false, rng), 0, "gathering off");
                }
            }
        });
    }
    // Eight threads on one stream: some adjacent writes meet (not asserted per run).
    println!("stripes gathered over all runs: {gathered}");
}
