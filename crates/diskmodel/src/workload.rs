//! Closed-loop workloads in virtual time: `queue_depth` requests always outstanding, each
//! replaced by the next the moment it completes, as fio does with `iodepth`. No clock, no
//! sleep: an hour of disk time runs in well under a second of CPU for a disk.

use crate::drive::{Drive, Ticket};
use crate::models::{Model, Options};
use crate::request::{Op, Request};
use crate::{Nanos, SimRng, NS_PER_SEC};

/// Where the requests of a run go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Uniformly random, aligned to the request size.
    Random,
    /// One after the other from the start of the span.
    Sequential,
}

/// A workload: what each request is and where it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Read or write.
    pub op: Op,
    /// Bytes per request.
    pub size: u64,
    /// Random or sequential.
    pub access: Access,
    /// Requests outstanding.
    pub queue_depth: usize,
    /// Requests completed before the run ends.
    pub requests: usize,
}

/// Most requests one run takes (each keeps its latency).
pub const MAX_REQUESTS: usize = 10_000_000;

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Requests completed.
    pub requests: usize,
    /// Bytes moved.
    pub bytes: u64,
    /// From the first submission to the last completion.
    pub elapsed: Nanos,
    /// Each request's latency, sorted.
    latencies: Vec<Nanos>,
}

impl Stats {
    /// Requests per second.
    pub fn iops(&self) -> f64 {
        self.requests as f64 * NS_PER_SEC as f64 / self.elapsed as f64
    }

    /// MB/s (10^6 bytes per second).
    pub fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 * NS_PER_SEC as f64 / self.elapsed as f64
    }

    /// Mean latency, ms.
    pub fn mean_ms(&self) -> f64 {
        self.latencies.iter().sum::<u64>() as f64 / self.latencies.len() as f64 / 1e6
    }

    /// The `p`-th percentile latency (0–100), ms.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        let i = ((p / 100.0) * (self.latencies.len() - 1) as f64).round() as usize;
        self.latencies[i] as f64 / 1e6
    }
}

/// Runs `w` on a fresh drive of `size` bytes of `model` and measures it. Random offsets come
/// from `seed`.
pub fn run(model: &Model, options: &Options, size: u64, w: &Workload, seed: u64) -> Stats {
    assert!(w.queue_depth >= 1 && w.requests >= 1 && w.requests <= MAX_REQUESTS);
    assert!(w.size >= 1 && w.size <= size);
    let mut drive = Drive::new(model, options, size);
    let mut rng = SimRng::new(seed);
    let slots = size / w.size;
    let mut next_seq = 0u64;
    let mut next_offset = |rng: &mut SimRng| match w.access {
        Access::Random => rng.below(slots) * w.size,
        Access::Sequential => {
            let at = next_seq % slots * w.size;
            next_seq += 1;
            at
        }
    };
    let mut submit = |drive: &mut Drive, rng: &mut SimRng, at: Nanos| -> (Ticket, Nanos) {
        let req = Request {
            op: w.op,
            offset: next_offset(rng),
            len: w.size,
        };
        (
            drive
                .submit(at, req)
                .expect("a closed loop stays below the bound"),
            at,
        )
    };
    let mut outstanding: Vec<(Ticket, Nanos)> = Vec::with_capacity(w.queue_depth);
    let mut issued = 0;
    while issued < w.queue_depth.min(w.requests) {
        outstanding.push(submit(&mut drive, &mut rng, 0));
        issued += 1;
    }
    let mut latencies = Vec::with_capacity(w.requests);
    let mut now = 0;
    while latencies.len() < w.requests {
        let first_done = outstanding
            .iter()
            .enumerate()
            .filter_map(|(i, &(t, _))| drive.completion(t).map(|d| (d, i)))
            .min();
        let event = drive.next_event();
        match (first_done, event) {
            (Some((done, _)), Some(e)) if e < done => drive.advance(e),
            (Some((done, i)), _) => {
                let (ticket, at) = outstanding.swap_remove(i);
                drive.forget(ticket);
                now = done;
                latencies.push(done - at);
                if issued < w.requests {
                    drive.advance(now);
                    outstanding.push(submit(&mut drive, &mut rng, now));
                    issued += 1;
                }
            }
            (None, Some(e)) => drive.advance(e),
            (None, None) => unreachable!("requests outstanding with nothing ahead"),
        }
    }
    latencies.sort_unstable();
    Stats {
        requests: latencies.len(),
        bytes: latencies.len() as u64 * w.size,
        elapsed: now,
        latencies,
    }
}
