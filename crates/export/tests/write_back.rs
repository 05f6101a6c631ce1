//! The write-back cache in front of a volume over simulated members that lose power: every
//! acknowledged write survives, concurrent writers and back-pressure read their newest data,
//! and a small ring never wedges. Seeded (`RAIDKIT_SEED`), replayable; the seed is printed.

#[path = "../../journal/tests/common/mod.rs"]
mod common;

use std::sync::Arc;

use common::{
    assert_reads_back, each_round, names, pattern, random_write, seed, Rng, SimMember, World,
};
use export::{checkpoint, replay_array_writes, Checkpointer, WriteBack};
use journal::{format, read_superblock, Journal, Mode};
use layout::Level;
use member::{Call, Hooked, Member};
use ondisk::{create, CreateOptions};
use volume::{assemble, AssembleOptions, Volume};

const CHUNK: u64 = 16 << 10;
/// Where the array's data starts on each member (after its superblock area).
const DATA_OFFSET: u64 = 64 << 10;
const MEMBER_BYTES: usize = (1 << 20) + DATA_OFFSET as usize;
const JOURNAL_BYTES: usize = (4 << 20) + 8192;

/// The simulated members of `names` in `world` (the journal bigger, `journal_bytes`).
fn members(world: &Arc<World>, names: &[String], journal_bytes: usize) -> Vec<Arc<SimMember>> {
    names
        .iter()
        .map(|n| match n.as_str() {
            "journal" => world.member(n, journal_bytes),
            _ => world.member(n, MEMBER_BYTES),
        })
        .collect()
}

/// The array members: every sim but the last (the journal).
fn array_members(sims: &[Arc<SimMember>]) -> Vec<Arc<dyn Member>> {
    sims[..sims.len() - 1]
        .iter()
        .map(|s| Arc::clone(s) as Arc<dyn Member>)
        .collect()
}

/// A new array of `level` over `sims` (the last one is the journal's), assembled.
fn new_volume(level: Level, sims: &[Arc<SimMember>]) -> Arc<Volume> {
    let mut opts = CreateOptions::new(level, "wb");
    opts.chunk_bytes = CHUNK;
    opts.data_offset_bytes = DATA_OFFSET;
    opts.assume_clean = true;
    create(&array_members(sims), &opts).unwrap();
    reassemble(sims)
}

/// The array over `sims` assembled again (after a crash: dirty, resynced in the background).
fn reassemble(sims: &[Arc<SimMember>]) -> Arc<Volume> {
    Arc::new(assemble(array_members(sims), &AssembleOptions::default()).unwrap())
}

/// A write-back session over `v` on the journal `jm` as `JournalLayer::attach` starts one
/// (`fresh` formats the journal first, else its records are replayed): the engine logs to the
/// journal, a checkpointer runs, the cache buffers at most `buffer_bytes`.
fn start(
    v: &Arc<Volume>,
    jm: &Arc<dyn Member>,
    fresh: bool,
    buffer_bytes: u64,
) -> (Arc<Journal>, Checkpointer, WriteBack) {
    let sb = match fresh {
        true => format(jm.as_ref(), uuid::Uuid::new_v4(), Mode::WriteBack).unwrap(),
        false => read_superblock(jm.as_ref()).unwrap(),
    };
    let summary = v.replay_journal(jm.as_ref(), &sb).unwrap();
    replay_array_writes(jm.as_ref(), &sb, &summary, v).unwrap();
    let j = Journal::start(Arc::clone(jm), sb, &summary).unwrap();
    v.set_journal(Some(Arc::clone(&j)));
    v.mark_dirty().unwrap();
    let checkpointer = Checkpointer::start(&j, v).unwrap();
    let wb = WriteBack::start(Arc::clone(&j), Arc::clone(v), buffer_bytes).unwrap();
    (j, checkpointer, wb)
}

/// Clean shutdown of a drained session: a last checkpoint; the records left (0 when drained).
fn stop(j: &Journal, v: &Volume, checkpointer: Checkpointer) -> u64 {
    checkpoint(j, v).unwrap();
    checkpointer.stop()
}

