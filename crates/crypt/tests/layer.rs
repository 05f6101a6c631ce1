//! The encryption layer over a RAM export: what lands below is ciphertext, what comes back is
//! the plaintext, for aligned and unaligned requests, zero units, trims and write-zeroes, and
//! racing writes to one unit (the read-modify-write under the unit locks).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crypt::{DataCipher, DataKey, Encrypted, DATA_KEY_BYTES};
use nbd::Export;
use testsupport::{first_difference, seed, Rng, SeedGuard};

/// A RAM export whose bytes the test can look at.
/// With `slow_reads`, every read of one unit sleeps 20 ms after copying (a slow member: the
/// window between a read-modify-write's read and its write).
#[derive(Clone)]
struct Ram(Arc<Mutex<Vec<u8>>>, Arc<AtomicBool>);

impl Ram {
    fn new(len: usize) -> Ram {
        Ram(Arc::new(Mutex::new(vec![0; len])), Arc::default())
    }
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

impl Export for Ram {
    fn size(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        {
            let d = self.0.lock().unwrap();
            buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        }
        if buf.len() == 512 && self.1.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        d[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.write_zeroes(offset, len, true)
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        d[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }
}

fn cipher(byte: u8) -> DataCipher {
    DataCipher::new(&DataKey::from_bytes([byte; DATA_KEY_BYTES]))
}

const SIZE: usize = 4 << 20;

#[test]
fn random_requests_read_back_as_a_plain_model_and_never_leave_plaintext_below() {
    let s = seed("random_requests_read_back");
    let _guard = SeedGuard(s, "random_requests_read_back");
    let mut rng = Rng::new(s);
    let ram = Ram::new(SIZE);
    let layer = Encrypted::new(ram.clone(), Some(cipher(3)));
    let mut model = vec![0u8; SIZE];
    let read = |layer: &Encrypted<Ram>, model: &[u8], off: usize, len: usize| {
        let mut got = vec![0xee; len];
        layer.read(off as u64, &mut got).unwrap();
        assert_eq!(
            first_difference(&got, &model[off..off + len]),
            None,
            "read {off}+{len}"
        );
    };
    // A fresh (zeroed) array reads zeroes.
    read(&layer, &model, 0, 8192);
    for round in 0..400 {
        // Lengths up to 2.5 MiB: pieces of 1 MiB; offsets mostly unaligned.
        let len = match rng.below(4) {
            0 => rng.range(1, 600),
            1 => rng.range(1, 70_000),
            2 => 512 * rng.range(1, 20),
            _ => rng.range(1, 2_600_000),
        };
        let off = match rng.chance(30) {
            true => 512 * rng.range(0, (SIZE - len) / 512),
            false => rng.range(0, SIZE - len),
        };
        match rng.below(10) {
            0 => {
                layer
                    .write_zeroes(off as u64, len as u64, rng.chance(50))
                    .unwrap();
                model[off..off + len].fill(0);
            }
            1 => {
                // Content of a trimmed range is unspecified; the whole units inside read zero.
                layer.trim(off as u64, len as u64).unwrap();
                let (lo, hi) = (off.div_ceil(512) * 512, (off + len) / 512 * 512);
                if lo < hi {
                    model[lo..hi].fill(0);
                }
            }
            2..=4 => read(&layer, &model, off, len),
            _ => {
                // Printable bytes, never all-zero units.
                let data: Vec<u8> = (0..len).map(|_| b'a' + rng.below(26) as u8).collect();
                layer.write(off as u64, &data, rng.chance(10)).unwrap();
                model[off..off + len].copy_from_slice(&data);
            }
        }
        if round % 50 == 49 {
            read(&layer, &model, 0, SIZE);
        }
    }
    read(&layer, &model, 0, SIZE);
    // Below: no 16-byte run of the printable plaintext survives anywhere.
    let below = ram.bytes();
    let plain_units = model
        .chunks(512)
        .filter(|u| u.iter().any(|&b| b != 0))
        .count();
    assert!(
        plain_units > 1000,
        "the test wrote too little: {plain_units} units"
    );
    for (i, unit) in below.chunks(512).enumerate() {
        if unit.iter().all(|&b| b == 0) {
            assert!(model[i * 512..][..512].iter().all(|&b| b == 0), "unit {i}");
            continue;
        }
        assert_ne!(
            unit,
            &model[i * 512..][..512],
            "unit {i} is plaintext below"
        );
        let printable_run = unit
            .windows(16)
            .any(|w| w.iter().all(|b| b.is_ascii_lowercase()));
        assert!(
            !printable_run,
            "unit {i} holds a run of the plaintext below"
        );
    }
}

#[test]
fn ciphertext_is_the_unit_at_its_array_sector_and_another_key_cannot_read_it() {
    let ram = Ram::new(1 << 20);
    let layer = Encrypted::new(ram.clone(), Some(cipher(1)));
    let data = vec![0x5a; 1024];
    layer.write(4096, &data, false).unwrap();
    let mut expect = data.clone();
    cipher(1).encrypt(&mut expect, 8);
    assert_eq!(&ram.bytes()[4096..5120], &expect[..]);
    // The same plaintext at another sector: another ciphertext.
    layer.write(8192, &data, false).unwrap();
    assert_ne!(&ram.bytes()[8192..9216], &expect[..]);
    let wrong = Encrypted::new(ram.clone(), Some(cipher(2)));
    let mut got = vec![0; 1024];
    wrong.read(4096, &mut got).unwrap();
    assert_ne!(got, data);
    // Without a cipher, a pass-through: the ciphertext.
    let plain = Encrypted::new(ram.clone(), None);
    plain.read(4096, &mut got).unwrap();
    assert_eq!(got, expect);
}

/// The race the unit locks exist for: a partial write of unit U reads U, merges and writes it
/// back; a write of the whole of U landing in between would be undone outside the partial
/// write's bytes. Each round: the partial write's read of U is slow (20 ms), and a write of
/// the whole of U starts 5 ms into it; the result must be one of the two orders.
#[test]
fn a_whole_unit_write_racing_a_partial_write_of_it_is_not_undone() {
    let ram = Ram::new(1 << 20);
    let layer = Arc::new(Encrypted::new(ram.clone(), Some(cipher(9))));
    for round in 0..10u64 {
        let whole = vec![round as u8 + 1; 512];
        let at = 512 * round;
        layer.write(at, &vec![0xff; 512], false).unwrap();
        ram.1.store(true, Ordering::SeqCst);
        std::thread::scope(|s| {
            let l = Arc::clone(&layer);
            let w = whole.clone();
            s.spawn(move || {
                std::thread::sleep(Duration::from_millis(5));
                l.write(at, &w, false).unwrap()
            });
            layer.write(at + 100, &[0xaa], false).unwrap();
        });
        ram.1.store(false, Ordering::SeqCst);
        let mut got = vec![0; 512];
        layer.read(at, &mut got).unwrap();
        let mut partial_last = whole.clone();
        partial_last[100] = 0xaa;
        assert!(
            got == whole || got == partial_last,
            "round {round}: byte 0 is {:#x}, not the whole write's {:#x}",
            got[0],
            whole[0]
        );
    }
}

/// The status of `[offset, offset + len)` through `layer`, as (length, zero) runs, asking
/// again from where each reply ends (as a client does).
fn statuses(layer: &Encrypted<Ram>, offset: u64, len: u64) -> Vec<(u64, bool)> {
    let mut runs: Vec<(u64, bool)> = Vec::new();
    let mut at = offset;
    while at < offset + len {
        let ask = u32::try_from(offset + len - at).unwrap_or(u32::MAX);
        let extents = layer.block_status(at, ask).unwrap();
        assert!(!extents.is_empty());
        for e in extents {
            assert!(!e.hole, "a RAM export has no holes");
            match runs.last_mut() {
                Some(last) if last.1 == e.zero => last.0 += u64::from(e.length),
                _ => runs.push((u64::from(e.length), e.zero)),
            }
            at += u64::from(e.length);
        }
    }
    assert_eq!(at, offset + len, "extents past the end asked");
    runs
}

#[test]
fn block_status_reports_units_of_zero_ciphertext_as_zeroes_and_the_rest_as_data() {
    let ram = Ram::new(SIZE);
    let layer = Encrypted::new(ram.clone(), Some(cipher(7)));
    // A new array: all zero, every byte (asked in several replies: ≤ 1 MiB each).
    assert_eq!(statuses(&layer, 0, SIZE as u64), vec![(SIZE as u64, true)]);
    // Data written at 1 MiB + 100 (3 units touched: 1 MiB .. 1 MiB + 1536) and 3 MiB (4 KiB),
    // zeroes written (encrypted: they are data below) at 2 MiB + 512.
    layer.write((1 << 20) + 100, &[0xa5; 1000], false).unwrap();
    layer.write(3 << 20, &[1; 4096], false).unwrap();
    layer.write((2 << 20) + 512, &[0; 512], false).unwrap();
    let runs = statuses(&layer, 0, SIZE as u64);
    assert_eq!(
        runs,
        vec![
            (1 << 20, true),
            (1536, false),
            ((1 << 20) - 1536 + 512, true),
            (512, false),
            ((1 << 20) - 1024, true),
            (4096, false),
            ((1 << 20) - 4096, true),
        ]
    );
    // Unaligned questions: the zero unit before the data, then the data, exactly as asked.
    assert_eq!(
        statuses(&layer, (1 << 20) - 10, 20),
        vec![(10, true), (10, false)]
    );
    // Every byte reported zero reads as zero through the layer; a trimmed unit reads zero again.
    layer.trim(3 << 20, 4096).unwrap();
    assert_eq!(statuses(&layer, 3 << 20, 8192), vec![(8192, true)]);
    let mut back = vec![1u8; 8192];
    layer.read(3 << 20, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0));
    // Without a cipher the layer below answers (a RAM export: all data).
    let plain = Encrypted::new(ram, None);
    assert!(!plain.block_status(0, 4096).unwrap()[0].zero);
}

/// A RAM export whose block status says `[hole.0, hole.1)` is a hole (and reads as zero).
struct Holey(Ram, (u64, u64));

impl Export for Holey {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        self.0.write(offset, data, fua)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.0.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool) -> io::Result<()> {
        self.0.write_zeroes(offset, len, may_trim)
    }
    fn block_status(&self, offset: u64, len: u32) -> io::Result<Vec<nbd::StatusExtent>> {
        let end = offset + u64::from(len);
        let (lo, hi) = (self.1 .0.clamp(offset, end), self.1 .1.clamp(offset, end));
        let parts = [(offset, lo, false), (lo, hi, true), (hi, end, false)];
        Ok(parts
            .into_iter()
            .filter(|&(a, b, _)| b > a)
            .map(|(a, b, hole)| nbd::StatusExtent {
                length: (b - a) as u32,
                hole,
                zero: hole,
            })
            .collect())
    }
}

#[test]
fn holes_below_pass_through_at_the_units_they_cover_whole() {
    // A hole from byte 700 to 700 + 2048: the units 1024..2560 lie in it whole.
    let layer = Encrypted::new(Holey(Ram::new(SIZE), (700, 2748)), Some(cipher(3)));
    let extents = layer.block_status(0, 4096).unwrap();
    let flags: Vec<(u32, bool, bool)> =
        extents.iter().map(|e| (e.length, e.hole, e.zero)).collect();
    assert_eq!(
        flags,
        vec![(1024, false, true), (1536, true, true), (1536, false, true)]
    );
}
