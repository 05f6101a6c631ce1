//! The service's configuration file: what it may say, how it is checked, and how `raidkit
//! examine --scan` writes the entries it finds on disks.
//!
//! The file is TOML (default `/etc/raidkit/raidkit.toml`):
//!
//! ```toml
//! [daemon]
//! listen = ["127.0.0.1:10809"]
//! admin = "/run/raidkit/admin.sock"
//! mdstat = "/run/raidkit/mdstat"   # /proc/mdstat's format, for node_exporter and telegraf
//!
//! [alerts]
//! program = "/usr/local/sbin/raid-alert"
//!
//! [[array]]
//! name = "home"
//! members = ["/dev/sdb", "/dev/sdc", "/dev/sdd", "nbd://backup-host/home"]
//! spares = ["/dev/sde"]
//! journal = "/dev/nvme0n1p3"
//! scrub_schedule = "monthly"
//! ```
//!
//! [`Config::parse`] checks everything that can be checked without opening a device: every key
//! is known and of the right type, values are in range, and no member, spare, journal, array
//! name or export name is used twice. Each problem names the file, the line and the key; all
//! problems are reported at once, and a file with any problem yields no `Config`, so nothing is
//! started or changed on a half-understood file.
//!
//! The daemon reads the file at start and again at each reload (SIGHUP, `raidkit reload`): a
//! reloaded file with any problem changes nothing, and for one without, [`ArrayConfig::changed_keys`]
//! (and `Daemon`'s and `Alerts`') name the keys whose values changed — values, not where they
//! stand in the file; members and spares as sets. Which of them a running array takes at once
//! (the speed limits, the read-error limits, the gather wait, the scrub schedule and the
//! background window) and which need its restart is the daemon's to say (README, "reload").
//!
//! Arrays are not created from the file (`raidkit create` does that); the file names the
//! members of arrays that exist, and the superblocks on them say the rest.

/// Serde for a type written as text in the file: read by its `parse`, written by its
/// `Display` (which `parse` reads back).
macro_rules! serde_as_text {
    ($t:ty) => {
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <String as serde::Deserialize>::deserialize(d)?;
                <$t>::parse(&text).map_err(serde::de::Error::custom)
            }
        }

        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_string())
            }
        }
    };
}

mod check;
mod diff;
mod model;
mod scan;
mod schedule;
mod values;

pub use check::{Problem, Problems};
pub use model::{
    Alerts, ArrayConfig, Config, Daemon, LogFormat, TlsMode, DEFAULT_LISTEN, DEFAULT_PATH,
};
pub use scan::{group, render_scan, ScannedArray, ScannedJournal, ScannedMember};
pub use schedule::{Cron, Schedule};
pub use toml::Spanned;
pub use values::{Rate, Size, TimeWindow};
