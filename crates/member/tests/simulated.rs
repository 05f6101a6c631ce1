//! The test tools: `FaultyMember` (injected faults: all, by range, every Nth, seeded
//! probability, delay, vanish, heal) and `SimMember` (power loss keeps everything flushed, any
//! subset of unflushed writes, torn only at 512-byte sectors). Seeded from `RAIDKIT_SEED`
//! (printed; set it to replay).

use std::sync::Arc;
use std::time::{Duration, Instant};

use member::{FaultRule, FaultyMember, MemMember, Member, SimMember, SimRng, SECTOR_BYTES};

fn seed() -> u64 {
    testsupport::seed("member simulated")
}

fn faulty() -> FaultyMember {
    let inner: Arc<dyn Member> = Arc::new(MemMember::new("mem:1M", 1 << 20).unwrap());
    FaultyMember::new(inner)
}

#[test]
fn faults_switch_on_and_off() {
    let m = faulty();
    let c = m.control();
    let mut buf = [0u8; 16];
    m.write_at(&[1; 16], 0).unwrap();
    c.fail_reads(FaultRule::Always);
    let err = m.read_at(&mut buf, 0).unwrap_err();
    assert!(err.to_string().contains("mem:1M"), "{err}");
    assert!(err.to_string().contains("injected"), "{err}");
    m.write_at(&[2; 16], 0).unwrap();
    c.fail_writes(FaultRule::Always);
    assert!(m.write_at(&[3; 16], 0).is_err());
    assert!(m.trim(0, 1).is_err());
    assert!(m.write_zeroes(0, 1).is_err());
    assert!(m.flush().is_err());
    c.heal();
    m.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, [2; 16], "a failed write changed nothing");
    assert_eq!(c.injected_count(), 5);
}

#[test]
fn range_rule_fails_only_overlapping_ops() {
    let m = faulty();
    let c = m.control();
    c.fail_reads(FaultRule::Range {
        offset: 4096,
        len: 512,
    });
    let mut buf = [0u8; 100];
    m.read_at(&mut buf, 3996).unwrap();
    assert!(m.read_at(&mut buf, 3997).is_err(), "last byte overlaps");
    assert!(m.read_at(&mut buf, 4607).is_err(), "first byte overlaps");
    m.read_at(&mut buf, 4608).unwrap();
    m.write_at(&buf, 4096).unwrap();
    assert!(m.flush().is_ok());
}

#[test]
fn every_nth_and_probability_are_deterministic() {
    let m = faulty();
    let c = m.control();
    c.fail_writes(FaultRule::EveryNth(3));
    let pattern: Vec<bool> = (0..9).map(|_| m.write_at(&[1], 0).is_err()).collect();
    assert_eq!(
        pattern,
        [false, false, true, false, false, true, false, false, true]
    );
    let seed = seed();
    let run = |seed: u64| -> Vec<bool> {
        let m = faulty();
        let c = m.control();
        c.reseed(seed);
        c.fail_reads(FaultRule::Probability {
            per_million: 300_000,
        });
        let mut buf = [0u8; 1];
        (0..1000).map(|_| m.read_at(&mut buf, 0).is_err()).collect()
    };
    let a = run(seed);
    assert_eq!(a, run(seed), "same seed, same faults");
    let failed = a.iter().filter(|&&f| f).count();
    assert!((200..400).contains(&failed), "{failed} of 1000 at 30%");
}

#[test]
fn delay_and_vanish() {
    let m = faulty();
    let c = m.control();
    c.set_delay(Duration::from_millis(50));
    let start = Instant::now();
    m.write_at(&[1], 0).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(50));
    c.set_delay(Duration::ZERO);
    c.vanish();
    let mut buf = [0u8; 1];
    let err = m.read_at(&mut buf, 0).unwrap_err();
    assert!(err.to_string().contains("vanished"), "{err}");
    assert!(m.flush().is_err());
    assert!(m.reconnect().is_err());
    c.heal();
    m.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf, [1]);
}

fn read(m: &dyn Member, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    m.read_at(&mut buf, offset).unwrap();
    buf
}

#[test]
fn sim_reads_newest_and_flushed_data_survives_every_crash() {
    let m = SimMember::new("sim0", 1 << 20);
    m.write_at(&[1; 5000], 100).unwrap();
    m.trim(1000, 10).unwrap();
    m.flush().unwrap();
    m.write_at(&[2; 3000], 2000).unwrap();
    let mut want = vec![1u8; 5000];
    want[900..910].fill(0);
    want[1900..4900].fill(2);
    assert_eq!(read(&m, 100, 5000), want, "reads see the newest data");
    assert_eq!(m.unflushed_count(), 1);
    let mut durable = vec![0u8; 5000];
    m.read_durable(&mut durable, 100).unwrap();
    assert_eq!(&durable[1900..4900], &[1u8; 3000][..]);
    for s in 0..200 {
        let after = m.crash(s);
        let got = read(&after, 100, 5000);
        assert_eq!(&got[..900], &[1u8; 900][..], "seed {s}");
        assert_eq!(&got[900..910], &[0u8; 10][..], "seed {s}");
        assert_eq!(after.unflushed_count(), 0);
        assert_eq!(after.len(), m.len());
    }
}

