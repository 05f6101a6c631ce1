//! Member I/O counters (`Array::member_io_stats`): every member operation is counted at the one
//! place it passes, so the counts are what each level's algorithm issues (I/O amplification).

mod common;

use common::*;
use engine::Level;
use iostats::IoSnapshot;

/// Member (reads, writes, flushes) over every role.
fn totals(stats: &[IoSnapshot]) -> (u64, u64, u64) {
    let sum = |f: fn(&IoSnapshot) -> u64| stats.iter().map(f).sum();
    (
        sum(|s| s.read.ops),
        sum(|s| s.write.ops),
        sum(|s| s.flush.ops),
    )
}

#[test]
fn member_operations_are_counted_as_each_level_issues_them() {
    let chunk = 64 << 10;
    // (level, members, member reads and writes per 4 KiB write inside one chunk)
    let cases = [
        (Level::Raid1, 2, (0, 2)),
        (Level::Raid10, 4, (0, 2)),
        // RAID 5 of 4: reconstruct-write reads the two other data chunks' ranges, read-modify
        // -write the old data and parity: two reads either way, then data and parity written.
        (Level::Raid5, 4, (2, 2)),
        // RAID 6 of 5: reconstruct-write reads the two other data chunks (read-modify-write
        // would read three: data, P, Q), then data, P and Q are written.
        (Level::Raid6, 5, (2, 3)),
        (Level::Raid0, 2, (0, 1)),
        (Level::Linear, 2, (0, 1)),
    ];
    for (level, n, (reads, writes)) in cases {
        let members = mem_members(&member_sizes(n, chunk, 16));
        let array = array_over(level, chunk, &members, &[]);
        let writes_done = 10u64;
        for i in 0..writes_done {
            // One 4 KiB write per stripe row, never crossing a chunk (nor a linear array's
            // end, which need not be a whole chunk).
            let whole_chunks = array.size_bytes() / chunk * chunk;
            array
                .write(i * chunk * 8 % whole_chunks, &[7; 4096])
                .unwrap();
        }
        let stats = array.member_io_stats();
        assert_eq!(stats.len(), n);
        let (r, w, _) = totals(&stats);
        assert_eq!(
            (r, w),
            (reads * writes_done, writes * writes_done),
            "{level}: member reads and writes for {writes_done} 4 KiB writes"
        );
        let bytes: u64 = stats.iter().map(|s| s.write.bytes).sum();
        assert_eq!(bytes, writes * writes_done * 4096, "{level}");
        array.flush().unwrap();
        assert_eq!(
            totals(&array.member_io_stats()).2,
            n as u64,
            "{level}: one flush each"
        );
        assert!(stats
            .iter()
            .all(|s| s.in_flight == 0 && s.write.errors == 0));
        let timed = stats.iter().filter(|s| s.write.ops > 0);
        assert!(
            timed.clone().all(|s| s.busy_ns > 0 && s.write.time_ns > 0),
            "{level}"
        );
    }
}
