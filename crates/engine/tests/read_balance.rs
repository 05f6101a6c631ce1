//! Which copy reads go to (RAID 1, 10), members judged slow (every redundant level), and
//! write-mostly members, over members that answer at different speeds
//! (`member::FaultyMember::set_delay`).

mod common;

use common::*;
use engine::{Array, Level, ReadBalance, SlowPolicy};
use member::{FaultControl, FaultyMember, MemMember, Member};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHUNK: u64 = 64 * KIB;

/// RAM members of `rows` chunks; the roles in `slow` behind a `FaultyMember` whose delay the
/// returned controls set.
fn members(n: usize, rows: u64, slow: &[usize]) -> (Vec<Arc<dyn Member>>, Vec<FaultControl>) {
    let mut controls = Vec::new();
    let members = (0..n)
        .map(|role| {
            let m: Arc<dyn Member> =
                Arc::new(MemMember::new(&format!("mem{role}"), rows * CHUNK).unwrap());
            if !slow.contains(&role) {
                return m;
            }
            let faulty = FaultyMember::new(m);
            controls.push(faulty.control());
            Arc::new(faulty) as Arc<dyn Member>
        })
        .collect();
    (members, controls)
}

/// Member reads per role so far.
fn reads(array: &Array) -> Vec<u64> {
    array.member_io_stats().iter().map(|s| s.read.ops).collect()
}

fn delta(after: &[u64], before: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// `count` random 4 KiB reads from `threads` threads at once (queue depth `threads`).
fn random_reads(array: &Array, rng: &mut Rng, threads: usize, count: usize) {
    let blocks = array.size_bytes() / 4096;
    let offsets: Vec<u64> = (0..count).map(|_| rng.below(blocks) * 4096).collect();
    std::thread::scope(|s| {
        for part in offsets.chunks(count.div_ceil(threads)) {
            s.spawn(move || {
                let mut buf = vec![0u8; 4096];
                for &at in part {
                    array.read(at, &mut buf).unwrap();
                }
            });
        }
    });
}

fn quick_policy() -> SlowPolicy {
    SlowPolicy {
        window: Duration::from_millis(40),
        ratio: 4,
        min_excess: Duration::from_micros(500),
        windows_to_mark: 2,
        windows_to_clear: 2,
    }
}

/// Reads (and, with `write`, writes) random 4 KiB blocks at queue depth 4 until `done` says
/// so or `limit` passes; true when `done` did.
fn load_until(
    array: &Array,
    rng: &mut Rng,
    write: bool,
    limit: Duration,
    done: impl Fn() -> bool,
) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        random_reads(array, rng, 4, 16);
        if write {
            let at = rng.below(array.size_bytes() / 4096) * 4096;
            array.write(at, &[1u8; 4096]).unwrap();
        }
        if done() {
            return true;
        }
    }
    false
}

/// Whether `role` gets at least one in `share` of a batch of random reads within 20 s.
fn takes_share_again(array: &Array, rng: &mut Rng, role: usize, share: usize) -> bool {
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        let before = reads(array);
        random_reads(array, rng, 4, 200);
        let got = delta(&reads(array), &before);
        if got[role] as usize * share >= got.iter().sum::<u64>() as usize {
            return true;
        }
    }
    false
}

#[test]
fn raid1_random_reads_follow_the_fast_leg() {
    for_each_seed("raid1_random_reads_follow_the_fast_leg", |rng| {
        let (members, slow) = members(2, 64, &[1]);
        slow[0].set_delay(Duration::from_millis(2));
        let array = array_over(Level::Raid1, CHUNK, &members, &[]);
        for threads in [1, 4, 16] {
            let before = reads(&array);
            random_reads(&array, rng, threads, 400);
            let got = delta(&reads(&array), &before);
            // The slow leg gets its first measurements and a probe every 100 ms at most.
            assert!(
                got[1] * 20 <= got[0],
                "queue depth {threads}: {} reads on the RAM leg, {} on the 2 ms leg",
                got[0],
                got[1]
            );
        }
    });
}

