//! The flash (SSD, NVMe) model.
//!
//! A request takes the first free of `channels` parallel units (NAND dies and channels behind
//! the controller) for its latency (the array read or program time with the controller's work),
//! then crosses the link one request at a time, taking `len / bandwidth` but at least
//! `1 / max_iops` (the controller's per-command limit). Requests are served in arrival order, so
//! a completion is known when the request arrives.
//!
//! The parameters are the published figures themselves ([`FlashParams`]): the latency is
//! chosen so that queue depth 1 gives the published QD1 IOPS, and the link so that deep queues
//! give the published maximum IOPS and sequential bandwidth. What the model adds is the curve in
//! between (queue depths 2–16, other request sizes, mixes) and the interaction with the array.

use crate::request::{Op, Request};
use crate::{Nanos, NS_PER_SEC};

/// A flash drive's published figures (4 KiB random IOPS, sequential MB/s = 10^6 bytes/s).
#[derive(Debug, Clone, PartialEq)]
pub struct FlashParams {
    /// 4 KiB random reads per second at queue depth 1.
    pub read_iops_qd1: f64,
    /// 4 KiB random writes per second at queue depth 1.
    pub write_iops_qd1: f64,
    /// 4 KiB random reads per second at depth (the datasheet's QD32 figure).
    pub read_iops_max: f64,
    /// 4 KiB random writes per second at depth.
    pub write_iops_max: f64,
    /// Sequential read bandwidth.
    pub read_mb_s: f64,
    /// Sequential write bandwidth.
    pub write_mb_s: f64,
    /// Requests served at once.
    pub channels: usize,
}

impl FlashParams {
    /// Link time of one request of `len` bytes, ns.
    fn link_ns(&self, write: bool, len: u64) -> f64 {
        let (bw, iops) = if write {
            (self.write_mb_s, self.write_iops_max)
        } else {
            (self.read_mb_s, self.read_iops_max)
        };
        (len as f64 / (bw * 1e6) * 1e9).max(1e9 / iops)
    }

    /// Latency of the parallel stage, ns: what makes a 4 KiB request at queue depth 1 take
    /// the published QD1 time.
    pub fn latency_ns(&self, write: bool) -> f64 {
        let qd1 = if write {
            self.write_iops_qd1
        } else {
            self.read_iops_qd1
        };
        let latency = 1e9 / qd1 - self.link_ns(write, 4096);
        assert!(latency > 0.0, "QD1 IOPS above the link's limit: {self:?}");
        latency
    }
}

/// One flash drive's state.
#[derive(Debug)]
pub struct Flash {
    p: FlashParams,
    read_latency: f64,
    write_latency: f64,
    /// When each channel is free.
    channels: Vec<Nanos>,
    link_free: Nanos,
    /// Latest completion of a write (what a flush waits for).
    written_until: Nanos,
}

impl Flash {
    /// A drive with these parameters.
    pub fn new(p: &FlashParams) -> Flash {
        assert!(p.channels >= 1);
        Flash {
            read_latency: p.latency_ns(false),
            write_latency: p.latency_ns(true),
            channels: vec![0; p.channels],
            p: p.clone(),
            link_free: 0,
            written_until: 0,
        }
    }

    /// The completion of `req` arriving at `at`.
    pub fn submit(&mut self, at: Nanos, req: &Request) -> Nanos {
        match req.op {
            Op::Flush => at.max(self.written_until),
            // A trim is a table update: one command's time on the link.
            Op::Trim => at + (NS_PER_SEC as f64 / self.p.write_iops_max) as Nanos,
            Op::Read | Op::Write => {
                let write = req.op == Op::Write;
                let (i, &free) = self
                    .channels
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, &f)| f)
                    .expect("a channel");
                let latency = if write {
                    self.write_latency
                } else {
                    self.read_latency
                };
                let ready = at.max(free) + latency as Nanos;
                self.channels[i] = ready;
                let start = ready.max(self.link_free);
                let done = start + self.p.link_ns(write, req.len).ceil() as Nanos;
                self.link_free = done;
                if write {
                    self.written_until = self.written_until.max(done);
                }
                done
            }
        }
    }
}
