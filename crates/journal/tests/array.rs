//! The journal under a real `engine::Array` over simulated members that lose power:
//! logging each stripe before it is written in place closes the RAID 5/6 write hole, with its
//! data in the record (write-through) or by reference to the client's records (write-back
//! applies), and the ring space an apply reserves covers what it logs. (The write-back cache's tests are in
//! crates/export/tests/write_back.rs.)
//! Seeded (`RAIDKIT_SEED`), replayable; the seed is printed.

mod common;

use std::io;
use std::sync::{Arc, Weak};

use common::{
    assert_reads_back, each_round, names, pattern, random_write, seed, Checkpoints, Rng, SimMember,
    World,
};
use engine::{Array, ArrayConfig, Level};
use journal::{format, read_superblock, scan, DataSource, Journal, Mode, Record};
use member::Member;

const CHUNK: u64 = 16 << 10;
const MEMBER_BYTES: usize = 1 << 20;
const JOURNAL_BYTES: usize = (4 << 20) + 8192;

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

/// The array over `sims[..n]`, with the roles in `missing` left out.
fn assemble(level: Level, sims: &[Arc<SimMember>], missing: &[usize]) -> Arc<Array> {
    let n = sims.len() - 1;
    let members = (0..n)
        .map(|r| (!missing.contains(&r)).then(|| Arc::clone(&sims[r]) as Arc<dyn Member>))
        .collect();
    array(level, members)
}

/// The simulated array members of `level` and the journal, last.
fn members(level: Level) -> (Arc<World>, Vec<Arc<SimMember>>) {
    let world = World::new();
    let sims = names(level)
        .iter()
        .map(|n| {
            let len = if n == "journal" {
                JOURNAL_BYTES
            } else {
                MEMBER_BYTES
            };
            world.member(n, len)
        })
        .collect();
    (world, sims)
}

/// The crashed array reassembled with one member (RAID 6: two) left out and the stripes its
/// journal (the last member) logged replayed: the roles missing, the array, the journal's
/// superblock.
fn replay_degraded(
    level: Level,
    crashed: &[Arc<SimMember>],
    rng: &mut Rng,
) -> (Vec<usize>, Arc<Array>, journal::Superblock) {
    let n = crashed.len() as u64 - 1;
    let first = rng.below(n) as usize;
    let mut missing = vec![first];
    if level == Level::Raid6 {
        missing.push((first + 1 + rng.below(n - 1) as usize) % n as usize);
    }
    let a = assemble(level, crashed, &missing);
    let jm = crashed.last().expect("the journal member");
    let sb = read_superblock(jm.as_ref()).unwrap();
    a.replay_journal(jm.as_ref(), &sb).unwrap();
    (missing, a, sb)
}

/// Write, lose power (every member keeps an arbitrary torn subset of its unflushed writes),
/// reassemble with one member (RAID 6: two) missing, replay: every acknowledged write reads back.
fn write_through_round(level: Level, seed: u64) {
    let (world, sims) = members(level);
    let a = assemble(level, &sims, &[]);
    let names = names(level);
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let (j, checkpoints) = started(&a, &jm, Mode::WriteThrough);
    let mut rng = Rng::new(seed);
    let size = a.size_bytes();
    let mut model = vec![0u8; size as usize];
    for _ in 0..40 + rng.below(80) {
        let (offset, data) = random_write(&mut rng, size, 3 * CHUNK);
        a.write(offset, &data).unwrap();
        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        if rng.below(10) == 0 {
            a.flush().unwrap();
        }
    }
    let (_w, crashed) = world.crash(rng.next_u64(), &name_refs);
    drop((a, j, checkpoints));
    let (missing, a, _) = replay_degraded(level, &crashed, &mut rng);
    assert_reads_back(
        &model,
        &format!("seed {seed}, {level}, members {missing:?} missing"),
        |got| a.read(0, got).unwrap(),
    );
}

/// `data` at `offset` cut into one to four client pieces at random points, as the write-back
/// buffer holds a run of extents from different records.
fn random_pieces(rng: &mut Rng, offset: u64, len: u64) -> Vec<(u64, u64)> {
    let mut cuts: Vec<u64> = (0..rng.below(4)).map(|_| rng.below(len)).collect();
    cuts.extend([0, len]);
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .map(|w| (offset + w[0], w[1] - w[0]))
        .collect()
}