#[test]
fn equal_legs_share_random_reads_and_keep_a_sequential_stream_on_one_leg() {
    for_each_seed("equal_legs_share_random_reads", |rng| {
        let (members, _) = members(2, 64, &[]);
        let array = array_over(Level::Raid1, CHUNK, &members, &[]);
        let before = reads(&array);
        random_reads(&array, rng, 4, 800);
        let got = delta(&reads(&array), &before);
        assert!(
            got.iter().all(|&r| r >= 200),
            "random reads on equal legs: {got:?} (read latency estimates {:?} us)",
            [0, 1].map(|role| array.member_speed(role).read_latency_us)
        );
        // A sequential stream of 4 KiB reads (queue depth 1) across 32 chunks: one leg, but
        // for the probes that keep the other measured (one per 100 ms at most, and one per
        // PROBE_AFTER_PASSES reads it loses for its cost: under CPU load a RAM leg's
        // estimate can be raised by a preempted read).
        let before = reads(&array);
        let mut buf = vec![0u8; 4096];
        let start = Instant::now();
        let count = 32 * CHUNK / 4096;
        for i in 0..count {
            array.read(i * 4096, &mut buf).unwrap();
        }
        let probes_max = 1
            + start.elapsed().as_millis() as u64 / 100
            + count / u64::from(engine::PROBE_AFTER_PASSES);
        let got = delta(&reads(&array), &before);
        let (most, least) = (got[0].max(got[1]), got[0].min(got[1]));
        assert!(
            least <= probes_max && most + least == count,
            "a sequential stream on equal legs: {got:?} (probes at most {probes_max})"
        );
    });
}

#[test]
fn raid10_sequential_reads_stay_on_one_member_of_each_pair() {
    let (members, _) = members(4, 64, &[]);
    let array = array_over(Level::Raid10, CHUNK, &members, &[]);
    let mut buf = vec![0u8; 16 * 1024];
    let start = Instant::now();
    for i in 0..(64 * CHUNK / buf.len() as u64) {
        array.read(i * buf.len() as u64, &mut buf).unwrap();
    }
    let probes_max = 2 * (1 + start.elapsed().as_millis() as u64 / 100);
    let got = reads(&array);
    // Pairs (0, 1) and (2, 3): each pair's stream on one of its members.
    for pair in [[0, 1], [2, 3]] {
        let least = got[pair[0]].min(got[pair[1]]);
        assert!(least <= probes_max, "pair {pair:?}: {got:?}");
    }
}

#[test]
fn a_large_read_is_cut_into_runs_of_the_fan_out_threshold_over_the_copies() {
    let (members, _) = members(3, 64, &[]);
    let array = array_over(Level::Raid1, CHUNK, &members, &[]);
    array.set_fanout_min_bytes(8 * CHUNK);
    let mut buf = vec![0u8; (24 * CHUNK) as usize];
    array.read(0, &mut buf).unwrap();
    // Each copy reads one contiguous run (merged into one request) of 8 chunks.
    let ops: Vec<u64> = reads(&array);
    let bytes: Vec<u64> = (array.member_io_stats().iter())
        .map(|s| s.read.bytes)
        .collect();
    assert_eq!(ops, [1, 1, 1], "one merged read per copy");
    assert_eq!(bytes, [8 * CHUNK; 3]);
}

#[test]
fn write_mostly_members_are_read_only_when_no_other_copy_can_serve() {
    for_each_seed("write_mostly_members", |rng| {
        let (members, _) = members(3, 64, &[]);
        let array = array_over(Level::Raid1, CHUNK, &members, &[]);
        array.set_write_mostly(0, true);
        array.set_write_mostly(2, true);
        random_reads(&array, rng, 4, 300);
        let got = reads(&array);
        assert_eq!((got[0], got[2]), (0, 0), "{got:?}");
        assert_eq!(got[1], 300);
        assert!(array.member_speed(0).write_mostly && !array.member_speed(1).write_mostly);
        // Writes still reach every copy.
        array.write(0, &[9u8; 4096]).unwrap();
        let writes: Vec<u64> = (array.member_io_stats().iter())
            .map(|s| s.write.ops)
            .collect();
        assert_eq!(writes, [1, 1, 1]);
        // The only other copy gone: the write-mostly ones serve.
        array.fail_member(1);
        let before = reads(&array);
        random_reads(&array, rng, 4, 100);
        let got = delta(&reads(&array), &before);
        assert_eq!(got[0] + got[2], 100, "{got:?}");
        let mut buf = vec![0u8; 4096];
        array.read(0, &mut buf).unwrap();
        assert_eq!(buf, vec![9u8; 4096]);
    });
}

