//! Who serves an array: the owner record ([`Owner`], `feature_compat` bit 1) a serving process
//! keeps on every member, and the judgement a second assembly makes of it ([`judge`]).
//!
//! Local members are protected by the exclusive hold the member layer takes (a lock or an
//! exclusive open); members reached over the network (NBD) are not, since a second host cannot
//! see a lock taken on the first. So the process that assembles an array for writing records
//! itself on every member (host, boot, pid namespace, pid, process start time) with a lease,
//! renews the lease while it serves ([`LEASE_RENEW_INTERVAL`]) and clears the record at a clean
//! stop. Another assembly that finds a live owner refuses:
//!
//! - the same host (same machine id, boot and pid namespace): the owner is alive exactly when
//!   its pid runs with the recorded start time — a killed server frees the array at once;
//! - another host (or a process it cannot look at): the owner is alive until its lease runs
//!   out, `renewed_secs + lease_secs` by the reader's clock. Hosts' clocks must agree within
//!   `LEASE - LEASE_RENEW_INTERVAL` (20 s).
//!
//! ```
//! use ondisk::owner::{judge, Liveness, ThisHost};
//! let me = ThisHost::get();
//! let mine = me.owner_record(100, 30);
//! assert_eq!(judge(&mine, &me, 110), Liveness::ThisProcess);
//! let mut other_host = mine.clone();
//! other_host.process.host_id = [7; 16];
//! assert!(matches!(judge(&other_host, &me, 110), Liveness::Live { .. }));
//! assert_eq!(judge(&other_host, &me, 131), Liveness::Gone);
//! ```

use std::time::Duration;

use crate::superblock::{Owner, OwnerProcess, OWNER_HOST_NAME_BYTES_MAX};

/// How long an owner on another host stays presumed alive after its last renewal.
pub const LEASE_SECS: u32 = 30;
/// How often a serving process renews its lease.
pub const LEASE_RENEW_INTERVAL: Duration = Duration::from_secs(10);

/// This process, as an owner record names it ([`ThisHost::get`]).
pub type ThisHost = OwnerProcess;

/// What a second assembly concludes from an owner record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// The record names this very process.
    ThisProcess,
    /// The owner may still be writing: refuse. `local`: it runs on this host (seen in /proc).
    Live { local: bool },
    /// The owner is gone: its process ended, its host rebooted, or its lease ran out.
    Gone,
}

impl OwnerProcess {
    /// This process's identity, from /etc/machine-id, the boot id and /proc/self.
    pub fn get() -> ThisHost {
        let host_name = host_name();
        let host_id = machine_id().unwrap_or_else(|| hash16(host_name.as_bytes()));
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .and_then(|s| parse_hex16(&s.replace('-', "")))
            .unwrap_or([0; 16]);
        let pid = std::process::id();
        ThisHost {
            host_id,
            boot_id,
            pid_namespace: pid_namespace(),
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
            host_name,
        }
    }

    /// The owner record of this process, taken at `since_secs`, with a lease of `lease_secs`.
    pub fn owner_record(&self, since_secs: u64, lease_secs: u32) -> Owner {
        assert!(lease_secs > 0);
        Owner {
            process: self.clone(),
            since_secs,
            renewed_secs: since_secs,
            lease_secs,
        }
    }

    /// Whether `owner`'s process can be looked up in this host's /proc.
    fn sees(&self, owner: &Owner) -> bool {
        owner.process.host_id == self.host_id
            && owner.process.boot_id == self.boot_id
            && owner.process.boot_id != [0; 16]
            && owner.process.pid_namespace == self.pid_namespace
            && owner.process.pid_namespace != 0
    }
}

/// Judges `owner` as seen by `me` at `now_secs` (see the module doc).
pub fn judge(owner: &Owner, me: &ThisHost, now_secs: u64) -> Liveness {
    if me.sees(owner) {
        if owner.process.pid == me.pid && owner.process.start_ticks == me.start_ticks {
            return Liveness::ThisProcess;
        }
        let running =
            start_ticks(owner.process.pid).is_some_and(|t| t == owner.process.start_ticks);
        return match running {
            true => Liveness::Live { local: true },
            false => Liveness::Gone,
        };
    }
    let expires = owner
        .renewed_secs
        .saturating_add(u64::from(owner.lease_secs));
    match now_secs < expires {
        true => Liveness::Live { local: false },
        false => Liveness::Gone,
    }
}