/// A write: offset and bytes.
type Write = (u64, Vec<u8>);

/// Two to six disjoint writes of at most a chunk each within `window` bytes from a random
/// offset, sorted: what an applier takes from the write-back buffer and applies together.
fn scattered_writes(rng: &mut Rng, size: u64, window: u64) -> Vec<Write> {
    let base = rng.below(size - window);
    let mut writes: Vec<Write> = Vec::new();
    let mut starts: Vec<u64> = (0..2 + rng.below(5))
        .map(|_| base + rng.below(window))
        .collect();
    starts.sort_unstable();
    for at in starts {
        // Disjoint and not adjacent (adjacent extents reach the array as one piece).
        if writes.last().is_some_and(|(o, d)| o + d.len() as u64 >= at) {
            continue;
        }
        let len = 1 + rng.below(CHUNK.min(base + window - at));
        writes.push((at, pattern(rng.next_u64(), len as usize)));
    }
    writes
}

/// The write-back path at the array level: each write is logged as `ArrayWrite` records (one
/// per piece), applied with `Array::write_applied` (its stripes logged as `StripeApply`
/// records: parity, and references to those pieces), alone or with other writes near it (the
/// pieces that share a stripe applied as one write), then the pieces are complete. Lose power,
/// reassemble with one member (RAID 6: two) missing, replay as `export` does (physical redo,
/// references resolved, then each `ArrayWrite` record as whole-stripe rewrites): every byte
/// reads back, those written before the journal session too.
fn write_back_round(level: Level, seed: u64) {
    let (world, sims) = members(level);
    let a = assemble(level, &sims, &[]);
    let names = names(level);
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut rng = Rng::new(seed);
    let size = a.size_bytes();
    let mut model = pattern(rng.next_u64(), size as usize);
    a.write(0, &model).unwrap();
    a.flush().unwrap();
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let (j, checkpoints) = started(&a, &jm, Mode::WriteBack);
    let stripe = a.geometry().stripe_data_bytes();
    for _ in 0..40 + rng.below(80) {
        let writes = match rng.below(2) {
            0 => vec![random_write(&mut rng, size, 3 * CHUNK)],
            _ => scattered_writes(&mut rng, size, 3 * stripe),
        };
        let mut sources: Vec<DataSource> = Vec::new();
        for (offset, data) in &writes {
            // One record per append: its ticket's last sequence number is the record's (a
            // wrap marker placed before it takes the one before).
            for (at, len) in random_pieces(&mut rng, *offset, data.len() as u64) {
                let piece = &data[(at - offset) as usize..(at - offset + len) as usize];
                let record = Record::ArrayWrite {
                    offset: at,
                    data: piece,
                };
                let seq = j.append(&[record]).unwrap().last;
                sources.push(DataSource {
                    offset: at,
                    len,
                    seq,
                });
            }
        }
        let pieces: Vec<(u64, &[u8])> = writes.iter().map(|(o, d)| (*o, &d[..])).collect();
        a.write_applied(&pieces, &sources).unwrap();
        for source in &sources {
            j.complete_seq(source.seq);
        }
        for (offset, data) in &writes {
            model[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
        }
    }
    let (_w, crashed) = world.crash(rng.next_u64(), &name_refs);
    drop((a, j, checkpoints));
    let (missing, a, sb) = replay_degraded(level, &crashed, &mut rng);
    let jm = crashed.last().unwrap();
    scan(jm.as_ref(), &sb, |_, record| {
        if let Record::ArrayWrite { offset, data } = record {
            let lo = offset / stripe * stripe;
            let hi = (offset + data.len() as u64).div_ceil(stripe) * stripe;
            let mut buf = vec![0u8; (hi.min(size) - lo) as usize];
            a.read(lo, &mut buf).unwrap();
            let at = (offset - lo) as usize;
            buf[at..at + data.len()].copy_from_slice(data);
            a.write(lo, &buf).unwrap();
        }
        Ok(())
    })
    .unwrap();
    assert_reads_back(
        &model,
        &format!("seed {seed}, {level}, members {missing:?} missing"),
        |got| a.read(0, got).unwrap(),
    );
}

/// Write-back applies log parity only and refer to the client's records for their data; the
/// write hole stays closed (replay resolves the references, or skips a record whose sources
/// a checkpoint released).
#[test]
fn write_back_applies_close_the_write_hole() {
    each_round(
        "write_back_applies_close_the_write_hole",
        &[Level::Raid5, Level::Raid6],
        write_back_round,
    );
}

#[test]
fn write_through_closes_the_write_hole() {
    each_round(
        "write_through_closes_the_write_hole",
        &[Level::Raid5, Level::Raid6],
        write_through_round,
    );
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
            let (offset, data) = random_write(&mut rng, a.size_bytes(), 3 * CHUNK);
            a.write(offset, &data).unwrap();
            model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
            if rng.below(6) == 0 {
                a.flush().unwrap();
                flushed.clone_from(&model);
            }
        }
        let (_w, crashed) = world.crash(rng.next_u64(), &name_refs);
        let a = assemble(Level::Raid5, &crashed, &[rng.below(4) as usize]);
        let mut got = vec![0u8; flushed.len()];
        a.read(0, &mut got).unwrap();
        // Bytes last written before the final flush must survive; some do not.
        (0..model.len()).any(|i| model[i] == flushed[i] && got[i] != flushed[i])
    });
    assert!(lost, "seed {base}: 20 crashes never showed the write hole");
}

