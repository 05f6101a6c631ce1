//! The online reshape's model test (docs/DESIGN.md "Reshape", "Two geometries and a
//! position"): an array of RAM members filled with a seeded pattern is reshaped to more members
//! by `OnlineReshape` while client threads read, write, trim, write zeroes and flush at random
//! (half of them near the position, where the windows move), each checked against a shadow
//! model (a flat byte image). The mover pauses between a window's copy and its record, so a
//! client request the window exclusion let through would land in a window already read: the
//! test then finds the write lost. Afterwards every byte reads as the shadow says, through the
//! online array and through a plain array of the new geometry; the grown part reads zero; RAID
//! 5/6 parity is consistent and every byte reads the same with any one member left out.
//!
//! The crash case: client writes interleaved with the windows on one thread (seeded, so each
//! run is the same), stopped after member write `k` for every `k` (no later write reaches a
//! member), then started again from what is durable and moved to the end: every write
//! acknowledged before the stop reads back. It fails when the mover records the position only
//! as the offline one does (when the window rule needs it): a client write to `[P_rec, P)` is
//! then copied over by the resume.

mod common;

use common::{Rng, Trip};
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

/// The crash case's members (data and backup areas, RAM) and the recorded position: what
/// survives a stop.
struct Crash {
    level: Level,
    n: usize,
    m: usize,
    rows: u64,
    window: u64,
    data: Vec<Arc<dyn Member>>,
    backup: Vec<Arc<dyn Member>>,
    recorded: Arc<AtomicU64>,
}

/// The request a stop cut: its range and the bytes it was writing.
type Cut = Option<(u64, Vec<u8>)>;

impl Crash {
    fn target(&self, trip: Option<&Arc<Trip>>) -> (ReshapePlan, ArrayTarget) {
        let wrap = |set: &[Arc<dyn Member>], count: usize| -> Vec<Option<Arc<dyn Member>>> {
            (0..count)
                .map(|r| {
                    let member = set[r].clone();
                    Some(match trip {
                        Some(trip) => {
                            let trip = trip.clone();
                            Arc::new(member::Hooked::new(member, move |call| {
                                if call.changes_bytes() {
                                    trip.allow()?;
                                }
                                Ok(())
                            })) as Arc<dyn Member>
                        }
                        None => member,
                    })
                })
                .collect()
        };
        let new_geometry = geometry(self.level, self.m, self.rows);
        let recorded = self.recorded.clone();
        let record_trip = trip.cloned();
        let unhurried = |a: Array| {
            // One thread: a stripe's tail waiting for the next write would only wait.
            a.set_gather_wait(Duration::ZERO);
            a
        };
        let target = ArrayTarget {
            old: unhurried(array(self.level, wrap(&self.data, self.n), self.rows)),
            new: unhurried(array(self.level, wrap(&self.data, self.m), self.rows)),
            backup: BackupArea::new(wrap(&self.backup, self.m), &new_geometry, 5),
            recorder: Box::new(move |p| {
                if let Some(trip) = &record_trip {
                    trip.allow()?;
                }
                recorded.store(p, Ordering::SeqCst);
                Ok(())
            }),
            used: None,
        };
        let plan = ReshapePlan::new(
            geometry(self.level, self.n, self.rows),
            new_geometry,
            self.window,
        )
        .unwrap();
        (plan, target)
    }

    /// One run from the start: client writes (seeded by `seed`) interleaved with the mover's
    /// windows on one thread, every member write and position record through `trip`, until
    /// the mover is done or the trip fires. `shadow` gets every write completed before the
    /// stop; returns whether the stop came and the write it cut (each of whose bytes may read
    /// old or new).
    fn run(&self, trip: &Arc<Trip>, seed: u64, shadow: &mut [u8]) -> (bool, Cut) {
        let (plan, target) = self.target(Some(trip));
        let online = match OnlineReshape::start(plan, target, 0) {
            Ok(online) => online,
            Err(_) => return (true, None),
        };
        let mut rng = Rng(seed);
        let size = online.size_bytes();
        let mut buf = Vec::new();
        loop {
            if rng.chance(40) {
                let step = online.step(&mut buf);
                if trip.fired() || step.is_err() {
                    return (true, None);
                }
                if step.unwrap().is_none() {
                    return (false, None);
                }
                continue;
            }
            let len = 1 + rng.below(3 * CHUNK);
            let p = online.position().min(size);
            let offset = if rng.chance(70) {
                (p.saturating_sub(4 * CHUNK) + rng.below(8 * CHUNK)).min(size - len)
            } else {
                rng.below(size - len + 1)
            };
            let data = if rng.chance(15) {
                vec![0u8; len as usize]
            } else {
                rng.bytes(len as usize)
            };
            let result = if data.iter().all(|&b| b == 0) {
                online.write_zeroes(offset, len)
            } else {
                online.write(offset, &data)
            };
            if trip.fired() || result.is_err() {
                return (true, Some((offset, data)));
            }
            shadow[offset as usize..(offset + len) as usize].copy_from_slice(&data);
        }
    }