/// After the write-back cache closed: the journal checkpoints empty, and each writer's slice
/// of `v` (writer `t` wrote `[t * len, (t + 1) * len)`, `len` its model's length) reads as its
/// model. `what` names the run in messages.
fn assert_drained(
    j: &Journal,
    v: &Volume,
    checkpointer: Checkpointer,
    models: &[Vec<u8>],
    what: &str,
) {
    assert_eq!(
        stop(j, v, checkpointer),
        0,
        "{what}: records left after the drain"
    );
    for (t, model) in models.iter().enumerate() {
        let mut got = vec![0u8; model.len()];
        v.read(t as u64 * model.len() as u64, &mut got).unwrap();
        if let Some(i) = testsupport::first_difference(&got, model) {
            panic!("{what}: writer {t}'s slice byte {i} is not its newest write");
        }
    }
}

/// Write-back: writes from several threads are acknowledged from the journal while the
/// applier runs; power is cut at a random moment; after replay every acknowledged write reads
/// back, and still does with a member failed (the applier's stripes were write-hole safe).
fn write_back_round(level: Level, seed: u64) {
    let names = names(level);
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let world = World::new();
    let sims = members(&world, &names, JOURNAL_BYTES);
    let a = new_volume(level, &sims);
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let (j, checkpointer, wb) = start(&a, &jm, true, 256 << 10);
    let size = a.size_bytes();
    let mut rng = Rng::new(seed);
    let mut model = vec![0u8; size as usize];
    let count = 30 + rng.below(120);
    for i in 0..count {
        let (offset, data) = random_write(&mut rng, size, 3 * CHUNK);
        wb.write(offset, &data).unwrap();
        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
        if i % 17 == 0 {
            let mut got = vec![0u8; data.len()];
            wb.read(offset, &mut got).unwrap();
            assert_eq!(got, data, "seed {seed}: read after write");
        }
    }
    let (_w, crashed) = world.crash(rng.next_u64(), &name_refs);
    drop(wb);
    drop((a, j, checkpointer));
    let a = reassemble(&crashed);
    let jm: Arc<dyn Member> = Arc::clone(crashed.last().unwrap()) as Arc<dyn Member>;
    let sb = read_superblock(jm.as_ref()).unwrap();
    let summary = a.replay_journal(jm.as_ref(), &sb).unwrap();
    replay_array_writes(jm.as_ref(), &sb, &summary, &a).unwrap();
    assert_reads_back(
        &model,
        &format!("seed {seed}, {level}, after replay"),
        |got| a.read(0, got).unwrap(),
    );
    let report = a.check().unwrap();
    assert_eq!(
        report.mismatch_count, 0,
        "seed {seed}: parity mismatches after replay"
    );
    let failed = rng.below(crashed.len() as u64 - 1) as usize;
    a.fail_member(failed);
    assert_reads_back(
        &model,
        &format!("seed {seed}, {level}, member {failed} failed"),
        |got| a.read(0, got).unwrap(),
    );
}

#[test]
fn write_back_keeps_every_acknowledged_write() {
    // RAID 1 logs no member operations: replay's range rewrites make mirrors agree.
    each_round(
        "write_back_keeps_every_acknowledged_write",
        &[Level::Raid5, Level::Raid6, Level::Raid1],
        write_back_round,
    );
}

