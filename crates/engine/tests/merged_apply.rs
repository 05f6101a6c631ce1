//! A write-back apply of several pieces (`Array::write_applied`): on RAID 5/6 the pieces that
//! share a stripe are written together, each stripe read once and its parity written once.
//! Checked against a model and a plain array written piece by piece (the members hold the
//! same bytes: what a member's write covers between pieces is rewritten as it was), and by
//! counting member operations. Seeded (`RAIDKIT_SEED`).

mod common;

use std::sync::Arc;

use common::*;
use engine::{Array, DataSource, Level};
use member::Member;

/// Up to 24 disjoint, non-adjacent pieces of random bytes within `window` bytes from a
/// random offset, sorted (what an applier takes from the write-back buffer).
fn scattered(rng: &mut Rng, size: u64, window: u64, max_len: u64) -> Vec<(u64, Vec<u8>)> {
    let window = window.min(size - 1);
    let base = rng.below(size - window);
    let mut starts: Vec<u64> = (0..1 + rng.below(24))
        .map(|_| base + rng.below(window))
        .collect();
    starts.sort_unstable();
    let mut pieces: Vec<(u64, Vec<u8>)> = Vec::new();
    for at in starts {
        if pieces.last().is_some_and(|(o, d)| o + d.len() as u64 >= at) {
            continue;
        }
        let len = 1 + rng.below(max_len.min(size - at));
        let mut data = vec![0u8; len as usize];
        rng.fill(&mut data);
        pieces.push((at, data));
    }
    pieces
}

/// One source per piece (no journal is set: they only have to be well formed).
fn sources(pieces: &[(u64, &[u8])]) -> Vec<DataSource> {
    pieces
        .iter()
        .map(|&(offset, data)| DataSource {
            offset,
            len: data.len() as u64,
            seq: 1,
        })
        .collect()
}

fn apply(array: &Array, pieces: &[(u64, Vec<u8>)]) {
    let refs: Vec<(u64, &[u8])> = pieces.iter().map(|(o, d)| (*o, &d[..])).collect();
    array.write_applied(&refs, &sources(&refs)).expect("apply");
}

fn member_bytes(m: &Arc<dyn Member>) -> Vec<u8> {
    let mut buf = vec![0u8; m.len() as usize];
    m.read_at(&mut buf, 0).expect("member read");
    buf
}

