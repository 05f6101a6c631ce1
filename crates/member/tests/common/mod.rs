//! Shared by the member test binaries that need it.
#![allow(dead_code)]

use std::sync::{Arc, Barrier};

use member::{AlignedBuf, Member};

/// Races `rounds` aligned writes of one `block` at offset 0 of `m` (made by `aligned_write`,
/// through whichever path the test checks) against a partial write of bytes `block / 4` to
/// 256 KiB − 3 (a read-modify-write of its edge blocks, spanning many blocks so the aligned
/// write can land between its read and its write-back). After each round the partial write's
/// bytes are whole (all its or all the aligned write's) and the aligned write's bytes outside
/// them are its own, not undone.
pub fn race_aligned_and_partial_writes(
    m: &Arc<dyn Member>,
    block: usize,
    rounds: u32,
    aligned_write: impl Fn(&[u8]),
) {
    let (part_at, part_len) = (block / 4, (256 << 10) - 3);
    let barrier = Arc::new(Barrier::new(2));
    let partial = {
        let (m, barrier) = (Arc::clone(m), Arc::clone(&barrier));
        std::thread::spawn(move || {
            let bytes = vec![0xEEu8; part_len];
            for _ in 0..rounds {
                barrier.wait();
                m.write_at(&bytes, part_at as u64).unwrap();
                barrier.wait();
            }
        })
    };
    let mut whole = AlignedBuf::zeroed(block, 0);
    let mut got = vec![0u8; block];
    for round in 0..rounds {
        let mark = (round % 200) as u8 + 1;
        whole.fill(mark);
        barrier.wait();
        aligned_write(&whole);
        barrier.wait();
        m.read_at(&mut got, 0).unwrap();
        let inside = &got[part_at..];
        assert!(
            inside.iter().all(|&b| b == mark) || inside.iter().all(|&b| b == 0xEE),
            "round {round}: the partial write's bytes are torn"
        );
        if let Some(i) = got[..part_at].iter().position(|&b| b != mark) {
            panic!("round {round}: byte {i} is not the aligned write's");
        }
    }
    partial.join().unwrap();
}
