//! What plan is asked about: the disks (`4xhdd7200[:SIZE][:OPTIONS]`) and one array
//! configuration (level, members, chunk, read-ahead, journal).

use std::fmt;

use cache::ReadAhead;
use diskmodel::{DiskClass, Model, Options};
use layout::Level;
use serde::Serialize;

/// Most disks `--disks` takes (the sweep is over 1..=N members of each level).
pub const MAX_DISKS: usize = 16;

/// The disks plan may use: `count` drives of one class.
#[derive(Debug, Clone, PartialEq)]
pub struct Disks {
    pub count: usize,
    pub class: DiskClass,
    /// Bytes of each drive.
    pub size: u64,
    pub options: Options,
    /// How the engine reaches them.
    pub member_io: MemberIo,
    /// The spec as given (`4xhdd7200:1G`).
    pub spec: String,
}

/// A drive's size when the spec gives none: the drive the class is modelled on.
pub fn default_size(class: DiskClass) -> u64 {
    match class {
        // WD Black 4 TB.
        DiskClass::Hdd7200 => 4_000_000_000_000,
        // Savvio 10K.4 900 GB (ST9900805SS).
        DiskClass::Hdd10k => 900_000_000_000,
        // Cheetah 15K.7 600 GB (ST3600057SS).
        DiskClass::Hdd15k => 600_000_000_000,
        // Samsung 850 EVO 1 TB, 970 EVO Plus 1 TB.
        DiskClass::Ssd | DiskClass::Nvme => 1_000_000_000_000,
    }
}

/// Bits read per unrecoverable read error the class's data sheets give (1 sector lost per this
/// many bits read); docs/DESIGN.md "raidkit plan" names the sources.
pub fn ure_bits(class: DiskClass) -> f64 {
    match class {
        // Desktop SATA 7200 rpm (WD Black / Red Pro 4 TB: "< 1 in 10^14").
        DiskClass::Hdd7200 => 1e14,
        // Savvio 10K.4 and Cheetah 15K.7 product manuals: "less than 1 sector in 10^16 bits".
        DiskClass::Hdd10k | DiskClass::Hdd15k => 1e16,
        // Client SSD (JEDEC JESD218 client class: 10^15 required; 10^16 assumed for a current
        // drive); enterprise NVMe 10^17 (Viking Element SSD: "<1 sector in 10^17").
        DiskClass::Ssd => 1e16,
        DiskClass::Nvme => 1e17,
    }
}

impl Disks {
    /// Parses `NxCLASS[:SIZE][:OPTIONS]`, SIZE as `parse_size` reads it.
    pub fn parse(
        spec: &str,
        parse_size: impl Fn(&str) -> Result<u64, String>,
    ) -> Result<Disks, String> {
        let bad = || {
            format!(
                "--disks {spec:?}: give COUNTxCLASS[:SIZE][:OPTIONS], e.g. 4xhdd7200 or \
                 6xssd:1T or 4xhdd7200:1G:cache=off"
            )
        };
        let (count, rest) = spec.split_once('x').ok_or_else(bad)?;
        let count: usize = count.parse().map_err(|_| bad())?;
        if !(1..=MAX_DISKS).contains(&count) {
            return Err(format!("--disks {spec:?}: give 1 to {MAX_DISKS} disks"));
        }
        let mut parts = rest.splitn(3, ':');
        let class: DiskClass = parts.next().unwrap_or("").parse()?;
        let size = match parts.next() {
            None | Some("") => default_size(class),
            Some(s) => parse_size(s).map_err(|e| format!("--disks {spec:?}: {e}"))?,
        };
        if size < 64 << 20 {
            return Err(format!("--disks {spec:?}: each disk needs at least 64 MiB"));
        }
        let options = Options::parse(parts.next().unwrap_or(""))?;
        Ok(Disks {
            count,
            class,
            size,
            options,
            member_io: MemberIo::Ring,
            spec: spec.to_string(),
        })
    }

    pub fn model(&self) -> Model {
        self.class.model()
    }

    /// Sustained sequential rate of one drive, MB/s: (read, write).
    pub fn sequential_mb_s(&self) -> (f64, f64) {
        match self.model() {
            Model::Hdd(p) => (p.mean_mb_s(), p.mean_mb_s()),
            Model::Flash(p) => (p.read_mb_s, p.write_mb_s),
        }
    }
}

/// How the engine submits a request's member operations (DESIGN "engine": member I/O
/// submission).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberIo {
    /// io_uring: block devices and files; every member's share at once.
    Ring,
    /// Threads: `sim:` and NBD members; shares of 1 MiB or more on their own threads, the
    /// rest one after another on the request's thread.
    Threads,
}

/// Where writes are logged before they reach the members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JournalMode {
    /// No journal.
    None,
    /// RAID 5/6 stripe writes logged before they are written in place (closes the write hole).
    WriteThrough,
    /// Writes acknowledged once logged, applied to the members in the background.
    WriteBack,
}

impl fmt::Display for JournalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JournalMode::None => "none",
            JournalMode::WriteThrough => "write-through",
            JournalMode::WriteBack => "write-back",
        })
    }
}

/// One array configuration plan predicts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    #[serde(serialize_with = "level_name")]
    pub level: Level,
    pub members: usize,
    pub chunk: u64,
    pub read_ahead: ReadAhead,
    pub journal: JournalMode,
}

fn level_name<S: serde::Serializer>(level: &Level, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(level.name())
}

impl Config {
    /// `raid5 x4 128K ra=adaptive journal=none`.
    pub fn label(&self) -> String {
        let chunk = if matches!(self.level, Level::Linear | Level::Raid1) {
            String::new()
        } else {
            format!(
                " {}",
                bench::workload::size_text(self.chunk).replace("iB", "")
            )
        };
        format!(
            "{} x{}{} ra={} j={}",
            self.level.name(),
            self.members,
            chunk,
            self.read_ahead,
            self.journal
        )
    }

    /// The `raidkit serve --create` arguments of this configuration (journal path left to the
    /// user: JOURNAL).
    pub fn serve_args(&self) -> String {
        let mut a = format!(
            "--level {} --chunk {} --read-ahead {}",
            self.level.name(),
            bench::workload::size_text(self.chunk).replace("iB", ""),
            self.read_ahead
        );
        if self.journal != JournalMode::None {
            a.push_str(&format!(
                " --journal JOURNAL --journal-mode {}",
                self.journal
            ));
        }
        a
    }
}
