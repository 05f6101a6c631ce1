//! Direct I/O (`O_DIRECT`) file members: on a filesystem that has it (/var/tmp, ext4 here;
//! `RAIDKIT_DIRECT_DIR` to choose another). Where it is missing the tests fail, saying so:
//! they are never skipped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use member::{AlignedBuf, FileMember, Member, MemberCache, OpenOptions, SimRng};
use testsupport::SeedGuard;

mod common;

fn direct_dir() -> tempfile::TempDir {
    let base =
        std::env::var_os("RAIDKIT_DIRECT_DIR").map_or(PathBuf::from("/var/tmp"), PathBuf::from);
    tempfile::Builder::new()
        .prefix("raidkit-direct-")
        .tempdir_in(&base)
        .unwrap_or_else(|e| panic!("cannot make a directory in {}: {e}", base.display()))
}

fn create(path: &Path, size: u64) -> FileMember {
    let opts = OpenOptions {
        create_size: Some(size),
        ..OpenOptions::default()
    };
    let m = FileMember::open_cached(path, "direct-test", &opts, MemberCache::Direct)
        .unwrap_or_else(|e| {
            panic!(
                "direct I/O on {} is needed for these tests (set RAIDKIT_DIRECT_DIR to a \
                 directory on ext4 or xfs): {e}",
                path.display()
            )
        });
    assert!(m.is_direct());
    m
}

/// Random reads and writes of every alignment (vectored too, buffers at odd addresses) agree
/// with a model of the member's bytes.
#[test]
fn unaligned_and_aligned_transfers_match_a_model() {
    let seed = testsupport::seed("direct model");
    let _guard = SeedGuard(seed, "direct model");
    let dir = direct_dir();
    const SIZE: u64 = 4 << 20;
    let m = create(&dir.path().join("m.img"), SIZE);
    let align = m.direct_align().unwrap();
    assert!(
        align == 512 || align == 4096 || align.is_power_of_two(),
        "align {align}"
    );
    let mut model = vec![0u8; SIZE as usize];
    let mut rng = SimRng::new(seed);
    for round in 0..400 {
        let aligned = rng.next_u64().is_multiple_of(2);
        let (offset, len) = if aligned {
            let blocks = SIZE / align;
            let at = rng.next_u64() % blocks;
            let n = 1 + rng.next_u64() % (blocks - at).min(300);
            (at * align, n * align)
        } else {
            let at = rng.next_u64() % (SIZE - 1);
            let n = 1 + rng.next_u64() % (SIZE - at).min(1_500_000);
            (at, n)
        };
        let len = len as usize;
        // An aligned buffer, or one at an odd address.
        let skew = if rng.next_u64().is_multiple_of(2) {
            0
        } else {
            1 + (rng.next_u64() % 511) as usize
        };
        let mut backing = AlignedBuf::zeroed(len + skew, 0);
        let buf = &mut backing[skew..];
        match rng.next_u64() % 5 {
            0 => {
                for b in buf.iter_mut() {
                    *b = rng.next_u64() as u8;
                }
                m.write_at(buf, offset).unwrap();
                model[offset as usize..][..len].copy_from_slice(buf);
            }
            1 => {
                for b in buf.iter_mut() {
                    *b = rng.next_u64() as u8;
                }
                let cut = (rng.next_u64() as usize) % (len + 1);
                let (a, b) = buf.split_at(cut);
                m.write_vectored_at(&[a, b], offset).unwrap();
                model[offset as usize..][..len].copy_from_slice(buf);
            }
            2 => {
                m.read_at(buf, offset).unwrap();
                assert!(
                    buf == &model[offset as usize..][..len],
                    "round {round}: read at {offset} len {len}"
                );
            }
            3 => {
                let cut = (rng.next_u64() as usize) % (len + 1);
                let (a, b) = buf.split_at_mut(cut);
                m.read_vectored_at(&mut [a, b], offset).unwrap();
                assert!(
                    buf == &model[offset as usize..][..len],
                    "round {round}: vectored read at {offset} len {len}"
                );
            }
            _ => {
                for b in buf.iter_mut() {
                    *b = rng.next_u64() as u8;
                }
                m.write_durable_at(buf, offset).unwrap();
                model[offset as usize..][..len].copy_from_slice(buf);
            }
        }
        if round % 50 == 0 {
            let (at, n) = (rng.next_u64() % SIZE, rng.next_u64() % 70_000);
            let n = n.min(SIZE - at);
            if rng.next_u64().is_multiple_of(2) {
                m.trim(at, n).unwrap();
            } else {
                m.write_zeroes(at, n).unwrap();
            }
            model[at as usize..][..n as usize].fill(0);
        }
    }
    m.flush().unwrap();
    let mut all = AlignedBuf::zeroed(SIZE as usize, 0);
    m.read_at(&mut all, 0).unwrap();
    assert!(all[..] == model[..], "whole member differs from the model");
}

