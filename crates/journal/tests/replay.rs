//! Record format, superblock copies, and replay after simulated power loss (`member::SimMember`): acknowledged
//! records come back in order; torn records, sequence gaps and stale sessions stop replay.

mod common;

use std::sync::{Arc, Mutex};

use common::{pattern, seed, Checkpoints, Rng};
use journal::{
    decode_record, format, push_data_op, read_superblock, replay as replay_ops, scan, DataSource,
    Journal, MemberOp, Mode, Record, ScanSummary, Superblock, RING_OFFSET,
};
use member::{Member, SimMember};
use uuid::Uuid;

const JOURNAL_BYTES: u64 = (1 << 20) + 8192;

/// Damages bytes on the journal member (durably).
fn poke(m: &SimMember, offset: usize, bytes: &[u8]) {
    m.write_at(bytes, offset as u64).unwrap();
    m.flush().unwrap();
}

fn started(m: &Arc<SimMember>, mode: Mode) -> Arc<Journal> {
    let sb = format(m.as_ref(), Uuid::new_v4(), mode).unwrap();
    let summary = scan(m.as_ref(), &sb, |_, _| Ok(())).unwrap();
    assert_eq!(summary.records, 0);
    Journal::start(Arc::clone(m) as Arc<dyn Member>, sb, &summary).unwrap()
}

/// A crashed write-back session on `m`: `count` `ArrayWrite` records of `len` bytes of `byte`
/// at offsets 0, 1, ... appended, nothing checkpointed; replayed (see [`replay`]).
fn crashed_session(
    m: &Arc<SimMember>,
    count: u64,
    byte: u8,
    len: usize,
) -> (Vec<Seen>, ScanSummary, Superblock) {
    let j = started(m, Mode::WriteBack);
    let data = vec![byte; len];
    for i in 0..count {
        j.append(&[Record::ArrayWrite {
            offset: i,
            data: &data,
        }])
        .unwrap();
    }
    drop(j);
    replay(m.as_ref())
}

/// (seq, offset, data) of one replayed ArrayWrite.
type Seen = (u64, u64, Vec<u8>);

/// Replays `m`, returning every ArrayWrite and the summary.
fn replay(m: &dyn Member) -> (Vec<Seen>, ScanSummary, Superblock) {
    let sb = read_superblock(m).unwrap();
    let mut seen = Vec::new();
    let summary = scan(m, &sb, |seq, r| {
        if let Record::ArrayWrite { offset, data } = r {
            seen.push((seq, *offset, data.to_vec()));
        }
        Ok(())
    })
    .unwrap();
    (seen, summary, sb)
}

#[test]
fn records_round_trip_and_any_damage_is_detected() {
    let data = pattern(1, 5000);
    let parity = pattern(2, 4096);
    let records = [
        Record::MemberOps(vec![
            MemberOp::Write {
                role: 0,
                offset: 8192,
                data: &data,
            },
            MemberOp::Zero {
                role: 2,
                offset: 0,
                len: 1 << 20,
            },
            MemberOp::Write {
                role: 3,
                offset: 4096,
                data: &parity,
            },
        ]),
        Record::ArrayWrite {
            offset: 77,
            data: &data,
        },
        Record::Wrap,
        Record::MemberOps(vec![]),
        Record::StripeApply(vec![
            MemberOp::FromRecord {
                role: 1,
                offset: 4096,
                len: 3000,
                seq: 7,
                array_offset: 1 << 40,
            },
            MemberOp::Write {
                role: 3,
                offset: 4096,
                data: &parity,
            },
        ]),
    ];
    for (i, r) in records.iter().enumerate() {
        let mut buf = Vec::new();
        r.encode_into(10 + i as u64, 0xDEAD, &mut buf);
        assert_eq!(buf.len() as u64, r.ring_bytes());
        assert_eq!(buf.len() % 512, 0);
        let (h, back) = decode_record(&buf).expect("decodes");
        assert_eq!((h.seq, h.nonce), (10 + i as u64, 0xDEAD));
        assert_eq!(&back, r);
        let payload_end = journal::HEADER_BYTES + r.payload_bytes() as usize;
        for at in [0, 5, 9, 17, 25, 61, payload_end - 1] {
            let mut bad = buf.clone();
            bad[at] ^= 0x40;
            assert!(
                decode_record(&bad).is_none(),
                "record {i}: flip at {at} not detected"
            );
        }
    }
}