/// Seconds until `owner`'s lease runs out at `now_secs` (0 if it has).
pub fn lease_left_secs(owner: &Owner, now_secs: u64) -> u64 {
    owner
        .renewed_secs
        .saturating_add(u64::from(owner.lease_secs))
        .saturating_sub(now_secs)
}

fn machine_id() -> Option<[u8; 16]> {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| parse_hex16(std::fs::read_to_string(p).ok()?.trim()))
}

fn parse_hex16(text: &str) -> Option<[u8; 16]> {
    let text = text.trim();
    if text.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// 16 bytes from `data`: two FNV-1a hashes (for hosts without a machine id).
fn hash16(data: &[u8]) -> [u8; 16] {
    let fnv = |seed: u64| {
        data.iter().fold(seed, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_le_bytes());
    out[8..].copy_from_slice(&fnv(0x8422_2325_cbf2_9ce4).to_le_bytes());
    out
}

/// The host name, cut to what an owner record keeps (at a character boundary).
fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mut cut = name.replace('\0', "");
    while cut.len() > OWNER_HOST_NAME_BYTES_MAX {
        cut.pop();
    }
    cut
}

/// The inode of this process's pid namespace (0 if unknown).
fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid")
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// Field 22 of /proc/PID/stat: the process's start time in clock ticks after boot.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_owner_lives_exactly_as_long_as_its_process() {
        let me = ThisHost::get();
        assert_ne!(me.start_ticks, 0, "/proc/self/stat is readable");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let mut theirs = me.owner_record(1000, 30);
        theirs.process.pid = child.id();
        theirs.process.start_ticks = start_ticks(child.id()).unwrap();
        // Alive: live whatever its lease says (a stopped process still owns the array).
        assert_eq!(
            judge(&theirs, &me, 1_000_000),
            Liveness::Live { local: true }
        );
        // The same pid with another start time is a reused pid, not the owner.
        let mut reused = theirs.clone();
        reused.process.start_ticks += 1;
        assert_eq!(judge(&reused, &me, 1000), Liveness::Gone);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            judge(&theirs, &me, 1000),
            Liveness::Gone,
            "killed: gone at once"
        );
        // Rebooted since: gone even within the lease... unless another host shares the ids,
        // so a different boot falls back to the lease.
        let mut rebooted = theirs.clone();
        rebooted.process.boot_id[0] ^= 1;
        assert_eq!(judge(&rebooted, &me, 1029), Liveness::Live { local: false });
        assert_eq!(judge(&rebooted, &me, 1030), Liveness::Gone);
    }

    #[test]
    fn a_remote_owner_lives_until_its_lease_runs_out() {
        let me = ThisHost::get();
        let mut theirs = me.owner_record(500, 30);
        theirs.process.pid_namespace ^= 1; // another container on this kernel: cannot look it up
        theirs.renewed_secs = 900;
        assert_eq!(judge(&theirs, &me, 900), Liveness::Live { local: false });
        assert_eq!(judge(&theirs, &me, 929), Liveness::Live { local: false });
        assert_eq!(lease_left_secs(&theirs, 929), 1);
        assert_eq!(judge(&theirs, &me, 930), Liveness::Gone);
        assert_eq!(lease_left_secs(&theirs, 2000), 0);
    }

    #[test]
    fn ids_parse_and_names_are_cut() {
        assert_eq!(
            parse_hex16("3d1219c7c4c5404aaa1f6d2a48adfda4\n"),
            Some([
                0x3d, 0x12, 0x19, 0xc7, 0xc4, 0xc5, 0x40, 0x4a, 0xaa, 0x1f, 0x6d, 0x2a, 0x48, 0xad,
                0xfd, 0xa4
            ])
        );
        assert_eq!(parse_hex16("xyz"), None);
        assert_ne!(hash16(b"a"), hash16(b"b"));
        assert!(host_name().len() <= OWNER_HOST_NAME_BYTES_MAX);
    }
}
