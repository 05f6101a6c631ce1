//! The named disk models and their options.

use std::fmt;
use std::str::FromStr;

use crate::flash::FlashParams;
use crate::hdd::{HddParams, Order};

/// A model's parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Model {
    /// A hard disk.
    Hdd(HddParams),
    /// A flash drive.
    Flash(FlashParams),
}

/// The named models (`sim:CLASS:SIZE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskClass {
    /// 3.5" 7200 rpm SATA disk.
    Hdd7200,
    /// 2.5" 10,000 rpm SAS disk.
    Hdd10k,
    /// 3.5" 15,000 rpm SAS disk.
    Hdd15k,
    /// SATA SSD.
    Ssd,
    /// PCIe 3.0 x4 NVMe SSD.
    Nvme,
}

/// Every class, in the order the docs list them.
pub const CLASSES: [DiskClass; 5] = [
    DiskClass::Hdd7200,
    DiskClass::Hdd10k,
    DiskClass::Hdd15k,
    DiskClass::Ssd,
    DiskClass::Nvme,
];

impl DiskClass {
    /// Every class.
    pub fn all() -> &'static [DiskClass] {
        &CLASSES
    }

    /// The name in a spec.
    pub fn name(self) -> &'static str {
        match self {
            DiskClass::Hdd7200 => "hdd7200",
            DiskClass::Hdd10k => "hdd10k",
            DiskClass::Hdd15k => "hdd15k",
            DiskClass::Ssd => "ssd",
            DiskClass::Nvme => "nvme",
        }
    }

    /// The real drive the parameters come from, and where each figure was published
    /// (docs/DESIGN.md "Disk models" has the full list and which figures are assumptions).
    pub fn source(self) -> &'static str {
        match self {
            DiskClass::Hdd7200 => {
                "HGST Ultrastar 7K4000 spec 4.4.1.1 (average seek 8.2 ms); 7200 rpm (4.17 ms \
                 average latency); 200 -> 100 MB/s outer -> inner, averaging 155 MB/s (WD Black \
                 4 TB: 154 MB/s, StorageReview); one-track 1.0 ms and full stroke 17 ms assumed \
                 (Hitachi 7K320 spec: 1.0 / 20 ms)"
            }
            DiskClass::Hdd10k => {
                "Seagate Savvio 10K.4 product manual 4.2.1 (average seek 3.8 / write 4.4 ms, \
                 single track 0.30, full stroke 7.81 ms, controller overhead 0.2 ms, 3.0 ms \
                 average latency, 677,557 bytes per track on average = 113 MB/s at 10K rpm, \
                 147,620 tracks per surface); inner/outer radius 0.55 assumed"
            }
            DiskClass::Hdd15k => {
                "Seagate Cheetah 15K.7 product manual 4.2.3 (122 -> 204 MB/s sustained, 2.0 ms \
                 average latency) and its seek table (3.4 ms average read, 3.9 write, 0.2 ms \
                 single track, 6.6 ms full stroke)"
            }
            DiskClass::Ssd => {
                "Samsung 850 EVO 1 TB data sheet: 540 / 520 MB/s sequential read / write, 4 KiB \
                 random QD1 10,000 / 40,000 IOPS, QD32 98,000 / 90,000 IOPS"
            }
            DiskClass::Nvme => {
                "Samsung 970 EVO Plus 1 TB data sheet: 3500 / 3300 MB/s sequential read / \
                 write, 4 KiB random QD1 19,000 / 60,000 IOPS, QD32 600,000 / 550,000 IOPS"
            }
        }
    }

    /// The model's parameters.
    pub fn model(self) -> Model {
        match self {
            DiskClass::Hdd7200 => Model::Hdd(HddParams {
                rpm: 7200.0,
                seek_avg_ms: 8.2,
                seek_track_ms: 1.0,
                seek_full_ms: 17.0,
                write_settle_ms: 0.0,
                tracks: 300_000,
                overhead_ms: 0.2,
                outer_mb_s: 200.0,
                inner_mb_s: 100.0,
                interface_mb_s: 600.0,
                cache_bytes: 64 << 20,
            }),
            DiskClass::Hdd10k => Model::Hdd(HddParams {
                rpm: 10_000.0,
                seek_avg_ms: 3.8,
                seek_track_ms: 0.3,
                seek_full_ms: 7.81,
                write_settle_ms: 0.6,
                tracks: 147_620,
                overhead_ms: 0.2,
                outer_mb_s: 146.0,
                inner_mb_s: 80.0,
                interface_mb_s: 600.0,
                cache_bytes: 16 << 20,
            }),
            DiskClass::Hdd15k => Model::Hdd(HddParams {
                rpm: 15_000.0,
                seek_avg_ms: 3.4,
                seek_track_ms: 0.2,
                seek_full_ms: 6.6,
                write_settle_ms: 0.5,
                tracks: 100_000,
                overhead_ms: 0.2,
                outer_mb_s: 204.0,
                inner_mb_s: 122.0,
                interface_mb_s: 600.0,
                cache_bytes: 16 << 20,
            }),
            DiskClass::Ssd => Model::Flash(FlashParams {
                read_iops_qd1: 10_000.0,
                write_iops_qd1: 40_000.0,
                read_iops_max: 98_000.0,
                write_iops_max: 90_000.0,
                read_mb_s: 540.0,
                write_mb_s: 520.0,
                channels: 16,
            }),
            DiskClass::Nvme => Model::Flash(FlashParams {
                read_iops_qd1: 19_000.0,
                write_iops_qd1: 60_000.0,
                read_iops_max: 600_000.0,
                write_iops_max: 550_000.0,
                read_mb_s: 3500.0,
                write_mb_s: 3300.0,
                channels: 64,
            }),
        }
    }
}