/// Unaligned writes to different bytes of the same blocks from many threads at once: the
/// read-modify-write of partial blocks loses none of them.
#[test]
fn concurrent_partial_block_writes_keep_each_other() {
    let dir = direct_dir();
    let m = Arc::new(create(&dir.path().join("m.img"), 1 << 20));
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                for i in 0..200u64 {
                    // Thread t owns bytes t, t+8, t+16, ... of the first 8 KiB.
                    let at = (i * 8 + u64::from(t)) % 8192;
                    m.write_at(&[t + 1], at).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut buf = vec![0u8; 8192];
    m.read_at(&mut buf, 0).unwrap();
    for (i, &b) in buf.iter().enumerate() {
        let owner = (i % 8) as u8;
        // 200 writes of 8 bytes apart cover 1600 bytes per thread, wrapping at 8192: bytes
        // below 1600 were written by their owner.
        if i < 1600 {
            assert_eq!(b, owner + 1, "byte {i} lost its write");
        }
    }
}

/// An aligned write of a whole block racing a partial write into the same block (overlapping
/// client writes, which no stripe lock orders on linear and RAID 0): whichever lands last, the
/// bytes outside the partial write are the aligned write's. Without the block locks, the aligned
/// write could land between the read and the write-back of the partial write's read-modify-write,
/// which then put back the block's old bytes: bytes neither write left.
#[test]
fn aligned_write_racing_a_partial_write_of_its_block_is_not_undone() {
    let dir = direct_dir();
    let file = create(&dir.path().join("m.img"), 1 << 20);
    let block = file.direct_align().unwrap() as usize;
    let m: Arc<dyn Member> = Arc::new(file);
    let writer = Arc::clone(&m);
    common::race_aligned_and_partial_writes(&m, block, 1000, |b| writer.write_at(b, 0).unwrap());
}

/// By default a file member is buffered; a size that is not a multiple of the block size is
/// refused under direct I/O; `open_with` honours `member_cache`. (tmpfs accepts O_DIRECT since
/// Linux 6.6, so the refusal of a filesystem without it cannot be shown here.)
#[test]
fn refusals_and_defaults() {
    let opts = OpenOptions {
        create_size: Some(1 << 20),
        ..OpenOptions::default()
    };
    let dir = direct_dir();
    let path = dir.path().join("plain.img");
    let plain = FileMember::open(&path, "plain.img", &opts).unwrap();
    assert!(!plain.is_direct(), "a file is buffered by default");
    drop(plain);
    let odd = dir.path().join("odd.img");
    std::fs::write(&odd, vec![1u8; 4096 + 100]).unwrap();
    let err = FileMember::open_cached(
        &odd,
        "odd.img",
        &OpenOptions::default(),
        MemberCache::Direct,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("not a multiple") && err.contains("odd.img"),
        "{err}"
    );
    let via_open = member::open_with(
        path.to_str().unwrap(),
        &OpenOptions::default(),
        &member::RemoteOptions {
            member_cache: MemberCache::Direct,
            ..member::RemoteOptions::default()
        },
    );
    assert!(via_open.is_ok(), "open_with honours member_cache");
}