/// A `MemberOps` record may not refer to other records: such an entry is malformed there.
#[test]
fn only_stripe_apply_records_hold_references() {
    let op = MemberOp::FromRecord {
        role: 0,
        offset: 0,
        len: 512,
        seq: 1,
        array_offset: 0,
    };
    let mut buf = Vec::new();
    Record::StripeApply(vec![op]).encode_into(2, 1, &mut buf);
    buf[4] = 1; // kind 4 → 1: the 40-byte entry no longer parses as a 24-byte one
    assert!(decode_record(&buf).is_none());
}

/// A data write is referred to piece by piece, one reference per source it crosses, unless
/// the references outweigh the bytes.
#[test]
fn data_ops_refer_to_their_sources_or_carry_tiny_pieces() {
    let data = pattern(3, 1000);
    let sources = [
        DataSource {
            offset: 0,
            len: 10_100,
            seq: 4,
        },
        DataSource {
            offset: 10_100,
            len: 50,
            seq: 9,
        },
        DataSource {
            offset: 10_150,
            len: 5000,
            seq: 5,
        },
    ];
    let mut ops = Vec::new();
    push_data_op(&mut ops, 2, 64, 10_000, &data, &sources);
    let refs = |seq, offset, len, array_offset| MemberOp::FromRecord {
        role: 2,
        offset,
        len,
        seq,
        array_offset,
    };
    assert_eq!(
        ops,
        vec![
            refs(4, 64, 100, 10_000),
            refs(9, 164, 50, 10_100),
            refs(5, 214, 850, 10_150)
        ]
    );
    let tiny: Vec<DataSource> = (0..100)
        .map(|i| DataSource {
            offset: 10 * i,
            len: 10,
            seq: i + 1,
        })
        .collect();
    let mut ops = Vec::new();
    push_data_op(&mut ops, 1, 0, 0, &data, &tiny);
    assert_eq!(
        ops,
        vec![MemberOp::Write {
            role: 1,
            offset: 0,
            data: &data
        }]
    );
}

/// Replay hands over a `StripeApply` record's operations with the referred bytes read from
/// their `ArrayWrite` records, and skips a record one of whose sources a checkpoint released
/// (its apply had returned and the array was flushed).
#[test]
fn replay_resolves_references_and_skips_records_with_released_sources() {
    let m = Arc::new(SimMember::new("j", JOURNAL_BYTES));
    let j = started(&m, Mode::WriteBack);
    let (a, b) = (pattern(4, 3000), pattern(5, 2000));
    let write = |offset, data| j.append(&[Record::ArrayWrite { offset, data }]).unwrap();
    let ta = write(1 << 20, &a);
    let apply = |seq, array_offset, len| {
        Record::StripeApply(vec![MemberOp::FromRecord {
            role: 1,
            offset: 512,
            len,
            seq,
            array_offset,
        }])
    };
    // Released: record `a` and its apply complete, checkpointed.
    let t1 = j.append(&[apply(ta.last, (1 << 20) + 100, 200)]).unwrap();
    j.complete(ta);
    j.complete(t1);
    let checkpoints = Checkpoints::start(&j, || Ok(()));
    assert_eq!(checkpoints.checkpoint().unwrap(), 2);
    // An apply still running when `a` was released (not possible in the write-back cache,
    // whose records wait for their applies; here it stands for one that is skipped).
    j.append(&[apply(ta.last, 1 << 20, 10)]).unwrap();
    let tb = write(5000, &b);
    j.append(&[apply(tb.last, 5100, 700)]).unwrap();
    drop((checkpoints, j));
    let sb = read_superblock(m.as_ref()).unwrap();
    let mut seen = Vec::new();
    replay_ops(m.as_ref(), &sb, |seq, ops| {
        let owned: Vec<(u32, u64, Vec<u8>)> = ops
            .iter()
            .map(|op| match op {
                MemberOp::Write { role, offset, data } => (*role, *offset, data.to_vec()),
                other => panic!("unresolved {other:?}"),
            })
            .collect();
        seen.push((seq, owned));
        Ok(())
    })
    .unwrap();
    assert_eq!(
        seen,
        vec![(tb.last + 1, vec![(1, 512, b[100..800].to_vec())])]
    );
}

