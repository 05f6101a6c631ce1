//! What reconstruct-writes on untrusted stripes cost (issue 10 item 1), in-process.
//!
//! `cargo run --release -p engine --example sync_write_bench` builds a RAID 5 of 5 RAM members
//! (64 MiB each, chunk 64 KiB) and times 200,000 random 4 KiB writes from one thread, three
//! rounds of: no `ParityTrust` set (a healthy array, no sync pending), a hook that calls every
//! stripe trusted (the cost of asking), and one that calls every stripe untrusted (what writes
//! do during an initial sync or resync: Rcw, 3 member reads instead of Rmw's 2). RAM members:
//! this measures the engine's CPU and memory traffic, not disks.

use engine::{Array, ArrayConfig, ParityTrust};
use member::{MemMember, Member};
use std::sync::Arc;
use std::time::Instant;

const MEMBERS: usize = 5;
const MEMBER_BYTES: u64 = 64 << 20;
const WRITES: u32 = 200_000;
const BLOCK_BYTES: u64 = 4096;

/// Calls every stripe untrusted (`true`) or trusted (`false`).
struct Every(bool);

impl ParityTrust for Every {
    fn parity_untrusted(&self, _stripe: u64) -> bool {
        self.0
    }
}

fn main() {
    let members: Vec<Option<Arc<dyn Member>>> = (0..MEMBERS)
        .map(|i| {
            let m = MemMember::new(&format!("m{i}"), MEMBER_BYTES).expect("RAM member");
            Some(Arc::new(m) as Arc<dyn Member>)
        })
        .collect();
    let config = ArrayConfig {
        level: "raid5".parse().expect("level"),
        chunk_bytes: 64 << 10,
        member_count: MEMBERS,
        member_data_bytes: vec![MEMBER_BYTES; MEMBERS],
    };
    let array = Array::new(config, members).expect("array");
    array.set_gather_wait(std::time::Duration::ZERO);
    let buf = vec![7u8; BLOCK_BYTES as usize];
    let blocks = array.size_bytes() / BLOCK_BYTES;
    let mut x = 1u64;
    let cases = [
        ("no hook", None),
        ("hook, all trusted", Some(false)),
        ("hook, all untrusted (Rcw)", Some(true)),
    ];
    for round in 0..3 {
        for (name, untrusted) in cases {
            let hook = untrusted.map(|u| Arc::new(Every(u)) as Arc<dyn ParityTrust>);
            array.set_parity_trust(hook);
            let started = Instant::now();
            for _ in 0..WRITES {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                array
                    .write((x % blocks) * BLOCK_BYTES, &buf)
                    .expect("write");
            }
            let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(WRITES);
            println!("round {round} {name}: {us:.2} us per 4 KiB write");
        }
    }
}
