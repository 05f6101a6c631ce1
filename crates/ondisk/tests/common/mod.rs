//! Helpers shared by the format tests here and the `volume` tests (which include this file):
//! file members in a temporary directory, superblocks read and written back, hashing.

#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use member::{Member, OpenOptions};
use ondisk::{create, CreateOptions, Superblock, SUPERBLOCK_OFFSET};

pub const MEMBER_BYTES: u64 = 4 << 20;

/// Creates `count` sparse member files of [`MEMBER_BYTES`] named `prefix0..` in `dir`.
pub fn files(dir: &Path, prefix: &str, count: usize) -> Vec<PathBuf> {
    sized_files(dir, prefix, count, MEMBER_BYTES)
}

/// Creates `count` sparse files of `bytes` each named `prefix0..` in `dir`.
pub fn sized_files(dir: &Path, prefix: &str, count: usize, bytes: u64) -> Vec<PathBuf> {
    (0..count)
        .map(|i| {
            let path = dir.join(format!("{prefix}{i}"));
            let f = std::fs::File::create(&path).unwrap();
            f.set_len(bytes).unwrap();
            path
        })
        .collect()
}

/// Opens the member files without holding them (see [`open_unheld`]): these tests check the
/// library's own rules (e.g. a member given twice), which the exclusive hold would otherwise
/// pre-empt, and reopen members of volumes still alive; the hold is tested in crates/member
/// and crates/raidkit.
pub fn open_all(paths: &[PathBuf]) -> Vec<Arc<dyn Member>> {
    paths.iter().map(|p| open_unheld(p)).collect()
}

/// Creates an array of `level` over new files; returns the paths.
pub fn new_array(dir: &Path, prefix: &str, level: &str, count: usize) -> Vec<PathBuf> {
    let level = level.parse().unwrap();
    let bitmap = CreateOptions::new(level, prefix).bitmap_region_bytes;
    new_array_with(dir, prefix, level, count, bitmap)
}

/// Creates an array of `level` over new files with the given bitmap region (`None`: no
/// bitmap); returns the paths.
pub fn new_array_with(
    dir: &Path,
    prefix: &str,
    level: layout::Level,
    count: usize,
    bitmap_region_bytes: Option<u64>,
) -> Vec<PathBuf> {
    let paths = files(dir, prefix, count);
    let mut opts = CreateOptions::new(level, prefix);
    opts.chunk_bytes = 64 * 1024;
    opts.bitmap_region_bytes = bitmap_region_bytes;
    create(&open_all(&paths), &opts).unwrap();
    paths
}

pub fn hash_files(paths: &[PathBuf]) -> Vec<u64> {
    paths
        .iter()
        .map(|p| {
            let mut h = DefaultHasher::new();
            std::fs::read(p).unwrap().hash(&mut h);
            h.finish()
        })
        .collect()
}

/// Opens the member file at `path` without holding it, as a tool that looks behind the back of
/// an array that holds it (the tests corrupt and inspect members of open volumes).
pub fn open_unheld(path: &Path) -> Arc<dyn Member> {
    let opts = OpenOptions {
        exclusive: false,
        ..OpenOptions::default()
    };
    member::open(path.to_str().unwrap(), &opts).unwrap()
}

pub fn read_sb(path: &Path) -> Superblock {
    let m = open_unheld(path);
    ondisk::read_superblock(m.as_ref()).unwrap()
}

/// Re-encodes a changed superblock onto the member at `path` (a valid checksum).
pub fn write_sb(path: &Path, sb: &Superblock) {
    let m = open_unheld(path);
    m.write_at(&sb.encode()[..], SUPERBLOCK_OFFSET).unwrap();
}

pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The seed for randomised tests (`RAIDKIT_SEED` replays it).
pub fn seed() -> u64 {
    testsupport::seed("ondisk/volume")
}