    /// Copies of the members, to run another stop from the same start.
    fn snapshot(&self) -> Crash {
        Crash {
            data: common::ram_copies(&self.data),
            backup: common::ram_copies(&self.backup),
            recorded: Arc::new(AtomicU64::new(self.recorded.load(Ordering::SeqCst))),
            ..*self
        }
    }
}

/// For one shape: a seeded sequence of client writes interleaved with the mover's windows,
/// stopped after member write `k` for every `k` (sampled past 600), then started again from
/// what is durable (the recorded position, the backup areas) and moved to the end: every write
/// acknowledged before the stop reads back, the pattern elsewhere, the grown part zero; the cut
/// write's bytes read old or new.
fn crash_case(rng: &mut Rng, level: Level, n: usize, m: usize) {
    let rows = 12 + rng.below(12);
    let window = CHUNK * (1 + rng.below(6));
    let what = format!("{level} {n} -> {m} members, {rows} rows, window {window}");
    let mem = |name: String, len: u64| -> Arc<dyn Member> {
        Arc::new(MemMember::new(&name, len).unwrap())
    };
    let backup_bytes = BackupArea::bytes_per_member(&geometry(level, m, rows));
    let start = Crash {
        level,
        n,
        m,
        rows,
        window,
        data: (0..m).map(|r| mem(format!("d{r}"), rows * CHUNK)).collect(),
        backup: (0..m).map(|r| mem(format!("b{r}"), backup_bytes)).collect(),
        recorded: Arc::new(AtomicU64::new(0)),
    };
    let old = array(
        level,
        (0..n).map(|r| Some(start.data[r].clone())).collect(),
        rows,
    );
    let pattern = rng.bytes(old.size_bytes() as usize);
    old.write(0, &pattern).unwrap();
    drop(old);
    let seed = rng.next_u64();

    let counting = start.snapshot();
    let unlimited = Trip::new(i64::MAX);
    let mut shadow = pattern.clone();
    let (stopped, _) = counting.run(&unlimited, seed, &mut shadow);
    assert!(!stopped, "{what}: the run without a stop stopped");
    let total = unlimited.used(i64::MAX);
    let stops: Vec<i64> = if total <= 600 {
        (0..total).collect()
    } else {
        (0..600).map(|_| rng.below(total as u64) as i64).collect()
    };
    for k in stops {
        let rig = start.snapshot();
        let mut shadow = pattern.clone();
        let (stopped, cut) = rig.run(&Trip::new(k), seed, &mut shadow);
        assert!(
            stopped,
            "{what}: a stop after write {k} of {total} went unnoticed"
        );
        let (plan, target) = rig.target(None);
        let p_rec = rig.recorded.load(Ordering::SeqCst);
        let online = OnlineReshape::start(plan, target, p_rec)
            .unwrap_or_else(|e| panic!("{what}: restart after a stop at write {k}: {e}"));
        let mut buf = Vec::new();
        while online.step(&mut buf).unwrap().is_some() {}
        let mut got = vec![0u8; shadow.len()];
        online.read(0, &mut got).unwrap();
        let new = array(level, rig.data.iter().cloned().map(Some).collect(), rows);
        let mut grown = vec![0u8; (new.size_bytes() - shadow.len() as u64) as usize];
        new.read(shadow.len() as u64, &mut grown).unwrap();
        assert!(
            grown.iter().all(|&b| b == 0),
            "{what}, stop after write {k}: the grown part is not zero"
        );
        for (at, (&g, &s)) in got.iter().zip(&shadow).enumerate() {
            let cut_byte = cut.as_ref().and_then(|(offset, data)| {
                let i = (at as u64).checked_sub(*offset)? as usize;
                data.get(i).copied()
            });
            if g != s && cut_byte != Some(g) {
                panic!(
                    "{what}, stop after write {k} of {total} (recorded {p_rec}): byte {at} \
                     reads {g:#04x}, the model says {s:#04x}{}",
                    match cut_byte {
                        Some(c) => format!(" (or {c:#04x}, the cut write's)"),
                        None => String::new(),
                    }
                );
            }
        }
    }
}

#[test]
fn a_stop_after_any_member_write_keeps_every_acknowledged_client_write() {
    common::each_seed(
        "a_stop_after_any_member_write_keeps_every_acknowledged_client_write",
        |rng| {
            crash_case(rng, Level::Raid0, 2, 3);
            crash_case(rng, Level::Raid5, 3, 4);
            crash_case(rng, Level::Raid5, 4, 5);
            crash_case(rng, Level::Raid6, 4, 5);
        },
    );
}
