//! The journal in front of a real `engine::Array` over simulated members that lose power:
//! write-through closes the RAID 5/6 write hole; write-back keeps every acknowledged write.
//! Seeded (`RAIDKIT_SEED`), replayable; the seed is printed.

mod common;

use std::io;
use std::sync::{Arc, Weak};

use common::{pattern, seed, Checkpoints, Rng, SimMember, World};
use engine::{Array, ArrayConfig, Level};
use journal::{
    format, read_superblock, replay_array_writes, Backing, Journal, Mode, ScanSummary, Superblock,
    WriteBack,
};
use member::Member;

const CHUNK: u64 = 16 << 10;
const MEMBER_BYTES: usize = 1 << 20;
const JOURNAL_BYTES: usize = (4 << 20) + 8192;

fn names(level: Level) -> Vec<String> {
    let n = if level == Level::Raid6 { 5 } else { 4 };
    (0..n)
        .map(|i| format!("m{i}"))
        .chain(["journal".to_string()])
        .collect()
}

fn array(level: Level, members: Vec<Option<Arc<dyn Member>>>) -> Arc<Array> {
    let n = members.len();
    let config = ArrayConfig {
        level,
        chunk_bytes: CHUNK,
        member_count: n,
        member_data_bytes: vec![MEMBER_BYTES as u64; n],
    };
    Arc::new(Array::new(config, members).unwrap())
}

/// A new session of the journal on `jm` (formatted in `mode`) logging `a`'s stripe writes,
/// with its checkpoints (flushing `a` first).
fn started(a: &Arc<Array>, jm: &Arc<dyn Member>, mode: Mode) -> (Arc<Journal>, Checkpoints) {
    let sb = format(jm.as_ref(), uuid::Uuid::new_v4(), mode).unwrap();
    let summary = a.replay_journal(jm.as_ref(), &sb).unwrap();
    let j = Journal::start(Arc::clone(jm), sb, &summary).unwrap();
    a.set_journal(Some(Arc::clone(&j)));
    let weak: Weak<Array> = Arc::downgrade(a);
    let checkpoints = Checkpoints::start(&j, move || match weak.upgrade() {
        Some(a) => a.flush().map_err(io::Error::from),
        None => Ok(()),
    });
    (j, checkpoints)
}

/// Replays the journal on `jm` into `a` as an attach does: the stripes logged write-through,
/// then (with `backing`) the write-back records.
fn replay(a: &Array, jm: &dyn Member, backing: Option<&dyn Backing>) -> ScanSummary {
    let sb: Superblock = read_superblock(jm).unwrap();
    let summary = a.replay_journal(jm, &sb).unwrap();
    if let Some(backing) = backing {
        replay_array_writes(jm, &sb, &summary, backing).unwrap();
    }
    summary
}

/// The array over `sims[..n]`, with the roles in `missing` left out.
fn assemble(level: Level, sims: &[Arc<SimMember>], missing: &[usize]) -> Arc<Array> {
    let n = sims.len() - 1;
    let members = (0..n)
        .map(|r| (!missing.contains(&r)).then(|| Arc::clone(&sims[r]) as Arc<dyn Member>))
        .collect();
    array(level, members)
}