#[test]
fn newest_valid_superblock_copy_wins() {
    let m = Arc::new(SimMember::new("j", JOURNAL_BYTES));
    let j = started(&m, Mode::WriteThrough);
    let ticket = j
        .append(&[Record::ArrayWrite {
            offset: 0,
            data: b"x",
        }])
        .unwrap();
    j.complete(ticket);
    let checkpoint = j.begin_checkpoint().unwrap().expect("a complete record");
    assert_eq!(checkpoint.finish(Ok(())).unwrap(), 1);
    let newest = read_superblock(m.as_ref()).unwrap();
    assert_eq!(newest, j.superblock());
    assert_eq!(newest.generation, 3);
    // Damage the newest copy: the older one is used, and replay from it is still correct.
    poke(&m, newest.copy_offset() as usize + 100, &[0xFF]);
    let older = read_superblock(m.as_ref()).unwrap();
    assert_eq!(older.generation, 2);
    poke(&m, older.copy_offset() as usize + 100, &[0xFF]);
    let err = read_superblock(m.as_ref()).unwrap_err().to_string();
    assert!(err.contains("checksum mismatch"), "{err}");
}

#[test]
fn torn_last_record_is_ignored() {
    let m = Arc::new(SimMember::new("j", JOURNAL_BYTES));
    let j = started(&m, Mode::WriteBack);
    for i in 0..5u64 {
        j.append(&[Record::ArrayWrite {
            offset: i * 4096,
            data: &pattern(i, 3000),
        }])
        .unwrap();
    }
    drop(j);
    let (seen, summary, _) = replay(m.as_ref());
    assert_eq!(seen.len(), 5);
    // Tear the last record: its second sector never reached the journal.
    let last_pos = summary.end_offset - 3584;
    poke(&m, (RING_OFFSET + last_pos + 512) as usize, &[0u8; 512]);
    let (seen, summary, _) = replay(m.as_ref());
    assert_eq!(seen.len(), 4);
    assert_eq!(summary.end_offset, last_pos);
    for (i, (seq, offset, data)) in seen.iter().enumerate() {
        assert_eq!((*seq, *offset), (1 + i as u64, i as u64 * 4096));
        assert_eq!(data, &pattern(i as u64, 3000));
    }
}

#[test]
fn sequence_gap_stops_replay() {
    let m = Arc::new(SimMember::new("j", JOURNAL_BYTES));
    let (seen, _, sb) = crashed_session(&m, 4, 1, 100);
    let nonce = sb.nonce;
    assert_eq!(seen.len(), 4);
    // Rewrite the third record (one sector) as a valid record with a later sequence number.
    let mut forged = Vec::new();
    let first = seen[0].0;
    Record::ArrayWrite {
        offset: 2,
        data: &[1; 100],
    }
    .encode_into(first + 3, nonce, &mut forged);
    let third_pos = sb.tail_offset + 2 * 512;
    poke(&m, (RING_OFFSET + third_pos) as usize, &forged);
    let (seen, summary, _) = replay(m.as_ref());
    assert_eq!(
        seen.iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![first, first + 1]
    );
    assert_eq!(summary.end_offset, third_pos);
}

