//! Concurrency: many threads write overlapping regions (each write a unique 8-byte token
//! repeated) that share stripes, while others read. Afterwards parity and mirrors are
//! consistent (`check()`), and every 8-byte word holds 0 or a token written to a region that
//! covers it; concurrent reads see only such values too. Degraded arrays (one member missing)
//! exercise rebuild-writes and reconstructing reads under the stripe locks.

mod common;

use common::*;
use engine::{Array, Level};
use std::collections::HashSet;

const WRITERS: u64 = 6;
const READERS: u64 = 2;
const WRITES_PER_THREAD: u64 = 40;
const REGIONS: usize = 8;

/// Regions aligned to 8 bytes, up to two stripes long, overlapping each other.
fn regions(rng: &mut Rng, array: &Array) -> Vec<(u64, u64)> {
    let g = array.geometry();
    let words = array.size_bytes() / 8;
    let max_words = 2 * g.chunk_bytes() * g.member_count() as u64 / 8;
    (0..REGIONS)
        .map(|_| {
            let start = rng.below(words - 1);
            let len = 1 + rng.below(max_words.min(words - start));
            (start * 8, len * 8)
        })
        .collect()
}

fn token_write(array: &Array, (offset, len): (u64, u64), token: u64) {
    let data: Vec<u8> = token
        .to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(len as usize)
        .collect();
    array.write(offset, &data).expect("write");
}

/// Asserts every word of `buf` (at array offset `offset`) is 0 or a token in `allowed`.
fn assert_words(buf: &[u8], offset: u64, allowed: &dyn Fn(u64, u64) -> bool, what: &str) {
    for (i, word) in buf.chunks_exact(8).enumerate() {
        let value = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        let at = offset + 8 * i as u64;
        assert!(
            value == 0 || allowed(at, value),
            "{what}: word at {at} holds {value:#x}"
        );
    }
}

fn hammer(level: Level, n: usize, missing: &[usize], rng: &mut Rng) {
    let members = mem_members(&member_sizes(n, 4 * KIB, 8));
    let array = array_over(level, 4 * KIB, &members, missing);
    array.set_fanout_min_bytes(rng.below(2) * u64::MAX);
    let regions = regions(rng, &array);
    let what = format!("{level} n={n} missing {missing:?}");
    let base = rng.next_u64();
    let written: Vec<(usize, u64)> = std::thread::scope(|scope| {
        let array = &array;
        let regions = &regions;
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                scope.spawn(move || {
                    let mut rng = Rng(base ^ t);
                    let mut mine = Vec::new();
                    for i in 0..WRITES_PER_THREAD {
                        let r = rng.below(REGIONS as u64) as usize;
                        let token = (t + 1) << 32 | (i + 1);
                        token_write(array, regions[r], token);
                        mine.push((r, token));
                    }
                    mine
                })
            })
            .collect();
        for t in 0..READERS {
            scope.spawn(move || {
                let mut rng = Rng(base ^ (100 + t));
                for _ in 0..WRITES_PER_THREAD {
                    let (offset, len) = regions[rng.below(REGIONS as u64) as usize];
                    let mut buf = vec![0u8; len as usize];
                    array.read(offset, &mut buf).expect("read");
                    // Any token of any writer is plausible while writes are in flight.
                    let plausible = |_: u64, v: u64| (1..=WRITERS).contains(&(v >> 32));
                    assert_words(&buf, offset, &plausible, "concurrent read");
                }
            });
        }
        writers
            .into_iter()
            .flat_map(|h| h.join().expect("writer"))
            .collect()
    });
    let tokens: Vec<HashSet<u64>> = (0..REGIONS)
        .map(|r| {
            written
                .iter()
                .filter(|(w, _)| *w == r)
                .map(|(_, t)| *t)
                .collect()
        })
        .collect();
    let allowed = |at: u64, value: u64| {
        regions
            .iter()
            .zip(&tokens)
            .any(|(&(o, l), set)| at >= o && at < o + l && set.contains(&value))
    };
    let mut image = vec![0u8; array.size_bytes() as usize];
    array.read(0, &mut image).expect("read");
    assert_words(&image, 0, &allowed, &what);
    let report = array.check().expect("check");
    assert!(report.is_consistent(), "{what}: {report:?}");
    if !missing.is_empty() {
        // Reads through the rebuilt path agree with a second, differently degraded view only
        // when parity is right; compare with the members read by a fresh array.
        let again = array_over(level, 4 * KIB, &members, missing);
        assert_reads(&again, &image, 0, image.len() as u64, &what);
    }
}

#[test]
fn overlapping_writes_keep_parity_and_mirrors_consistent() {
    for seed in seeds() {
        with_seed(
            "overlapping_writes_keep_parity_and_mirrors_consistent",
            seed,
            |rng| {
                for (level, n, missing) in [
                    (Level::Raid5, 4, vec![]),
                    (Level::Raid5, 3, vec![]),
                    (Level::Raid6, 5, vec![]),
                    (Level::Raid1, 3, vec![]),
                    (Level::Raid10, 3, vec![]),
                    (Level::Raid5, 4, vec![1]),
                    (Level::Raid6, 6, vec![0, 3]),
                    (Level::Raid6, 5, vec![2]),
                ] {
                    hammer(level, n, &missing, rng);
                }
            },
        );
    }
}

#[test]
fn degraded_concurrent_writes_rebuild_to_the_same_image() {
    // After concurrent writes on a RAID 5 missing member 0, re-reading with each other
    // member also treated as lost is impossible (only one may be missing), so instead compare
    // a RAID 6 written with one member missing against every further single loss.
    for seed in seeds() {
        with_seed(
            "degraded_concurrent_writes_rebuild_to_the_same_image",
            seed,
            |rng| {
                let n = 5;
                let members = mem_members(&member_sizes(n, 4 * KIB, 8));
                let array = array_over(Level::Raid6, 4 * KIB, &members, &[4]);
                let regions = regions(rng, &array);
                std::thread::scope(|scope| {
                    for t in 0..WRITERS {
                        let (array, regions) = (&array, &regions);
                        scope.spawn(move || {
                            for i in 0..WRITES_PER_THREAD {
                                let r = ((t * 7 + i) % REGIONS as u64) as usize;
                                token_write(array, regions[r], (t + 1) << 32 | (i + 1));
                            }
                        });
                    }
                });
                let mut image = vec![0u8; array.size_bytes() as usize];
                array.read(0, &mut image).expect("read");
                for second in 0..4 {
                    let view = array_over(Level::Raid6, 4 * KIB, &members, &[4, second]);
                    assert_reads(
                        &view,
                        &image,
                        0,
                        image.len() as u64,
                        &format!("also missing {second}"),
                    );
                }
            },
        );
    }
}
