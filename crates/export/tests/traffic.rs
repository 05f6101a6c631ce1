//! Journal traffic per client byte: the bytes written to the journal member (records and
//! superblocks, until the journal is drained and closed) divided by the bytes the client
//! wrote, for random 4 KiB, random 64 KiB and sequential 1 MiB writes on RAID 5 and RAID 6
//! with a write-back (and, for comparison, a write-through) journal. The figures are in
//! docs/PERFORMANCE.md ("Journal traffic per client byte"); run with `--nocapture` to see
//! them. The assertions bound them, so a change that logs more shows up here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use export::{AttachOptions, JournalLayer};
use journal::Mode;
use layout::Level;
use member::{Call, Hooked, MemMember, Member, Op};
use nbd::Export;
use ondisk::{create, CreateOptions, Uuid};
use volume::{assemble, AssembleOptions};

const CHUNK: u64 = 64 << 10;
const MEMBERS: usize = 5;
const MEMBER_BYTES: u64 = 24 << 20;
const JOURNAL_BYTES: u64 = 64 << 20;
const CLIENT_BYTES: u64 = 16 << 20;

#[derive(Clone, Copy, Debug)]
enum Workload {
    Random(u64),
    Sequential(u64),
}

/// A small xorshift: the offsets are the same on every run.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Journal bytes written per client byte for `workload` on `level` with a journal in `mode`.
fn journal_bytes_per_client_byte(level: Level, mode: Mode, workload: Workload) -> f64 {
    let members: Vec<Arc<dyn Member>> = (0..MEMBERS)
        .map(|i| {
            Arc::new(MemMember::new(&format!("m{i}"), MEMBER_BYTES).unwrap()) as Arc<dyn Member>
        })
        .collect();
    let mut opts = CreateOptions::new(level, "traffic");
    opts.chunk_bytes = CHUNK;
    opts.assume_clean = true;
    create(&members, &opts).unwrap();
    // The journal member, counting the bytes written to it.
    let journal_written = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&journal_written);
    let journal_ram = Arc::new(MemMember::new("journal", JOURNAL_BYTES).unwrap());
    let jm: Arc<dyn Member> = Arc::new(Hooked::new(journal_ram, move |call: &Call| {
        if call.is_write() || call.op == Op::WriteZeroes {
            count.fetch_add(call.len, Ordering::Relaxed);
        }
        Ok(())
    }));
    let jsb = journal::format(jm.as_ref(), Uuid::new_v4(), mode).unwrap();
    let volume = Arc::new(assemble(members, &AssembleOptions::default()).unwrap());
    let (attached, _) = JournalLayer::attach(jm, jsb, &volume, AttachOptions::default()).unwrap();
    let attached = Arc::new(attached);
    let export = attached.export();
    let start = journal_written.load(Ordering::Relaxed);
    let size = volume.size_bytes();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut written = 0;
    let mut at = 0;
    while written < CLIENT_BYTES {
        let (offset, len) = match workload {
            Workload::Random(len) => ((next(&mut rng) % (size / len)) * len, len),
            Workload::Sequential(len) => {
                let offset = at % (size / len * len);
                at += len;
                (offset, len)
            }
        };
        let data = vec![(written / len) as u8 | 1; len as usize];
        export.write(offset, &data, false).unwrap();
        written += len;
    }
    attached.drain().unwrap();
    volume.close().unwrap();
    attached.close().unwrap();
    let journal = journal_written.load(Ordering::Relaxed) - start;
    journal as f64 / written as f64
}

#[test]
fn journal_traffic_per_client_byte() {
    let workloads = [
        ("random 4 KiB", Workload::Random(4 << 10)),
        ("random 64 KiB", Workload::Random(64 << 10)),
        ("sequential 1 MiB", Workload::Sequential(1 << 20)),
    ];
    for level in [Level::Raid5, Level::Raid6] {
        for (name, workload) in workloads {
            let back = journal_bytes_per_client_byte(level, Mode::WriteBack, workload);
            let through = journal_bytes_per_client_byte(level, Mode::WriteThrough, workload);
            println!(
                "{level}, {MEMBERS} members, {} KiB chunks, {name}: journal bytes per client \
                 byte: write-back {back:.2}, write-through {through:.2}",
                CHUNK >> 10
            );
            // Every client byte is logged at least once in either mode.
            assert!(back >= 1.0 && through >= 1.0, "{level} {name}");
            // Write-back logs the client data once; applying it logs parity and refers to the
            // data: never more than one plus one parity chunk per data chunk (RAID 6: two).
            // (Logging the data twice, as before `StripeApply` records, fails this.)
            let parity = level.parity_count() as f64;
            assert!(back <= 1.0 + parity + 0.5, "{level} {name}: {back}");
        }
    }
}