#[test]
fn a_slow_mirror_leg_is_judged_slow_read_around_and_trusted_again_when_it_recovers() {
    for_each_seed("a_slow_mirror_leg", |rng| {
        let (members, slow) = members(3, 64, &[2]);
        let array = array_over(Level::Raid1, CHUNK, &members, &[]);
        array.set_slow_policy(quick_policy());
        slow[0].set_delay(Duration::from_millis(3));
        let judged = load_until(&array, rng, true, Duration::from_secs(20), || {
            array.member_speed(2).slow
        });
        assert!(judged, "a member 3 ms slower than RAM was not judged slow");
        let speed = array.member_speed(2);
        assert!(
            speed.latency_us.unwrap() >= 2000 && speed.peers_latency_us.unwrap() < 500,
            "{speed:?}"
        );
        assert!(!array.member_speed(0).slow && !array.member_speed(1).slow);
        // Read around it: only its probes reach it.
        let before = reads(&array);
        let start = Instant::now();
        random_reads(&array, rng, 4, 400);
        let got = delta(&reads(&array), &before);
        let probes_max = 1 + start.elapsed().as_millis() as u64 / 4;
        assert!(
            got[2] <= probes_max,
            "{got:?} (probes at most {probes_max})"
        );
        // It recovers: its probes (reads only, no writes) show it, and it is read again.
        slow[0].set_delay(Duration::ZERO);
        let cleared = load_until(&array, rng, false, Duration::from_secs(20), || {
            !array.member_speed(2).slow
        });
        assert!(cleared, "a recovered member stayed judged slow");
        // Its probes bring its latency estimate down: it takes its share again.
        assert!(
            takes_share_again(&array, rng, 2, 3),
            "the recovered member is not read again"
        );
    });
}

#[test]
fn raid5_and_raid6_reconstruct_around_a_slow_member_and_return_to_it() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        for_each_seed("raid56_reconstruct_around_a_slow_member", |rng| {
            let (members, slow) = members(n, 64, &[1]);
            let array = array_over(level, CHUNK, &members, &[]);
            array.set_slow_policy(quick_policy());
            let mut model = vec![0u8; array.size_bytes() as usize];
            rng.fill(&mut model);
            array.write(0, &model).unwrap();
            slow[0].set_delay(Duration::from_millis(3));
            let judged = load_until(&array, rng, true, Duration::from_secs(20), || {
                array.member_speed(1).slow
            });
            assert!(judged, "{level}: the 3 ms member was not judged slow");
            for role in (0..n).filter(|&r| r != 1) {
                assert!(!array.member_speed(role).slow, "{level}: role {role}");
            }
            // Whole-array reads: the slow member's chunks are rebuilt from the others, and
            // right (the writes of load_until wrote ones; re-read the model's view).
            array.write(0, &model).unwrap();
            let before = reads(&array);
            let start = Instant::now();
            let mut buf = vec![0u8; (4 * CHUNK) as usize];
            for at in (0..array.size_bytes()).step_by(buf.len()) {
                let len = buf.len().min((array.size_bytes() - at) as usize);
                array.read(at, &mut buf[..len]).unwrap();
                assert!(
                    buf[..len] == model[at as usize..at as usize + len],
                    "{level}: data at {at}"
                );
            }
            let got = delta(&reads(&array), &before);
            let probes_max = 1 + start.elapsed().as_millis() as u64 / 4;
            assert!(
                got[1] <= probes_max,
                "{level}: reads {got:?} (probes at most {probes_max})"
            );
            slow[0].set_delay(Duration::ZERO);
            let cleared = load_until(&array, rng, false, Duration::from_secs(20), || {
                !array.member_speed(1).slow
            });
            assert!(cleared, "{level}: the recovered member stayed judged slow");
            assert!(
                takes_share_again(&array, rng, 1, n * 2),
                "{level}: the recovered member is not read again"
            );
        });
    }
}