impl fmt::Display for DiskClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DiskClass {
    type Err = String;
    fn from_str(s: &str) -> Result<DiskClass, String> {
        CLASSES
            .iter()
            .copied()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = CLASSES.iter().map(|c| c.name()).collect();
                format!("unknown disk model {s:?}: give one of {}", names.join(", "))
            })
    }
}

/// How a modelled drive is set up (the spec's options: `cache=on|off`, `queue=N`,
/// `order=fifo|sstf|satf`, comma-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The disk's volatile write cache (HDD; flash ignores it).
    pub write_cache: bool,
    /// Commands the disk holds and reorders (HDD: NCQ's 32 tags by default).
    pub queue_depth: usize,
    /// How the disk picks its next command.
    pub order: Order,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            write_cache: true,
            queue_depth: 32,
            order: Order::ShortestAccess,
        }
    }
}

/// Largest `queue=` accepted (SAS drives take up to 256 tags).
pub const MAX_QUEUE_DEPTH: usize = 256;

impl Options {
    /// Parses `cache=on,queue=32,order=satf` (any subset, any order); the rest default.
    pub fn parse(text: &str) -> Result<Options, String> {
        let mut o = Options::default();
        for item in text.split(',').filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("disk model option {item:?} is not KEY=VALUE"))?;
            match key {
                "cache" => {
                    o.write_cache = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(format!("cache={value}: give cache=on or cache=off")),
                    }
                }
                "queue" => {
                    o.queue_depth = value
                        .parse()
                        .ok()
                        .filter(|q| (1..=MAX_QUEUE_DEPTH).contains(q))
                        .ok_or_else(|| {
                            format!("queue={value}: give a queue depth from 1 to {MAX_QUEUE_DEPTH}")
                        })?
                }
                "order" => {
                    o.order = match value {
                        "fifo" => Order::Fifo,
                        "sstf" => Order::ShortestSeek,
                        "satf" => Order::ShortestAccess,
                        _ => {
                            return Err(format!(
                                "order={value}: give fifo, sstf (shortest seek first) or satf \
                                 (shortest access time first)"
                            ))
                        }
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown disk model option {key:?}: the options are cache=on|off, \
                         queue=N, order=fifo|sstf|satf"
                    ))
                }
            }
        }
        Ok(o)
    }
}