#[test]
fn records_of_an_earlier_session_never_replay() {
    let m = Arc::new(SimMember::new("j", JOURNAL_BYTES));
    let (seen, summary, sb) = crashed_session(&m, 3, 7, 1000);
    assert_eq!(seen.len(), 3);
    // New session after replay: it starts after the replayed records, with a new nonce.
    let m2: Arc<dyn Member> = Arc::clone(&m) as Arc<dyn Member>;
    let j = Journal::start(m2, sb, &summary).unwrap();
    j.append(&[Record::ArrayWrite {
        offset: 9,
        data: &[8; 10],
    }])
    .unwrap();
    drop(j);
    let (seen, _, _) = replay(m.as_ref());
    assert_eq!(seen.iter().map(|s| s.1).collect::<Vec<_>>(), vec![9]);
}

/// Several threads append and complete records in a 1 MiB ring (many wraps and checkpoints);
/// power is cut at a random moment; replay must return every acknowledged record that was not
/// checkpointed, in sequence, with its exact contents.
#[test]
fn crash_during_concurrent_appends_keeps_every_acknowledged_record() {
    let base = seed("crash_during_concurrent_appends");
    for round in 0..8u64 {
        let seed = base.wrapping_add(round);
        crash_round(seed);
    }
}

fn crash_round(seed: u64) {
    let m = Arc::new(SimMember::new("j", JOURNAL_BYTES));
    let j = started(&m, Mode::WriteThrough);
    // No array to flush before a checkpoint.
    let _checkpoints = Checkpoints::start(&j, || Ok(()));
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (j, acked, stop) = (Arc::clone(&j), Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut rng = Rng::new(seed ^ (t << 32));
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let tag = rng.next_u64();
                    let len = 1 + rng.below(20_000) as usize;
                    let data = pattern(tag, len);
                    let op = MemberOp::Write {
                        role: t as u32,
                        offset: tag,
                        data: &data,
                    };
                    let ticket = j.append(&[Record::MemberOps(vec![op])]).unwrap();
                    acked.lock().unwrap().push(ticket.first);
                    // In-place writes take a moment; a writer never appends again before
                    // its record is complete (that could wait for space it holds itself).
                    if rng.below(8) == 0 {
                        std::thread::yield_now();
                    }
                    j.complete(ticket);
                }
            })
        })
        .collect();
    let mut rng = Rng::new(seed);
    // Cut power once the workload is under way (however loaded the machine), at a random time.
    let start = std::time::Instant::now();
    while acked.lock().unwrap().len() < 20 && start.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    std::thread::sleep(std::time::Duration::from_millis(rng.below(60)));
    let must: Vec<u64> = acked.lock().unwrap().clone();
    let crashed = m.crash(rng.next_u64());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let sb = read_superblock(&crashed).unwrap();
    let mut replayed = Vec::new();
    let summary = scan(&crashed, &sb, |seq, r| {
        let Record::MemberOps(ops) = r else {
            panic!("seed {seed}: unexpected record")
        };
        let MemberOp::Write { offset, data, .. } = &ops[0] else {
            panic!("seed {seed}")
        };
        assert_eq!(
            data.to_vec(),
            pattern(*offset, data.len()),
            "seed {seed}: record {seq}"
        );
        replayed.push(seq);
        Ok(())
    })
    .unwrap();
    // Consecutive except for a wrap marker (not passed to the visitor) in between.
    assert!(
        replayed
            .windows(2)
            .all(|w| w[1] == w[0] + 1 || w[1] == w[0] + 2),
        "seed {seed}"
    );
    let next = summary.next_seq;
    for seq in must.iter().filter(|&&s| s >= sb.tail_seq) {
        assert!(
            *seq < next,
            "seed {seed}: acknowledged record {seq} lost (replay ended at {next})"
        );
    }
    assert!(
        must.len() > 10,
        "seed {seed}: workload too small ({})",
        must.len()
    );
}
