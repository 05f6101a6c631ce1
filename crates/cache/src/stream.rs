//! Sequential-stream detection for read-ahead: a small table of detectors shared by all
//! connections, each following one stream (unlike nbdkit's readahead filter, whose single
//! window is shared by every client and so thrashes when two of them read).
//!
//! A read continues a stream if it starts within one request length of where the stream's
//! last read ended and ends past it. Otherwise it takes over the least recently used
//! detector. A stream keeps the `window` bytes after its last read requested from the
//! export; it asks in jobs of at least half a window, so a 128 KiB reader causes 512 KiB
//! reads below rather than one per request.

use std::ops::Range;

use crate::config::ReadAhead;

/// Consecutive sequential reads after which adaptive mode reads ahead.
pub(crate) const ADAPTIVE_READS: u32 = 2;

#[derive(Debug, Clone, Copy, Default)]
struct Detector {
    /// Where the stream's reads have reached (exclusive end).
    next: u64,
    /// Reads seen in this stream.
    reads: u32,
    /// Read-ahead was requested up to here (exclusive).
    ahead: u64,
    /// Last use (tick); 0 = never used.
    used: u64,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Streams {
    detectors: Vec<Detector>,
    tick: u64,
    mode: ReadAhead,
    window_bytes: u64,
    export_bytes: u64,
}

impl Streams {
    pub fn new(count: usize, mode: ReadAhead, window_bytes: u64, export_bytes: u64) -> Self {
        assert!(count >= 1);
        if mode != ReadAhead::Off {
            assert!(
                window_bytes >= 2,
                "read-ahead window of {window_bytes} bytes"
            );
        }
        Streams {
            detectors: vec![Detector::default(); count],
            tick: 0,
            mode,
            window_bytes,
            export_bytes,
        }
    }

    /// A client read `[offset, offset + len)`. If the stream it belongs to should read
    /// ahead, offers the byte range to `enqueue`, which returns where the part it took ends
    /// (the rest is offered again on the stream's next read). Returns whether read-ahead is
    /// active for this read (its stream is followed), whether or not anything was offered.
    pub fn observe(
        &mut self,
        offset: u64,
        len: u64,
        enqueue: impl FnOnce(Range<u64>) -> u64,
    ) -> bool {
        if self.mode == ReadAhead::Off || len == 0 {
            return false;
        }
        let end = offset + len;
        assert!(end <= self.export_bytes, "read past the export");
        self.tick += 1;
        let index = self.continue_or_start(offset, end);
        let detector = &mut self.detectors[index];
        detector.used = self.tick;
        if self.mode == ReadAhead::Adaptive && detector.reads < ADAPTIVE_READS {
            return false;
        }
        let target = end.saturating_add(self.window_bytes).min(self.export_bytes);
        let start = detector.ahead.max(end);
        if start >= target {
            return true;
        }
        let small = target - start < self.window_bytes / 2;
        if small && target < self.export_bytes {
            return true;
        }
        let taken = enqueue(start..target);
        assert!((start..=target).contains(&taken), "enqueue took {taken}");
        detector.ahead = detector.ahead.max(taken);
        true
    }

    /// The detector whose stream `[offset, end)` continues, updated; or a fresh one.
    fn continue_or_start(&mut self, offset: u64, end: u64) -> usize {
        let len = end - offset;
        let found = self
            .detectors
            .iter()
            .position(|d| d.used > 0 && end > d.next && offset <= d.next.saturating_add(len));
        if let Some(index) = found {
            let detector = &mut self.detectors[index];
            detector.reads = detector.reads.saturating_add(1);
            detector.next = end;
            return index;
        }
        let (index, _) = self
            .detectors
            .iter()
            .enumerate()
            .min_by_key(|(_, d)| d.used)
            .expect("at least one detector");
        self.detectors[index] = Detector {
            next: end,
            reads: 1,
            ahead: end,
            used: 0,
        };
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    /// Feeds reads, returns every range offered (all accepted).
    fn run(mode: ReadAhead, reads: &[(u64, u64)]) -> Vec<Range<u64>> {
        let mut streams = Streams::new(4, mode, 1024 * K, 1 << 30);
        let mut offered = Vec::new();
        for &(offset, len) in reads {
            streams.observe(offset, len, |r| {
                offered.push(r.clone());
                r.end
            });
        }
        offered
    }

    fn sequential(count: u64, start: u64) -> Vec<(u64, u64)> {
        (0..count).map(|i| (start + i * 128 * K, 128 * K)).collect()
    }

    #[test]
    fn adaptive_starts_on_the_second_sequential_read() {
        let offered = run(ReadAhead::Adaptive, &sequential(2, 0));
        assert_eq!(offered, vec![(256 * K..1280 * K)]);
        assert!(run(ReadAhead::Adaptive, &sequential(1, 0)).is_empty());
        assert!(run(ReadAhead::Off, &sequential(50, 0)).is_empty());
        assert_eq!(
            run(ReadAhead::On, &sequential(1, 0)),
            vec![(128 * K..1152 * K)]
        );
    }

    #[test]
    fn window_stays_ahead_in_half_window_jobs() {
        let offered = run(ReadAhead::Adaptive, &sequential(12, 0));
        assert_eq!(
            offered,
            [256 * K..1280 * K, 1280 * K..1792 * K, 1792 * K..2304 * K]
        );
    }

    #[test]
    fn random_reads_do_not_trigger_adaptive() {
        let reads: Vec<_> = (0..100u64)
            .map(|i| ((i * 7919 % 1000) * 1024 * K, 128 * K))
            .collect();
        assert!(run(ReadAhead::Adaptive, &reads).is_empty());
        assert!(!run(ReadAhead::On, &reads).is_empty());
    }

    #[test]
    fn interleaved_streams_are_followed_separately() {
        let a = sequential(6, 0);
        let b = sequential(6, 512 << 20);
        let reads: Vec<_> = a.into_iter().zip(b).flat_map(|(x, y)| [x, y]).collect();
        let offered = run(ReadAhead::Adaptive, &reads);
        assert!(offered.contains(&(256 * K..1280 * K)));
        assert!(offered.contains(&((512 << 20) + 256 * K..(512 << 20) + 1280 * K)));
    }

    #[test]
    fn end_of_export_and_refusals() {
        let mut streams = Streams::new(2, ReadAhead::Adaptive, 1024 * K, 600 * K);
        let mut offered = Vec::new();
        for offset in [0, 128 * K, 256 * K, 384 * K] {
            streams.observe(offset, 128 * K, |r| {
                offered.push(r.clone());
                if offered.len() > 1 {
                    r.end
                } else {
                    r.start
                }
            });
        }
        // The first offer was refused and offered again; nothing reaches past 600 KiB.
        assert_eq!(offered, [256 * K..600 * K, 384 * K..600 * K]);
    }
}