/// The ring space a write-back apply reserves (`Array::logged_bytes_bound`, one wrap included) covers the
/// records the apply really logs (`Array::write_applied`), for writes of every size and
/// alignment (chunk and stripe straddling ones too) from one source or from many tiny ones
/// (whose references would outweigh the data, which is then logged instead), on RAID 5 and
/// 6; and nothing is reserved for levels that log nothing.
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
        assert_eq!(
            a.logged_bytes_bound(0, 4096, 1).ring_bytes_max(),
            0,
            "no journal set"
        );
        let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
        let (j, _checkpoints) = started(&a, &jm, Mode::WriteThrough);
        let mut rng = Rng::new(base);
        let stripe = a.geometry().stripe_data_bytes();
        for i in 0..400 {
            let len = 1 + rng.below(5 * CHUNK);
            let offset = rng.below(a.size_bytes() - len);
            let data = pattern(rng.next_u64(), len as usize);
            let (sources, writes): (Vec<(u64, u64)>, Vec<Write>) = match i % 4 {
                0 => (vec![(offset, len)], vec![(offset, data)]),
                1 => (random_pieces(&mut rng, offset, len), vec![(offset, data)]),
                2 => {
                    let tiny = (offset..offset + len)
                        .step_by(7)
                        .map(|at| (at, 7.min(offset + len - at)));
                    (tiny.collect(), vec![(offset, data)])
                }
                // Scattered pieces applied together, one source each.
                _ => {
                    let writes = scattered_writes(&mut rng, a.size_bytes(), 3 * stripe);
                    let sources = writes.iter().map(|(o, d)| (*o, d.len() as u64));
                    (sources.collect(), writes)
                }
            };
            let sources: Vec<DataSource> = sources
                .iter()
                .map(|&(at, len)| DataSource {
                    offset: at,
                    len,
                    seq: 1,
                })
                .collect();
            let (offset, last) = (writes[0].0, writes.last().expect("a write"));
            let len = last.0 + last.1.len() as u64 - offset;
            let pieces: Vec<(u64, &[u8])> = writes.iter().map(|(o, d)| (*o, &d[..])).collect();
            let before = j.stats().appended_bytes;
            a.write_applied(&pieces, &sources).unwrap();
            let logged = j.stats().appended_bytes - before;
            let bound = a
                .logged_bytes_bound(offset, len, sources.len())
                .ring_bytes_max();
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
    assert_eq!(
        a.logged_bytes_bound(0, 4096, 1).ring_bytes_max(),
        0,
        "RAID 1 logs nothing"
    );
}