/// Random scattered applies on every parity level and width: the array reads back the model,
/// its parity checks clean, and every member holds exactly what a plain array written piece
/// by piece holds (data and parity).
#[test]
fn a_merged_apply_writes_what_writing_each_piece_writes() {
    let cases = [
        (Level::Raid5, 3),
        (Level::Raid5, 4),
        (Level::Raid5, 6),
        (Level::Raid6, 4),
        (Level::Raid6, 5),
        (Level::Raid1, 2),
        (Level::Raid0, 3),
    ];
    each_case(
        "a_merged_apply_writes_what_writing_each_piece_writes",
        &cases,
        |rng, level, n| {
            // Up to 64 KiB chunks and 8 stripes: applies of more than one group of stripes
            // (about 1 MiB of scratch each) too.
            let chunk = 4096 << rng.below(5);
            let sizes = member_sizes(n, chunk, 24);
            let merged_members = mem_members(&sizes);
            let plain_members = mem_members(&sizes);
            let merged = array_over(level, chunk, &merged_members, &[]);
            let plain = array_over(level, chunk, &plain_members, &[]);
            let size = merged.size_bytes();
            let mut model = vec![0u8; size as usize];
            for _ in 0..40 {
                let stripes = 1 + rng.below(8);
                let window = stripes * chunk * n as u64;
                let pieces = scattered(rng, size, window, chunk + chunk / 2);
                assert!(!pieces.is_empty());
                apply(&merged, &pieces);
                for (offset, data) in &pieces {
                    plain.write(*offset, data).expect("plain write");
                    model[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
                }
            }
            assert_reads(&merged, &model, 0, size, &format!("{level} x{n}"));
            let report = merged.check().expect("check");
            assert_eq!(report.mismatch_count, 0, "{level} x{n}: {report:?}");
            for (role, (m, p)) in merged_members.iter().zip(&plain_members).enumerate() {
                let (m, p) = (member_bytes(m), member_bytes(p));
                let at = testsupport::first_difference(&m, &p);
                assert!(
                    at.is_none(),
                    "{level} x{n}, chunk {chunk}: member {role} differs from the plain array's at byte {at:?}"
                );
            }
        },
    );
}

/// With a member missing the pieces are written one by one by the general (degraded) write:
/// still every byte reads back.
#[test]
fn a_degraded_merged_apply_reads_back() {
    each_case(
        "a_degraded_merged_apply_reads_back",
        &[(Level::Raid5, 4), (Level::Raid6, 5)],
        |rng, level, n| {
            let chunk = 8192;
            let members = mem_members(&member_sizes(n, chunk, 16));
            let missing = [rng.below(n as u64) as usize];
            let array = array_over(level, chunk, &members, &missing);
            let size = array.size_bytes();
            let mut model = vec![0u8; size as usize];
            for _ in 0..40 {
                let pieces = scattered(rng, size, 3 * chunk * n as u64, chunk);
                apply(&array, &pieces);
                for (offset, data) in &pieces {
                    model[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
                }
            }
            assert_reads(
                &array,
                &model,
                0,
                size,
                &format!("{level} x{n}, {missing:?} missing"),
            );
        },
    );
}

/// Member (reads, writes) the apply of `pieces` issued (merged adjacent ranges count once).
fn ops_of(array: &Array, pieces: &[(u64, Vec<u8>)]) -> (u64, u64) {
    let before = array.member_io_stats();
    apply(array, pieces);
    let after = array.member_io_stats();
    let sum = |f: fn(&iostats::IoSnapshot) -> u64| {
        let total = |s: &[iostats::IoSnapshot]| s.iter().map(f).sum::<u64>();
        total(&after) - total(&before)
    };
    (sum(|s| s.read.ops), sum(|s| s.write.ops))
}

/// Pieces sharing a stripe cost one read per member and one parity write, not one
/// read-modify-write each; pieces covering a stripe cost no read at all. RAID 5 of 4, 64 KiB
/// chunks (stripe: 3 data chunks); data chunk i of stripe 0 is array bytes i·64K..(i+1)·64K.
#[test]
fn pieces_sharing_a_stripe_read_it_once() {
    let chunk = 64 << 10;
    let members = mem_members(&member_sizes(4, chunk, 8));
    let array = array_over(Level::Raid5, chunk, &members, &[]);
    let piece = |at: u64| (at, vec![0x5a; 4096]);
    // Two pieces in one chunk, 4 KiB apart: read-modify-write over their envelope (12 KiB of
    // data and of parity read, against 3 × 12 KiB for a reconstruct-write): one read of the
    // data member, one of P; one write of the data member's 12 KiB (the pieces and the 4 KiB
    // between them, rewritten as read) and one of P.
    assert_eq!(ops_of(&array, &[piece(0), piece(8192)]), (2, 2));
    // Two pieces at each end of every data chunk: reconstruct-write over the whole chunk
    // width, one read per data member (3), one write per member (each data chunk whole, and
    // P). Written one by one, each would be a read-modify-write: 12 reads, 12 writes.
    let ends: Vec<_> = (0..3)
        .flat_map(|i| [piece(i * chunk), piece(i * chunk + chunk - 4096)])
        .collect();
    assert_eq!(ops_of(&array, &ends), (3, 4));
    // Every other 4 KiB of the second stripe (8 pieces per data chunk, 60 KiB envelope):
    // reconstruct-write, every data member read once.
    let stripe = 3 * chunk;
    let even: Vec<_> = (0..stripe / 8192)
        .map(|i| piece(stripe + i * 8192))
        .collect();
    let (reads, writes) = ops_of(&array, &even);
    assert_eq!(
        reads, 3,
        "every data member read once for 24 scattered pieces"
    );
    assert_eq!(writes, 4, "one write per member for 24 scattered pieces");
    // The third stripe whole, as 48 contiguous 4 KiB pieces: a full-stripe write, nothing
    // read; adjacent writes of a member merge into one request.
    let full: Vec<_> = (0..stripe / 4096)
        .map(|i| piece(2 * stripe + i * 4096))
        .collect();
    assert_eq!(ops_of(&array, &full), (0, 4));
    let model_check = array.check().expect("check");
    assert_eq!(model_check.mismatch_count, 0, "{model_check:?}");
}

/// Counts a member's calls in progress at once (reads and writes), over all the members it is
/// shared by, and makes each take `delay`.
#[derive(Default)]
struct InFlight {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

fn timed_members(
    n: usize,
    len: u64,
    delay: std::time::Duration,
    seen: &Arc<InFlight>,
) -> Vec<Arc<dyn Member>> {
    use std::sync::atomic::Ordering::SeqCst;
    (0..n)
        .map(|i| {
            let inner = Arc::new(member::MemMember::new(&format!("m{i}"), len).expect("mem"));
            let seen = Arc::clone(seen);
            Arc::new(member::Hooked::new(inner, move |call: &member::Call| {
                if matches!(call.op, member::Op::Read | member::Op::Write) {
                    let now = seen.now.fetch_add(1, SeqCst) + 1;
                    seen.most.fetch_max(now, SeqCst);
                    std::thread::sleep(delay);
                    seen.now.fetch_sub(1, SeqCst);
                }
                Ok(())
            })) as Arc<dyn Member>
        })
        .collect()
}

/// On members as slow as disks (2 ms a call), an apply's reads and writes of several stripes
/// are issued at once (a disk's queue can then reorder them), not one after the other; on RAM
/// members they stay on the calling thread. Before, every call of a batch whose member shares
/// were under the fan-out threshold (1 MiB) ran in turn: at most one call in flight.
#[test]
fn an_apply_on_slow_members_issues_its_operations_at_once() {
    let chunk = 64 << 10;
    let stripe = 3 * chunk;
    // A piece at each end of every data chunk of three stripes: per stripe three reads and
    // four writes.
    let pieces: Vec<(u64, Vec<u8>)> = (0..3)
        .flat_map(|s| {
            (0..3).flat_map(move |i| {
                let at = s * stripe + i * chunk;
                [
                    (at, vec![0x33; 4096]),
                    (at + chunk - 4096, vec![0x44; 4096]),
                ]
            })
        })
        .collect();
    for (delay_ms, concurrent) in [(2, true), (0, false)] {
        let seen = Arc::new(InFlight::default());
        let sizes = member_sizes(4, chunk, 8);
        let members = timed_members(
            4,
            sizes[0],
            std::time::Duration::from_millis(delay_ms),
            &seen,
        );
        let array = array_over(Level::Raid5, chunk, &members, &[]);
        // The first apply measures the members' speed; the second is watched.
        apply(&array, &pieces);
        seen.most.store(0, std::sync::atomic::Ordering::SeqCst);
        let moved: Vec<(u64, Vec<u8>)> = pieces
            .iter()
            .map(|(at, d)| (*at + 4096, d.iter().map(|b| b ^ 0xff).collect()))
            .collect();
        apply(&array, &moved);
        let most = seen.most.load(std::sync::atomic::Ordering::SeqCst);
        if concurrent {
            assert!(
                most >= 4,
                "{delay_ms} ms members: at most {most} calls at once"
            );
        } else {
            assert_eq!(most, 1, "RAM members: {most} calls at once");
        }
        for (at, data) in &moved {
            let mut back = vec![0u8; data.len()];
            array.read(*at, &mut back).expect("read");
            assert_eq!(&back, data, "piece at {at}");
        }
        let check = array.check().expect("check");
        assert_eq!(check.mismatch_count, 0, "{check:?}");
    }
}

/// A disk-model member that records the threads its calls are made on: through `read_at`
/// (a call on the thread that waits for it) or `start` (queued in the model, waited for later).
#[derive(Debug)]
struct Watched {
    inner: member::ModelMember,
    calls: std::sync::Mutex<Vec<(&'static str, std::thread::ThreadId)>>,
}

impl Watched {
    fn note(&self, how: &'static str) {
        let mut calls = self.calls.lock().expect("calls");
        calls.push((how, std::thread::current().id()));
    }
}

impl Member for Watched {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.note("read_at");
        self.inner.read_at(buf, offset)
    }
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> std::io::Result<()> {
        self.note("read_at");
        self.inner.read_vectored_at(bufs, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.inner.write_zeroes(offset, len)
    }
    fn start(&self, call: member::StartCall<'_>) -> Option<member::Started> {
        let started = self.inner.start(call);
        if started.is_some() {
            self.note("start");
        }
        started
    }
}

/// A read over four disk-model members (`sim:hdd7200`, slow enough to be issued at once) is
/// queued on every member from the calling thread (`Member::start`), with no thread spawned
/// per member call: on the loaded 2-core machine a new thread waited a scheduler slice
/// (~3.5 ms) before its call began, in one sequential 1 MiB request of eight, and `raidkit
/// bench` read such a RAID 0 at 0.74x the rate `raidkit plan` models (0.99x after). Before,
/// each member's read ran on a thread of its own (`read_at` on four other threads).
#[test]
fn reads_of_disk_models_are_queued_from_the_calling_thread() {
    let chunk = 128 << 10;
    let members: Vec<Arc<Watched>> = (0..4)
        .map(|i: u64| {
            Arc::new(Watched {
                inner: member::ModelMember::open(&format!("sim:hdd7200:{}M", 64 + i))
                    .expect("model member"),
                calls: Default::default(),
            })
        })
        .collect();
    let dyn_members: Vec<Arc<dyn Member>> = members
        .iter()
        .map(|m| Arc::clone(m) as Arc<dyn Member>)
        .collect();
    let array = array_over(Level::Raid0, chunk, &dyn_members, &[]);
    let mut buf = vec![0u8; 4 * chunk as usize];
    // Reads far apart first: the members' measured speed (milliseconds) marks them as disks.
    for i in 1..=4u64 {
        array.read(i * 100 * 4 * chunk, &mut buf).expect("read");
    }
    for m in &members {
        m.calls.lock().expect("calls").clear();
    }
    let here = std::thread::current().id();
    let began = std::time::Instant::now();
    array.read(0, &mut buf).expect("read");
    let took = began.elapsed();
    for m in &members {
        let calls = m.calls.lock().expect("calls").clone();
        assert_eq!(
            calls,
            vec![("start", here)],
            "{}: its share of one read (took {took:?})",
            m.name()
        );
    }
}
