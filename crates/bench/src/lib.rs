//! `raidkit bench`'s library: built-in workloads over NBD (no fio), measured with raidkit's own
//! NBD client.
//!
//! - [`workload`]: the workloads, the sweeps that expand them into cases, and the operations
//!   each issuing slot makes (pure and seeded, so `raidkit plan` predicts the same cases);
//! - [`stats`]: latency histograms (hdrhistogram) and [`stats::Figures`] (IOPS, MB/s, latency
//!   percentiles), what a run measures and a prediction fills in;
//! - [`run`]: one case against one target, `clients` connections × `queue_depth` requests in
//!   flight;
//! - [`report`]: the serialisable report (`--json`), comparison ratios, the table;
//! - [`plot`]: the SVG/PNG plot;
//! - [`files`]: the file-level tests (ext4 over the export: one large file, many small ones).

pub mod files;
pub mod plot;
pub mod report;
pub mod run;
pub mod stats;
pub mod workload;