/// Rounds per randomized test: `RAIDKIT_JOURNAL_ROUNDS` (default 40).
fn rounds() -> u64 {
    std::env::var("RAIDKIT_JOURNAL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

struct ArrayBacking(Arc<Array>);

impl Backing for ArrayBacking {
    fn size(&self) -> u64 {
        self.0.size_bytes()
    }
    fn stripe_bytes(&self) -> u64 {
        self.0.geometry().unit_bytes()
    }
    fn logged_bytes_bound(&self, offset: u64, len: u64) -> u64 {
        self.0.logged_bytes_bound(offset, len)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        Ok(self.0.read(offset, buf)?)
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        Ok(self.0.write(offset, data)?)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(self.0.flush()?)
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        Ok(self.0.trim(offset, len)?)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        Ok(self.0.write_zeroes(offset, len)?)
    }
}

/// A random small write: (offset, data) inside `size`.
fn random_write(rng: &mut Rng, size: u64) -> (u64, Vec<u8>) {
    let len = 1 + rng.below(3 * CHUNK);
    let offset = rng.below(size - len);
    (offset, pattern(rng.next(), len as usize))
}

fn check_all(a: &Array, model: &[u8], what: &str) {
    let mut got = vec![0u8; model.len()];
    a.read(0, &mut got).unwrap();
    if let Some(i) = (0..model.len()).find(|&i| got[i] != model[i]) {
        panic!(
            "{what}: byte {i} is {} but {} was written",
            got[i], model[i]
        );
    }
}

/// Write, lose power (every member keeps an arbitrary torn subset of its unflushed writes),
/// reassemble with one member (RAID 6: two) missing, replay: every acknowledged write reads back.
fn write_through_round(level: Level, seed: u64) {
    let names = names(level);
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let world = World::new();
    let sims: Vec<Arc<SimMember>> = names
        .iter()
        .map(|n| {
            world.member(
                n,
                if n == "journal" {
                    JOURNAL_BYTES
                } else {
                    MEMBER_BYTES
                },
            )
        })
        .collect();
    let a = assemble(level, &sims, &[]);
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let (j, checkpoints) = started(&a, &jm, Mode::WriteThrough);
    let mut rng = Rng::new(seed);
    let size = a.size_bytes();
    let mut model = vec![0u8; size as usize];
    for _ in 0..40 + rng.below(80) {
        let (offset, data) = random_write(&mut rng, size);
        a.write(offset, &data).unwrap();
        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        if rng.below(10) == 0 {
            a.flush().unwrap();
        }
    }
    let (_w, crashed) = world.crash(rng.next(), &name_refs);
    drop((a, j, checkpoints));
    // RAID 5 loses one member, RAID 6 two.
    let n = crashed.len() as u64 - 1;
    let first = rng.below(n) as usize;
    let mut missing = vec![first];
    if level == Level::Raid6 {
        missing.push((first + 1 + rng.below(n - 1) as usize) % n as usize);
    }
    let a = assemble(level, &crashed, &missing);
    replay(&a, crashed.last().unwrap().as_ref(), None);
    check_all(
        &a,
        &model,
        &format!("seed {seed}, {level}, members {missing:?} missing"),
    );
}

#[test]
fn write_through_closes_the_write_hole() {
    let base = seed("write_through_closes_the_write_hole");
    for round in 0..rounds() {
        let level = if round % 2 == 0 {
            Level::Raid5
        } else {
            Level::Raid6
        };
        write_through_round(level, base.wrapping_add(round));
    }
}

/// Without the journal the same crash does lose data (the test above has teeth).
#[test]
fn without_the_journal_the_write_hole_shows() {
    let base = seed("without_the_journal_the_write_hole_shows");
    let lost = (0..20u64).any(|round| {
        let seed = base.wrapping_add(round);
        let names = names(Level::Raid5);
        let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let world = World::new();
        let sims: Vec<Arc<SimMember>> = names
            .iter()
            .map(|n| world.member(n, MEMBER_BYTES))
            .collect();
        let a = assemble(Level::Raid5, &sims, &[]);
        let mut rng = Rng::new(seed);
        let mut model = vec![0u8; a.size_bytes() as usize];
        let mut flushed = model.clone();
        for _ in 0..60 {
            let (offset, data) = random_write(&mut rng, a.size_bytes());
            a.write(offset, &data).unwrap();
            model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
            if rng.below(6) == 0 {
                a.flush().unwrap();
                flushed.clone_from(&model);
            }
        }
        let (_w, crashed) = world.crash(rng.next(), &name_refs);
        let a = assemble(Level::Raid5, &crashed, &[rng.below(4) as usize]);
        let mut got = vec![0u8; flushed.len()];
        a.read(0, &mut got).unwrap();
        // Bytes last written before the final flush must survive; some do not.
        (0..model.len()).any(|i| model[i] == flushed[i] && got[i] != flushed[i])
    });
    assert!(lost, "seed {base}: 20 crashes never showed the write hole");
}

/// Write-back: writes from several threads are acknowledged from the journal while the
/// applier runs; power is cut at a random moment; after replay every acknowledged write reads
/// back, and still does with a member failed (the applier's stripes were write-hole safe).
fn write_back_round(level: Level, seed: u64) {
    let names = names(level);
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let world = World::new();
    let sims: Vec<Arc<SimMember>> = names
        .iter()
        .map(|n| {
            world.member(
                n,
                if n == "journal" {
                    JOURNAL_BYTES
                } else {
                    MEMBER_BYTES
                },
            )
        })
        .collect();
    let a = assemble(level, &sims, &[]);
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let (j, checkpoints) = started(&a, &jm, Mode::WriteBack);
    let wb = WriteBack::start(
        Arc::clone(&j),
        Arc::new(ArrayBacking(Arc::clone(&a))),
        256 << 10,
    )
    .unwrap();
    let size = a.size_bytes();
    let mut rng = Rng::new(seed);
    let mut model = vec![0u8; size as usize];
    let count = 30 + rng.below(120);
    for i in 0..count {
        let (offset, data) = random_write(&mut rng, size);
        wb.write(offset, &data).unwrap();
        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        if i % 17 == 0 {
            let mut got = vec![0u8; data.len()];
            wb.read(offset, &mut got).unwrap();
            assert_eq!(got, data, "seed {seed}: read after write");
        }
    }
    let (_w, crashed) = world.crash(rng.next(), &name_refs);
    drop(wb);
    drop((a, j, checkpoints));
    let a = assemble(level, &crashed, &[]);
    let backing = ArrayBacking(Arc::clone(&a));
    replay(&a, crashed.last().unwrap().as_ref(), Some(&backing));
    check_all(&a, &model, &format!("seed {seed}, {level}, after replay"));
    let report = a.check().unwrap();
    assert_eq!(
        report.mismatch_count, 0,
        "seed {seed}: parity mismatches after replay"
    );
    let failed = rng.below(crashed.len() as u64 - 1) as usize;
    a.fail_member(failed);
    check_all(
        &a,
        &model,
        &format!("seed {seed}, {level}, member {failed} failed"),
    );
}

#[test]
fn write_back_keeps_every_acknowledged_write() {
    let base = seed("write_back_keeps_every_acknowledged_write");
    for round in 0..rounds() {
        // RAID 1 has no write-through hook: replay's range rewrites make mirrors agree.
        let level = [Level::Raid5, Level::Raid6, Level::Raid1][round as usize % 3];
        write_back_round(level, base.wrapping_add(round));
    }
}

/// Write-back from several threads (disjoint regions) with write-zeroes mixed in and a buffer
/// small enough to exercise back-pressure; reads see the newest data at every step; `close`
/// drains everything and leaves the journal empty.
#[test]
fn write_back_concurrent_writers_zeroes_and_drain() {
    let base = seed("write_back_concurrent_writers_zeroes_and_drain");
    let world = World::new();
    let names = names(Level::Raid5);
    let sims: Vec<Arc<SimMember>> = names
        .iter()
        .map(|n| {
            world.member(
                n,
                if n == "journal" {
                    JOURNAL_BYTES
                } else {
                    MEMBER_BYTES
                },
            )
        })
        .collect();
    let a = assemble(Level::Raid5, &sims, &[]);
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let (j, checkpoints) = started(&a, &jm, Mode::WriteBack);
    let wb = Arc::new(
        WriteBack::start(
            Arc::clone(&j),
            Arc::new(ArrayBacking(Arc::clone(&a))),
            64 << 10,
        )
        .unwrap(),
    );
    let region = a.size_bytes() / 3;
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3u64)
            .map(|t| {
                let wb = Arc::clone(&wb);
                s.spawn(move || {
                    let seed = base.wrapping_add(t);
                    let mut rng = Rng::new(seed);
                    let mut model = vec![0u8; region as usize];
                    for _ in 0..60 {
                        let len = 1 + rng.below(2 * CHUNK);
                        let at = rng.below(region - len);
                        if rng.below(8) == 0 {
                            wb.write_zeroes(t * region + at, len).unwrap();
                            model[at as usize..(at + len) as usize].fill(0);
                        } else {
                            let data = pattern(rng.next(), len as usize);
                            wb.write(t * region + at, &data).unwrap();
                            model[at as usize..(at + len) as usize].copy_from_slice(&data);
                        }
                        let mut got = vec![0u8; region as usize];
                        wb.read(t * region, &mut got).unwrap();
                        assert!(got == model, "seed {seed}: read after write differs");
                    }
                    model
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    wb.close().unwrap();
    assert_eq!(wb.buffered_bytes(), 0);
    assert_eq!(
        checkpoints.close().unwrap(),
        0,
        "seed {base}: records left after drain"
    );
    for (t, model) in models.iter().enumerate() {
        let mut got = vec![0u8; region as usize];
        a.read(t as u64 * region, &mut got).unwrap();
        assert!(&got == model, "seed {base}: region {t} differs after drain");
    }
    assert_eq!(a.check().unwrap().mismatch_count, 0);
}

/// A write-back journal whose ring is small against the write traffic must never wedge:
/// the oldest write-back record can stay unapplied while the applier (which goes by offset,
/// not by age) applies newer ones, and every application appends a write-through record
/// behind it that no checkpoint can release until it is applied. Before the fix, clients kept
/// admitting new write-back records as others completed, the ring filled with write-through
/// records, and the applier waited for space forever (seen in test_fio_crash.py on RAID 6).
#[test]
fn write_back_with_a_small_ring_never_wedges() {
    let base = seed("write_back_with_a_small_ring_never_wedges");
    let world = World::new();
    let names = names(Level::Raid6);
    // The smallest ring whose records hold a stripe (5 members x 16 KiB + 4 KiB, a sixteenth
    // of the ring), as `journaled::Journaled::attach` requires.
    let journal_bytes = (2 << 20) + 8192;
    let sims: Vec<Arc<SimMember>> = names
        .iter()
        .map(|n| {
            let bytes = if n == "journal" {
                journal_bytes
            } else {
                MEMBER_BYTES
            };
            world.member(n, bytes)
        })
        .collect();
    let a = assemble(Level::Raid6, &sims, &[]);
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let (j, checkpoints) = started(&a, &jm, Mode::WriteBack);
    let backing = Arc::new(ArrayBacking(Arc::clone(&a)));
    let wb = Arc::new(WriteBack::start(Arc::clone(&j), backing, 1 << 20).unwrap());
    // Each writer overwrites its own slice at random, so the appliers (several at once) see
    // many overlapping versions: the array must end with the newest.
    let slice = a.size_bytes() / 8 / 512 * 512;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writers: Vec<_> = (0..8u64)
        .map(|t| {
            let (wb, done_tx) = (Arc::clone(&wb), done_tx.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(base.wrapping_add(t));
                let mut model = vec![0u8; slice as usize];
                for _ in 0..400 {
                    let len = 512 * (1 + rng.below(32));
                    let at = rng.below((slice - len) / 512) * 512;
                    let data = pattern(rng.next(), len as usize);
                    wb.write(t * slice + at, &data).unwrap();
                    model[at as usize..(at + len) as usize].copy_from_slice(&data);
                }
                done_tx.send(t).unwrap();
                model
            })
        })
        .collect();
    drop(done_tx);
    for _ in 0..writers.len() {
        let finished = done_rx.recv_timeout(std::time::Duration::from_secs(60));
        assert!(
            finished.is_ok(),
            "seed {base}: write-back writers stalled for 60 s (journal stats {:?})",
            j.stats()
        );
    }
    let models: Vec<Vec<u8>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    assert!(
        j.stats().pressure_applies > 0,
        "seed {base}: the ring was never under pressure, so the test proved nothing"
    );
    wb.close().unwrap();
    assert_eq!(
        checkpoints.close().unwrap(),
        0,
        "drained journal checkpoints empty"
    );
    for (t, model) in models.iter().enumerate() {
        let mut got = vec![0u8; slice as usize];
        a.read(t as u64 * slice, &mut got).unwrap();
        if let Some(i) = (0..got.len()).find(|&i| got[i] != model[i]) {
            panic!("seed {base}: writer {t}'s slice byte {i} is not the newest write");
        }
    }
}

/// The ring space a write-back apply reserves (`Array::logged_bytes_bound`) covers the
/// write-through records the write really logs, for writes of every size and alignment
/// (chunk and stripe straddling ones too), on RAID 5 and 6; and nothing is reserved for
/// levels that log nothing.
#[test]
fn apply_reservations_cover_the_records_logged() {
    let base = seed("apply_reservations_cover_the_records_logged");
    for level in [Level::Raid5, Level::Raid6] {
        let world = World::new();
        let sims: Vec<Arc<SimMember>> = names(level)
            .iter()
            .map(|n| world.member(n, JOURNAL_BYTES))
            .collect();
        let a = assemble(level, &sims, &[]);
        assert_eq!(a.logged_bytes_bound(0, 4096), 0, "no journal set");
        let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
        let (j, _checkpoints) = started(&a, &jm, Mode::WriteThrough);
        let mut rng = Rng::new(base);
        for _ in 0..300 {
            let len = 1 + rng.below(5 * CHUNK);
            let offset = rng.below(a.size_bytes() - len);
            let before = j.stats().appended_bytes;
            a.write(offset, &pattern(rng.next(), len as usize)).unwrap();
            let logged = j.stats().appended_bytes - before;
            let bound = a.logged_bytes_bound(offset, len);
            assert!(
                logged > 0 && logged <= bound,
                "seed {base}, {level}: a write of {len} bytes at {offset} logged {logged} \
                 ring bytes, above its reservation {bound}"
            );
        }
    }
    let world = World::new();
    let sims: Vec<Arc<SimMember>> = names(Level::Raid1)
        .iter()
        .map(|n| world.member(n, JOURNAL_BYTES))
        .collect();
    let a = assemble(Level::Raid1, &sims, &[]);
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let _session = started(&a, &jm, Mode::WriteThrough);
    assert_eq!(a.logged_bytes_bound(0, 4096), 0, "RAID 1 logs nothing");
}
