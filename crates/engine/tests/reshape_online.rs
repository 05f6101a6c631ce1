//! The online reshape's model test (docs/DESIGN.md "Reshape", "Two geometries and a
//! position"): an array of RAM members filled with a seeded pattern is reshaped to more members
//! by `OnlineReshape` while client threads read, write, trim, write zeroes and flush at random
//! (half of them near the position, where the windows move), each checked against a shadow
//! model (a flat byte image). The mover pauses between a window's copy and its record, so a
//! client request the window exclusion let through would land in a window already read: the
//! test then finds the write lost. Afterwards every byte reads as the shadow says, through the
//! online array and through a plain array of the new geometry; the grown part reads zero; RAID
//! 5/6 parity is consistent and every byte reads the same with any one member left out.

mod common;

use common::Rng;
use engine::reshape::{ArrayTarget, BackupArea, OnlineReshape, ReshapePlan};
use engine::{Array, ArrayConfig, Geometry, Level};
use member::{MemMember, Member};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

const CHUNK: u64 = 4096;
const CLIENTS: usize = 3;
const OPS_MIN: usize = 300;

fn geometry(level: Level, members: usize, rows: u64) -> Geometry {
    Geometry::new(level, CHUNK, &vec![rows * CHUNK; members]).unwrap()
}

fn array(level: Level, members: Vec<Option<Arc<dyn Member>>>, rows: u64) -> Array {
    let count = members.len();
    Array::new(
        ArrayConfig {
            level,
            chunk_bytes: CHUNK,
            member_count: count,
            member_data_bytes: vec![rows * CHUNK; count],
        },
        members,
    )
    .unwrap()
}

/// The test's own range lock: client requests that overlap are serialized, so the shadow's
/// order is the array's. (It does not involve the mover: the exclusion under test is
/// `OnlineReshape`'s.)
#[derive(Default)]
struct Ranges {
    held: Mutex<Vec<(u64, u64)>>,
    freed: Condvar,
}

impl Ranges {
    fn with<T>(&self, start: u64, end: u64, body: impl FnOnce() -> T) -> T {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        while held.iter().any(|&(s, e)| s < end && start < e) {
            held = self.freed.wait(held).unwrap_or_else(|p| p.into_inner());
        }
        held.push((start, end));
        drop(held);
        // Released however `body` ends: a client's failed check must fail the test, not
        // leave the others waiting for its range.
        struct Release<'a>(&'a Ranges, (u64, u64));
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                let mut held = self.0.held.lock().unwrap_or_else(|p| p.into_inner());
                let at = held.iter().position(|&r| r == self.1).unwrap();
                held.swap_remove(at);
                drop(held);
                self.0.freed.notify_all();
            }
        }
        let _release = Release(self, (start, end));
        body()
    }
}

/// One client's requests until the mover is done and it made at least `OPS_MIN`.
fn client(
    online: &OnlineReshape,
    shadow: &Mutex<Vec<u8>>,
    ranges: &Ranges,
    done: &AtomicBool,
    seed: u64,
    what: &str,
) -> usize {
    let mut rng = Rng(seed);
    let size = online.size_bytes();
    let mut ops = 0;
    while ops < OPS_MIN || !done.load(Ordering::SeqCst) {
        ops += 1;
        let len = 1 + rng.below(4 * CHUNK).min(size - 1);
        let offset = if rng.chance(50) {
            // Near the position: where the window moves.
            let p = online.position().min(size);
            let lo = p.saturating_sub(2 * CHUNK);
            (lo + rng.below(8 * CHUNK)).min(size - len)
        } else {
            rng.below(size - len + 1)
        };
        let end = offset + len;
        let range = offset as usize..end as usize;
        match rng.below(10) {
            0..=3 => ranges.with(offset, end, || {
                let data = rng.bytes(len as usize);
                online.write(offset, &data).unwrap();
                shadow.lock().unwrap_or_else(|p| p.into_inner())[range].copy_from_slice(&data);
            }),
            4..=7 => ranges.with(offset, end, || {
                let mut got = vec![0u8; len as usize];
                online.read(offset, &mut got).unwrap();
                let want = &shadow.lock().unwrap_or_else(|p| p.into_inner())[range];
                if let Some(at) = testsupport::first_difference(&got, want) {
                    panic!(
                        "{what}: read {offset}+{len} at position {}: byte {} reads {:#04x}, the \
                         model says {:#04x}",
                        online.position(),
                        offset + at as u64,
                        got[at],
                        want[at]
                    );
                }
            }),
            8 => ranges.with(offset, end, || {
                if rng.chance(50) {
                    online.trim(offset, len).unwrap();
                } else {
                    online.write_zeroes(offset, len).unwrap();
                }
                shadow.lock().unwrap_or_else(|p| p.into_inner())[range].fill(0);
            }),
            _ => online.flush().unwrap(),
        }
    }
    ops
}

