//! What a configuration risks: usable capacity, failures survived, rebuild time and the chance
//! that an unrecoverable read error during a rebuild loses data.

use layout::{Geometry, Level};
use serde::Serialize;

use crate::config::{ure_bits, Config, Disks};

/// What a configuration keeps and risks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Risk {
    /// Bytes the array offers.
    pub usable_bytes: u64,
    /// Members that may fail in any combination without losing data.
    pub failures_survived: usize,
    /// Members that may fail in the best case (RAID 10: one per pair).
    pub failures_survived_best: usize,
    /// Hours to rebuild one replaced member, sequential at the disk's rate (or the cap);
    /// `None` for levels that cannot rebuild.
    pub rebuild_hours: Option<f64>,
    /// Chance that an unrecoverable read error during the rebuild after one failure hits data
    /// with no other copy (that range is lost and recorded in the bad-block list; the rebuild
    /// goes on). `None` for levels that lose everything at the first failure.
    pub rebuild_loss_chance: Option<f64>,
    /// Bits read during that rebuild where an error cannot be repaired.
    pub unprotected_bits: f64,
}

/// The risk of `config` over `disks`, rebuilding at most `cap_mb_s` per disk when given.
pub fn risk(config: &Config, disks: &Disks, cap_mb_s: Option<f64>) -> Result<Risk, String> {
    let g = Geometry::new(
        config.level,
        config.chunk,
        &vec![disks.size; config.members],
    )
    .map_err(|e| e.to_string())?;
    let n = config.members;
    let member_bytes = g.member_data_bytes(0);
    let failures_survived = match config.level {
        Level::Linear | Level::Raid0 => 0,
        Level::Raid1 => n - 1,
        Level::Raid10 => 1,
        Level::Raid5 => 1,
        Level::Raid6 => 2,
    };
    let failures_survived_best = config.level.max_missing(n);
    let (read, write) = disks.sequential_mb_s();
    let rate = cap_mb_s.map_or(read.min(write), |c| read.min(write).min(c));
    let rebuild_hours =
        (failures_survived > 0).then(|| member_bytes as f64 / (rate * 1e6) / 3600.0);
    // Members whose every bit must read back without error after one failure: RAID 5 all
    // survivors; a 2-way mirror (RAID 1 of 2, RAID 10) the partner; RAID 6 and a 3-way mirror
    // still have a second copy of every bit.
    let unprotected_members = match config.level {
        Level::Linear | Level::Raid0 => 0,
        Level::Raid1 if n >= 3 => 0,
        Level::Raid1 | Level::Raid10 => 1,
        Level::Raid5 => n - 1,
        Level::Raid6 => 0,
    };
    let unprotected_bits = unprotected_members as f64 * member_bytes as f64 * 8.0;
    let rebuild_loss_chance =
        (failures_survived > 0).then(|| 1.0 - (-unprotected_bits / ure_bits(disks.class)).exp());
    Ok(Risk {
        usable_bytes: g.size_bytes(),
        failures_survived,
        failures_survived_best,
        rebuild_hours,
        rebuild_loss_chance,
        unprotected_bits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::JournalMode;
    use cache::ReadAhead;

    fn disks(spec: &str) -> Disks {
        Disks::parse(spec, |s| {
            let (n, unit) = s.split_at(s.len() - 1);
            let n: u64 = n.parse().map_err(|_| "size".to_string())?;
            Ok(n * match unit {
                "T" => 1_000_000_000_000,
                "G" => 1 << 30,
                _ => return Err("unit".into()),
            })
        })
        .unwrap()
    }

    fn config(level: &str, members: usize) -> Config {
        Config {
            level: level.parse().unwrap(),
            members,
            chunk: 128 << 10,
            read_ahead: ReadAhead::Adaptive,
            journal: JournalMode::None,
        }
    }

    #[test]
    fn raid5_of_4tb_desktop_disks_is_likely_to_meet_an_error_in_a_rebuild() {
        // 3 survivors x 4 TB = 9.6e13 bits at 1 per 1e14: 1 - e^-0.96 = 62 %.
        let d = disks("4xhdd7200:4T");
        let r = risk(&config("raid5", 4), &d, None).unwrap();
        let p = r.rebuild_loss_chance.unwrap();
        assert!((p - 0.617).abs() < 0.01, "{p}");
        assert_eq!(r.failures_survived, 1);
        // 4 TB at the zones' mean 150 MB/s: 7.4 h.
        let h = r.rebuild_hours.unwrap();
        assert!((7.0..7.8).contains(&h), "{h}");
        // A 100 MB/s cap makes it 11.1 h.
        let capped = risk(&config("raid5", 4), &d, Some(100.0)).unwrap();
        assert!((capped.rebuild_hours.unwrap() - 11.1).abs() < 0.1);
        // RAID 6 repairs a read error from Q; RAID 10 reads only the partner.
        assert_eq!(
            risk(&config("raid6", 4), &d, None)
                .unwrap()
                .rebuild_loss_chance,
            Some(0.0)
        );
        let r10 = risk(&config("raid10", 4), &d, None).unwrap();
        assert!((r10.rebuild_loss_chance.unwrap() - 0.274).abs() < 0.01);
        assert_eq!(r10.failures_survived_best, 2);
        // RAID 0 has nothing to rebuild.
        let r0 = risk(&config("raid0", 4), &d, None).unwrap();
        assert_eq!((r0.failures_survived, r0.rebuild_hours), (0, None));
        assert_eq!(r0.usable_bytes, 4 * r10.usable_bytes / 2);
    }

    #[test]
    fn enterprise_disks_make_the_same_rebuild_a_hundred_times_safer() {
        let p7200 = risk(&config("raid5", 4), &disks("4xhdd7200:600G"), None)
            .unwrap()
            .rebuild_loss_chance
            .unwrap();
        let p15k = risk(&config("raid5", 4), &disks("4xhdd15k:600G"), None)
            .unwrap()
            .rebuild_loss_chance
            .unwrap();
        assert!(p15k < p7200 / 90.0, "{p15k} vs {p7200}");
    }
}