/// Write-back from several threads (disjoint regions) with write-zeroes mixed in and a buffer
/// small enough to exercise back-pressure; reads see the newest data at every step; `close`
/// drains everything and leaves the journal empty.
#[test]
fn write_back_concurrent_writers_zeroes_and_drain() {
    let base = seed("write_back_concurrent_writers_zeroes_and_drain");
    let world = World::new();
    let sims = members(&world, &names(Level::Raid5), JOURNAL_BYTES);
    let a = new_volume(Level::Raid5, &sims);
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let (j, checkpointer, wb) = start(&a, &jm, true, 64 << 10);
    let wb = Arc::new(wb);
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
                            let data = pattern(rng.next_u64(), len as usize);
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
    assert_drained(&j, &a, checkpointer, &models, &format!("seed {base}"));
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
    // The smallest ring whose records hold a stripe (5 members x 16 KiB + 4 KiB, a sixteenth
    // of the ring), as `export::JournalLayer::attach` requires.
    let journal_bytes = (2 << 20) + 8192;
    let sims = members(&world, &names(Level::Raid6), journal_bytes);
    let a = new_volume(Level::Raid6, &sims);
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let (j, checkpointer, wb) = start(&a, &jm, true, 1 << 20);
    let wb = Arc::new(wb);
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
                    let data = pattern(rng.next_u64(), len as usize);
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
    assert_drained(&j, &a, checkpointer, &models, &format!("seed {base}"));
}

/// A journal of format version 1, written byte by byte as docs/FORMAT.md described it before
/// `StripeApply` records (version 2) existed: the superblock and records an older raidkit
/// left behind at a crash.
mod version_1 {
    fn put(b: &mut Vec<u8>, bytes: &[u8]) {
        b.extend_from_slice(bytes);
    }

    /// Superblock copy (generation 1, so written at member byte 4096).
    pub fn superblock(ring_bytes: u64, nonce: u64) -> Vec<u8> {
        let mut b = Vec::new();
        put(&mut b, b"RAIDKJNL");
        put(&mut b, &1u32.to_le_bytes()); // version
        put(&mut b, &2u32.to_le_bytes()); // write-back
        put(&mut b, uuid::Uuid::new_v4().as_bytes());
        put(&mut b, uuid::Uuid::new_v4().as_bytes());
        for field in [8192, ring_bytes, 1, 0, 1, nonce] {
            // ring offset, ring bytes, generation, tail offset, tail seq, nonce
            put(&mut b, &u64::to_le_bytes(field));
        }
        b.resize(4092, 0);
        let crc = crc32c::crc32c(&b);
        put(&mut b, &crc.to_le_bytes());
        b
    }

    /// One record, padded to 512 bytes: kind 1 `MemberOps`, 2 `ArrayWrite`.
    pub fn record(kind: u16, seq: u64, nonce: u64, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        put(&mut b, b"RKJR");
        put(&mut b, &kind.to_le_bytes());
        put(&mut b, &[0, 0]);
        put(&mut b, &seq.to_le_bytes());
        put(&mut b, &nonce.to_le_bytes());
        put(&mut b, &(payload.len() as u32).to_le_bytes());
        b.resize(60, 0);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b), payload);
        put(&mut b, &crc.to_le_bytes());
        put(&mut b, payload);
        b.resize(b.len().div_ceil(512) * 512, 0);
        b
    }

    /// `MemberOps` payload of member writes `(role, offset, data)`.
    pub fn member_ops(writes: &[(u32, u64, Vec<u8>)]) -> Vec<u8> {
        let mut b = Vec::new();
        put(&mut b, &(writes.len() as u32).to_le_bytes());
        put(&mut b, &[0; 4]);
        for (role, offset, data) in writes {
            put(&mut b, &role.to_le_bytes());
            put(&mut b, &1u32.to_le_bytes());
            put(&mut b, &offset.to_le_bytes());
            put(&mut b, &(data.len() as u64).to_le_bytes());
        }
        for (_, _, data) in writes {
            put(&mut b, data);
        }
        b
    }

    /// `ArrayWrite` payload.
    pub fn array_write(offset: u64, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        put(&mut b, &offset.to_le_bytes());
        put(&mut b, &(data.len() as u64).to_le_bytes());
        put(&mut b, data);
        b
    }
}