fn case(rng: &mut Rng, level: Level, n: usize, m: usize, missing: Option<usize>) {
    let rows = 24 + rng.below(24);
    let window = CHUNK * (1 + rng.below(8));
    let what =
        format!("{level} {n} -> {m} members, {rows} rows, window {window}, missing {missing:?}");
    let mem = |name: String, len: u64| -> Arc<dyn Member> {
        Arc::new(MemMember::new(&name, len).unwrap())
    };
    let new_geometry = geometry(level, m, rows);
    let data: Vec<Arc<dyn Member>> = (0..m).map(|r| mem(format!("d{r}"), rows * CHUNK)).collect();
    let backup_bytes = BackupArea::bytes_per_member(&new_geometry);
    let backup: Vec<Arc<dyn Member>> = (0..m).map(|r| mem(format!("b{r}"), backup_bytes)).collect();
    let present = |r: usize| missing != Some(r);
    let of = |set: &[Arc<dyn Member>], count: usize| -> Vec<Option<Arc<dyn Member>>> {
        (0..count)
            .map(|r| present(r).then(|| set[r].clone()))
            .collect()
    };

    let old = array(level, of(&data, n), rows);
    let pattern = rng.bytes(old.size_bytes() as usize);
    old.write(0, &pattern).unwrap();
    drop(old);

    let recorded = Arc::new(AtomicU64::new(0));
    let records = recorded.clone();
    let target = ArrayTarget {
        old: array(level, of(&data, n), rows),
        new: array(level, of(&data, m), rows),
        backup: BackupArea::new(of(&backup, m), &new_geometry, 3),
        recorder: Box::new(move |p| {
            // The window is still closed to clients here: a request let into it would be lost.
            std::thread::sleep(Duration::from_millis(1));
            records.store(p, Ordering::SeqCst);
            Ok(())
        }),
        used: None,
    };
    let plan = ReshapePlan::new(geometry(level, n, rows), new_geometry, window).unwrap();
    let online = OnlineReshape::start(plan, target, 0).unwrap();
    let end = online.end();
    let shadow = Mutex::new(pattern);
    let ranges = Ranges::default();
    let done = AtomicBool::new(false);
    let seeds: Vec<u64> = (0..CLIENTS).map(|_| rng.next_u64()).collect();
    let (windows, ops) = std::thread::scope(|s| {
        let clients: Vec<_> = seeds
            .iter()
            .map(|&seed| {
                let (online, shadow, ranges, done, what) =
                    (&online, &shadow, &ranges, &done, &what);
                s.spawn(move || client(online, shadow, ranges, done, seed, what))
            })
            .collect();
        let mut buf = Vec::new();
        let mut windows = 0;
        let mut last = 0;
        // Stop the clients however the mover ends (a panic below must not leave them running).
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let stop = Done(&done);
        while let Some(p) = online.step(&mut buf).unwrap() {
            assert!(p > last, "{what}: the position went from {last} to {p}");
            assert_eq!(
                recorded.load(Ordering::SeqCst),
                p,
                "{what}: {p} not recorded"
            );
            last = p;
            windows += 1;
        }
        drop(stop);
        let ops: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
        (windows, ops)
    });
    assert!(windows > 1, "{what}: {windows} windows");
    assert!(ops >= CLIENTS * OPS_MIN);
    assert_eq!(online.position(), end);
    assert_eq!(recorded.load(Ordering::SeqCst), end);
    let shadow = shadow.into_inner().unwrap();

    let mut got = vec![0u8; shadow.len()];
    online.read(0, &mut got).unwrap();
    if let Some(at) = testsupport::first_difference(&got, &shadow) {
        panic!(
            "{what}: after the move, byte {at} reads {:#04x}, the model says {:#04x}",
            got[at], shadow[at]
        );
    }

    // The new layout alone, as the array is once the reshape is finished.
    let mut leave_out: Vec<Option<usize>> = vec![None];
    if level != Level::Raid0 && (missing.is_none() || level == Level::Raid6) {
        leave_out.extend((0..m).filter(|&r| present(r)).map(Some));
    }
    for out in leave_out {
        let members = (0..m)
            .map(|r| (present(r) && out != Some(r)).then(|| data[r].clone()))
            .collect();
        let new = array(level, members, rows);
        if out.is_none() && missing.is_none() && level != Level::Raid0 {
            let report = new.check().unwrap();
            assert!(
                report.is_consistent(),
                "{what}: parity disagrees: {report:?}"
            );
        }
        let mut got = vec![0u8; end as usize];
        new.read(0, &mut got).unwrap();
        if let Some(at) = testsupport::first_difference(&got[..shadow.len()], &shadow) {
            panic!(
                "{what}, role {out:?} left out: byte {at} reads {:#04x}, the model says {:#04x}",
                got[at], shadow[at]
            );
        }
        if let Some(at) = got[shadow.len()..].iter().position(|&b| b != 0) {
            panic!(
                "{what}, role {out:?} left out: grown byte {} is not zero",
                shadow.len() + at
            );
        }
    }
}

#[test]
fn raid0_clients_and_the_mover_agree_with_the_model() {
    common::each_seed("raid0_clients_and_the_mover_agree_with_the_model", |rng| {
        case(rng, Level::Raid0, 2, 3, None);
        case(rng, Level::Raid0, 3, 5, None);
    });
}

#[test]
fn raid5_clients_and_the_mover_agree_with_the_model() {
    common::each_seed("raid5_clients_and_the_mover_agree_with_the_model", |rng| {
        case(rng, Level::Raid5, 3, 4, None);
        case(rng, Level::Raid5, 4, 6, None);
    });
}

#[test]
fn raid6_clients_and_the_mover_agree_with_the_model() {
    common::each_seed("raid6_clients_and_the_mover_agree_with_the_model", |rng| {
        case(rng, Level::Raid6, 4, 5, None);
        case(rng, Level::Raid6, 5, 7, None);
    });
}

#[test]
fn degraded_raid5_and_raid6_clients_and_the_mover_agree_with_the_model() {
    common::each_seed(
        "degraded_raid5_and_raid6_clients_and_the_mover_agree_with_the_model",
        |rng| {
            let r5 = rng.below(4) as usize;
            case(rng, Level::Raid5, 4, 5, Some(r5));
            let r6 = rng.below(5) as usize;
            case(rng, Level::Raid6, 5, 7, Some(r6));
        },
    );
}