/// `write_durable_at` survives every crash, even over an older unflushed write to the same
/// bytes, while other unflushed writes stay at risk (it is not a flush).
#[test]
fn sim_durable_write_survives_every_crash_and_flushes_nothing_else() {
    let m = SimMember::new("sim0", 1 << 20);
    m.write_at(&[1; 4096], 0).unwrap(); // unflushed, elsewhere
    m.write_at(&[2; 1024], 8192).unwrap(); // unflushed, under the durable write
    m.write_durable_at(&[3; 512], 8192 + 256).unwrap();
    m.write_at(&[4; 100], 8192 + 300).unwrap(); // unflushed, newer, over it
    let mut durable = vec![0u8; 1024];
    m.read_durable(&mut durable, 8192).unwrap();
    assert_eq!(&durable[256..768], &[3u8; 512][..], "read_durable shows it");
    assert_eq!(
        &durable[..256],
        &[0u8; 256][..],
        "the older write is not durable"
    );
    let (mut lost_other, mut kept_newer) = (false, false);
    for s in 0..300 {
        let after = m.crash(s);
        let got = read(&after, 8192, 1024);
        for (i, &b) in got.iter().enumerate().take(768).skip(256) {
            let newer = (300..400).contains(&i);
            assert!(b == 3 || (newer && b == 4), "seed {s}: byte {i} is {b}");
            kept_newer |= b == 4;
        }
        lost_other |= read(&after, 0, 4096) != vec![1u8; 4096];
    }
    assert!(
        lost_other,
        "an unrelated unflushed write was never lost: it was flushed"
    );
    assert!(kept_newer, "the newer unflushed write was never kept");
    m.flush().unwrap();
    let after = m.crash(7);
    assert_eq!(&read(&after, 8192 + 256, 44)[..], &[3u8; 44][..]);
    assert_eq!(&read(&after, 8192 + 300, 100)[..], &[4u8; 100][..]);
}

/// Each sector of an unflushed write is all new or all old; across seeds writes are lost, kept
/// and torn.
#[test]
fn sim_crash_tears_only_at_sector_granularity() {
    let base = seed();
    let m = SimMember::new("sim1", 1 << 20);
    let old = vec![0x11u8; 64 * 1024];
    m.write_at(&old, 0).unwrap();
    m.flush().unwrap();
    // Unaligned: starts and ends inside a sector.
    let start = 3 * SECTOR_BYTES + 100;
    let new = vec![0x22u8; 40 * SECTOR_BYTES as usize];
    m.write_at(&new, start).unwrap();
    let (mut lost, mut kept, mut torn) = (0, 0, 0);
    let mut rng = SimRng::new(base);
    for _ in 0..300 {
        let s = rng.next_u64();
        let img = read(&m.crash(s), 0, old.len());
        let end = start + new.len() as u64;
        let mut new_sectors = 0;
        let mut touched = 0;
        for sector in 0..(old.len() as u64 / SECTOR_BYTES) {
            let lo = (sector * SECTOR_BYTES).max(start);
            let hi = ((sector + 1) * SECTOR_BYTES).min(end);
            if lo >= hi {
                continue;
            }
            touched += 1;
            let piece = &img[lo as usize..hi as usize];
            let all_new = piece.iter().all(|&b| b == 0x22);
            assert!(
                all_new || piece.iter().all(|&b| b == 0x11),
                "seed {s}: torn inside sector {sector}"
            );
            new_sectors += usize::from(all_new);
        }
        assert!(img[..start as usize].iter().all(|&b| b == 0x11), "seed {s}");
        assert!(img[end as usize..].iter().all(|&b| b == 0x11), "seed {s}");
        match new_sectors {
            0 => lost += 1,
            n if n == touched => kept += 1,
            _ => torn += 1,
        }
    }
    assert!(
        lost > 0 && kept > 0 && torn > 0,
        "lost {lost} kept {kept} torn {torn}"
    );
}

#[test]
fn sim_crash_is_replayable_and_invents_no_bytes() {
    let m = SimMember::new("sim2", 1 << 20);
    for i in 0..20u8 {
        m.write_at(&[i; 1024], 0).unwrap();
    }
    m.write_zeroes(512, 512).unwrap();
    let seed = seed();
    assert_eq!(read(&m.crash(seed), 0, 1024), read(&m.crash(seed), 0, 1024));
    // Every outcome is made of values some write put there (no invented bytes).
    for s in 0..100 {
        let img = read(&m.crash(seed.wrapping_add(s)), 0, 1024);
        for chunk in img.chunks(512) {
            assert!(chunk.iter().all(|&b| b == chunk[0]), "seed {s}");
            assert!(chunk[0] < 20);
        }
    }
}

#[test]
#[should_panic(expected = "larger than")]
fn sim_size_is_bounded() {
    let _ = SimMember::new("huge", 1 << 40);
}

/// Crash tests run thousands of seeds: a crash copies only the page table, not the data.
#[test]
fn sim_crash_is_cheap_for_many_seeds() {
    let m = SimMember::new("sim3", 8 << 20);
    m.write_at(&vec![9u8; 8 << 20], 0).unwrap();
    m.flush().unwrap();
    for i in 0..16u64 {
        m.write_at(&[i as u8; 4096], i * 12_345).unwrap();
    }
    let start = Instant::now();
    for s in 0..2000 {
        let after = m.crash(s);
        assert_eq!(read(&after, (8 << 20) - 1, 1), [9]);
    }
    let took = start.elapsed();
    println!("2000 crashes of an 8 MiB member: {took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
}