/// A version 1 journal left by a crash (a stripe's `MemberOps` and client `ArrayWrite`
/// records, written by an encoder of the old format) replays: every byte reads back; the new
/// session rewrites the superblock as version 2.
#[test]
fn a_version_1_journal_replays_and_is_rewritten_as_version_2() {
    let mut rng = Rng::new(seed(
        "a_version_1_journal_replays_and_is_rewritten_as_version_2",
    ));
    let names = names(Level::Raid5);
    let world = World::new();
    let sims = members(&world, &names, JOURNAL_BYTES);
    let v = new_volume(Level::Raid5, &sims);
    let size = v.size_bytes();
    let mut model = vec![0u8; size as usize];
    let g = v.geometry().clone();
    // Stripe 0 written whole (data and P) by a write-through-style record.
    let data_chunks = g.member_count() as u64 - 1;
    let mut writes = Vec::new();
    let mut p = vec![0u8; CHUNK as usize];
    for i in 0..data_chunks {
        let chunk = pattern(rng.next_u64(), CHUNK as usize);
        let at = g.locate(i * CHUNK)[0];
        assert_eq!(at.member_offset, 0);
        p.iter_mut().zip(&chunk).for_each(|(p, d)| *p ^= d);
        model[(i * CHUNK) as usize..((i + 1) * CHUNK) as usize].copy_from_slice(&chunk);
        writes.push((at.role as u32, 0, chunk));
    }
    let p_role = (0..g.member_count())
        .find(|&r| writes.iter().all(|w| w.0 != r as u32))
        .unwrap();
    writes.push((p_role as u32, 0, p));
    // The write that logged the record marked its region used first (a record is only ever
    // logged once its region's bit is durable): so does this one.
    v.write(0, &[0u8]).unwrap();
    let nonce = rng.next_u64();
    let jm = sims.last().unwrap();
    let ring_bytes = (JOURNAL_BYTES as u64 - 8192) / 4096 * 4096;
    jm.write_at(&version_1::superblock(ring_bytes, nonce), 4096)
        .unwrap();
    let mut ring = version_1::record(1, 1, nonce, &version_1::member_ops(&writes));
    for seq in 2..30 {
        let (offset, data) = random_write(&mut rng, size, 3 * CHUNK);
        let payload = version_1::array_write(offset, &data);
        ring.extend(version_1::record(2, seq, nonce, &payload));
        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
    }
    jm.write_at(&ring, 8192).unwrap();
    drop(v);
    let v = reassemble(&sims);
    let jm: Arc<dyn Member> = Arc::clone(jm) as Arc<dyn Member>;
    let (j, checkpointer, wb) = start(&v, &jm, false, 1 << 20);
    assert_reads_back(&model, "version 1 journal replayed", |got| {
        wb.read(0, got).unwrap()
    });
    let sb = read_superblock(jm.as_ref()).unwrap();
    let mut version = [0u8; 4];
    jm.read_at(&mut version, sb.copy_offset() + 8).unwrap();
    assert_eq!(
        u32::from_le_bytes(version),
        2,
        "the new session writes version 2"
    );
    wb.close().unwrap();
    assert_eq!(stop(&j, &v, checkpointer), 0);
}

/// Opens the gate when dropped (a failed assertion must not leave the applier stuck).
struct GateHeld<'a>(&'a Gate);

impl Drop for GateHeld<'_> {
    fn drop(&mut self) {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.0 .1.notify_all();
    }
}

/// A gate over the array members' data-area writes (closed: they wait) and the volume over
/// `sims` (the last one is the journal) behind it.
fn gated_volume(sims: &[Arc<SimMember>]) -> (Arc<Gate>, Arc<Volume>) {
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let gated: Vec<Arc<dyn Member>> = sims[..sims.len() - 1]
        .iter()
        .map(|s| {
            // Writes to the data area wait while the gate is closed (reads, flushes, superblock
            // and bitmap writes pass).
            let closed = Arc::clone(&gate);
            let hold = move |call: &Call| {
                if call.is_write() && call.offset >= DATA_OFFSET {
                    let (closed, opened) = &*closed;
                    let guard = closed.lock().unwrap();
                    drop(opened.wait_while(guard, |closed| *closed).unwrap());
                }
                Ok(())
            };
            Arc::new(Hooked::new(Arc::clone(s) as Arc<dyn Member>, hold)) as Arc<dyn Member>
        })
        .collect();
    let v = Arc::new(assemble(gated, &AssembleOptions::default()).unwrap());
    (gate, v)
}