#[test]
fn round_robin_and_first_weigh_nothing_measured_and_still_read_write_mostly_members_last() {
    for_each_seed("read_balance_modes", |rng| {
        // Leg 1 is 2 ms slower: the latency balance avoids it ...
        let (members, slow) = members(3, 64, &[1]);
        slow[0].set_delay(Duration::from_millis(2));
        let array = array_over(Level::Raid1, CHUNK, &members, &[]);
        assert_eq!(array.read_balance(), ReadBalance::Latency);
        // ... round-robin gives each copy the chunks at its turn: a third each, near enough.
        array.set_read_balance(ReadBalance::RoundRobin);
        assert_eq!(array.read_balance(), ReadBalance::RoundRobin);
        let before = reads(&array);
        random_reads(&array, rng, 4, 300);
        let got = delta(&reads(&array), &before);
        assert!(got.iter().all(|&r| r >= 50), "round-robin: {got:?}");
        // The same block from the same copy every time (the turn is the chunk's).
        let before = reads(&array);
        let mut buf = vec![0u8; 4096];
        (0..20).for_each(|_| array.read(5 * CHUNK, &mut buf).unwrap());
        let got = delta(&reads(&array), &before);
        assert_eq!(got.iter().filter(|&&r| r > 0).count(), 1, "{got:?}");
        // first: every read from role 0; write-mostly on it moves them to role 1 (slow as it
        // is); role 1 failed, role 2 serves (role 0 still last).
        array.set_read_balance(ReadBalance::First);
        let before = reads(&array);
        random_reads(&array, rng, 4, 100);
        assert_eq!(delta(&reads(&array), &before), [100, 0, 0]);
        array.set_write_mostly(0, true);
        let before = reads(&array);
        random_reads(&array, rng, 4, 20);
        assert_eq!(delta(&reads(&array), &before), [0, 20, 0]);
        array.fail_member(1);
        let before = reads(&array);
        random_reads(&array, rng, 4, 20);
        assert_eq!(delta(&reads(&array), &before), [0, 0, 20]);
        // Back to latency: the 2 ms leg is out, so the RAM ones serve; write-mostly role 0
        // only when no other copy can.
        array.set_read_balance(ReadBalance::Latency);
        let before = reads(&array);
        random_reads(&array, rng, 4, 50);
        assert_eq!(delta(&reads(&array), &before), [0, 0, 50]);
    });
}

#[test]
fn raid5_reads_in_place_around_nothing_when_the_read_balance_is_off() {
    for_each_seed("raid5_read_balance_off", |rng| {
        let (members, slow) = members(4, 64, &[1]);
        let array = array_over(Level::Raid5, CHUNK, &members, &[]);
        array.set_slow_policy(quick_policy());
        slow[0].set_delay(Duration::from_millis(3));
        let judged = load_until(&array, rng, true, Duration::from_secs(20), || {
            array.member_speed(1).slow
        });
        assert!(judged, "the 3 ms member was not judged slow");
        array.set_read_balance(ReadBalance::First);
        // A whole stripe's data read: each data member read once, the slow one included.
        let before = reads(&array);
        let mut buf = vec![0u8; (3 * CHUNK) as usize];
        array.read(0, &mut buf).unwrap();
        let got = delta(&reads(&array), &before);
        assert_eq!(got.iter().sum::<u64>(), 3, "{got:?}");
        assert_eq!(got[1], 1, "the slow member is read in place: {got:?}");
        assert!(array.member_speed(1).slow, "still judged and reported slow");
    });
}