type Gate = (std::sync::Mutex<bool>, std::sync::Condvar);

/// A write-back session (1 MiB buffer) on a new RAID 5 of 4 behind a gate
/// ([`gated_volume`]): the world, the gate, the volume, the journal member and the session.
#[allow(clippy::type_complexity)]
fn gated_session() -> (
    Arc<World>,
    Arc<Gate>,
    Arc<Volume>,
    Arc<dyn Member>,
    (Arc<Journal>, Checkpointer, WriteBack),
) {
    let world = World::new();
    let sims = members(&world, &names(Level::Raid5), JOURNAL_BYTES);
    drop(new_volume(Level::Raid5, &sims));
    let (gate, v) = gated_volume(&sims);
    let jm: Arc<dyn Member> = Arc::clone(sims.last().unwrap()) as Arc<dyn Member>;
    let session = start(&v, &jm, true, 1 << 20);
    (world, gate, v, jm, session)
}

/// Waits until the journal's durable sequence reaches `seq` (20 s at most).
fn wait_durable(j: &Journal, seq: u64, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while j.stats().durable_seq < seq {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Writes that share a stripe are applied together: five scattered 4 KiB writes buffered
/// while their stripe was being written (by an apply held at the members) reach the members,
/// once it returned, as one reconstruct-write: the stripe read once (one read per data member,
/// 3) and written once (one write per member, 4), where applying each alone costs two reads
/// and two writes apiece. RAID 5 of 4, 16 KiB
/// chunks: stripe 0 is array bytes 0..48 KiB.
#[test]
fn writes_sharing_a_stripe_are_applied_as_one() {
    let (_world, gate, v, _jm, (j, checkpointer, wb)) = gated_session();
    let ops = |v: &Volume| {
        let stats = v.member_io_stats();
        let reads: u64 = stats.iter().map(|s| s.read.ops).sum();
        (reads, stats.iter().map(|s| s.write.ops).sum::<u64>())
    };
    let before = ops(&v);
    let first = j.superblock().tail_seq;
    let held = GateHeld(&gate);
    *gate.0.lock().unwrap() = true;
    wb.write(0, &pattern(1, 4096)).unwrap();
    wait_durable(&j, first + 1, "the first apply never logged");
    for (i, at) in (8u64..48).step_by(8).enumerate() {
        wb.write(at << 10, &pattern(2 + i as u64, 4096)).unwrap();
    }
    drop(held);
    wb.close().unwrap();
    let (reads, writes) = ops(&v);
    // The first apply: a 4 KiB read-modify-write (2 reads, 2 writes).
    assert_eq!(
        (reads - before.0, writes - before.1),
        (2 + 3, 2 + 4),
        "member (reads, writes) for one held apply and five writes sharing its stripe"
    );
    assert_eq!(stop(&j, &v, checkpointer), 0);
}

/// A client record stays in the journal while an apply that copied from it is running, even
/// once a newer write superseded its bytes: the apply's `StripeApply` record refers to it, and
/// a checkpoint releasing it first would let replay skip that record while its stripe was not
/// flushed (the write hole). Checked by holding the apply's in-place writes.
#[test]
fn a_record_an_apply_refers_to_stays_until_the_apply_returns() {
    let (_world, gate, v, jm, (j, checkpointer, wb)) = gated_session();
    let first = j.superblock().tail_seq;
    let held = GateHeld(&gate);
    *gate.0.lock().unwrap() = true;
    wb.write(0, &pattern(1, 4096)).unwrap();
    // The applier logs its stripe (the record after the client's), then waits at the gate.
    wait_durable(&j, first + 1, "the apply never logged");
    wb.write(0, &pattern(2, 4096)).unwrap();
    checkpoint(&j, &v).unwrap();
    let tail = read_superblock(jm.as_ref()).unwrap().tail_seq;
    assert!(
        tail <= first,
        "record {first} was released (tail {tail}) while an apply referring to it ran"
    );
    drop(held);
    wb.close().unwrap();
    assert_eq!(stop(&j, &v, checkpointer), 0);
}
