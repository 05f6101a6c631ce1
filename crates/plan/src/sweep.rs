//! The sweep: level × members × chunk × read-ahead × journal mode, each configuration
//! predicted (healthy and with one member failed) and judged; the recommendation and its
//! reasons.

use std::time::Duration;

use bench::stats::Figures;
use bench::workload::{Goal, Limit, Profile};
use cache::{CacheConfig, ReadAhead};
use layout::{Geometry, Level};
use serde::Serialize;

use crate::config::{Config, Disks, JournalMode};
use crate::risk::{risk, Risk};
use crate::sim::predict;

/// Chunk sizes the sweep tries on striped levels.
pub const CHUNKS: [u64; 3] = [64 << 10, 128 << 10, 512 << 10];

/// What to plan for.
#[derive(Debug, Clone)]
pub struct Ask {
    pub disks: Disks,
    /// The journal device of configurations with a journal.
    pub journal: Disks,
    pub profile: Profile,
    /// Usable bytes needed, if any.
    pub capacity: Option<u64>,
    /// Virtual time each configuration runs.
    pub runtime: Duration,
    pub seed: u64,
    /// Rebuild rate cap per disk, MB/s.
    pub rebuild_cap: Option<f64>,
    /// The read cache (its read-ahead is swept).
    pub cache: CacheConfig,
}

/// One configuration's prediction and risk.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub config: Config,
    pub label: String,
    pub figures: Figures,
    /// The same with member 0 failed (levels that survive it).
    pub degraded: Option<Figures>,
    pub risk: Risk,
    /// Offers the capacity asked for.
    pub fits: bool,
}

impl Row {
    /// The figure the profile is judged by.
    pub fn score(&self, goal: Goal) -> f64 {
        match goal {
            Goal::Iops => self.figures.iops,
            Goal::Throughput => self.figures.mb_s,
        }
    }
}

/// The whole answer.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub disks: String,
    pub member_io: crate::config::MemberIo,
    pub journal_disk: String,
    pub workload: String,
    pub about: String,
    pub goal: Goal,
    pub capacity: Option<u64>,
    pub runtime_s: f64,
    pub seed: u64,
    pub rows: Vec<Row>,
    /// Index into `rows`.
    pub recommended: Option<usize>,
    pub why: Vec<String>,
    /// The `raidkit bench` command that measures the recommended configuration on `sim:`
    /// members of the same class and size.
    pub bench_command: Option<String>,
}

/// Every configuration the sweep tries over `ask`'s disks. Dimensions a workload cannot feel
/// are not swept: read-ahead for a workload without reads, journals for one without writes.
pub fn configurations(ask: &Ask) -> Vec<Config> {
    let case = ask.profile.case(limit(ask));
    let reads = case.read_percent > 0;
    let writes = case.read_percent < 100;
    let mut out = Vec::new();
    for level in Level::ALL {
        let striped = !matches!(level, Level::Linear | Level::Raid1);
        let chunks: &[u64] = if striped {
            &CHUNKS
        } else {
            &[layout::CHUNK_BYTES_DEFAULT]
        };
        let read_aheads: &[ReadAhead] = if reads {
            &[ReadAhead::Off, ReadAhead::Adaptive, ReadAhead::On]
        } else {
            &[ReadAhead::Adaptive]
        };
        let journals: &[JournalMode] = match (writes, level.has_parity()) {
            (false, _) => &[JournalMode::None],
            (true, true) => &[
                JournalMode::None,
                JournalMode::WriteThrough,
                JournalMode::WriteBack,
            ],
            (true, false) => &[JournalMode::None, JournalMode::WriteBack],
        };
        for members in level.min_members().max(2)..=ask.disks.count {
            for &chunk in chunks {
                for &read_ahead in read_aheads {
                    for &journal in journals {
                        out.push(Config {
                            level,
                            members,
                            chunk,
                            read_ahead,
                            journal,
                        });
                    }
                }
            }
        }
    }
    out
}

fn limit(ask: &Ask) -> Limit {
    Limit {
        runtime: ask.runtime,
        ops: None,
    }
}

/// Predicts one configuration for `ask`'s profile: healthy, and degraded when it survives.
pub fn row(ask: &Ask, config: &Config) -> Result<Row, String> {
    let r = risk(config, &ask.disks, ask.rebuild_cap)?;
    let size = Geometry::new(
        config.level,
        config.chunk,
        &vec![ask.disks.size; config.members],
    )
    .map_err(|e| e.to_string())?
    .size_bytes();
    let case = ask.profile.case(limit(ask)).on_target(size)?;
    let figures = predict(
        config,
        &ask.disks,
        Some(&ask.journal),
        ask.cache.clone(),
        &case,
        None,
        ask.seed,
    )?
    .figures;
    let degraded = if r.failures_survived > 0 {
        Some(
            predict(
                config,
                &ask.disks,
                Some(&ask.journal),
                ask.cache.clone(),
                &case,
                Some(0),
                ask.seed,
            )?
            .figures,
        )
    } else {
        None
    };
    Ok(Row {
        label: config.label(),
        config: config.clone(),
        figures,
        degraded,
        fits: ask.capacity.is_none_or(|c| r.usable_bytes >= c),
        risk: r,
    })
}

/// Runs the whole sweep and recommends.
pub fn plan(ask: &Ask) -> Result<Plan, String> {
    plan_of(ask, &configurations(ask))
}

/// Predicts `configs` (the sweep, or part of it) and recommends one of them.
pub fn plan_of(ask: &Ask, configs: &[Config]) -> Result<Plan, String> {
    let mut rows = Vec::new();
    for config in configs {
        rows.push(row(ask, config)?);
    }
    let (recommended, why) = recommend(&rows, ask);
    let bench_command = recommended.map(|i| bench_command(ask, &rows[i].config));
    Ok(Plan {
        disks: ask.disks.spec.clone(),
        member_io: ask.disks.member_io,
        journal_disk: ask.journal.spec.clone(),
        workload: ask.profile.name.to_string(),
        about: ask.profile.about.to_string(),
        goal: ask.profile.goal,
        capacity: ask.capacity,
        runtime_s: ask.runtime.as_secs_f64(),
        seed: ask.seed,
        rows,
        recommended,
        why,
        bench_command,
    })
}

/// Within this fraction of the best, configurations count as equally fast.
const TIE: f64 = 0.05;
/// A rebuild whose chance of losing data is above this is not recommended when another fits.
const RISK_LIMIT: f64 = 0.01;

fn recommend(rows: &[Row], ask: &Ask) -> (Option<usize>, Vec<String>) {
    let goal = ask.profile.goal;
    let unit = |v: f64| match goal {
        Goal::Iops => format!("{v:.0} IOPS"),
        Goal::Throughput => format!("{v:.0} MB/s"),
    };
    let mut why = Vec::new();
    let fitting: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].fits).collect();
    if fitting.is_empty() {
        why.push(format!(
            "no configuration of {} offers the capacity asked for: give more or larger disks",
            ask.disks.spec
        ));
        return (None, why);
    }
    let redundant: Vec<usize> = fitting
        .iter()
        .copied()
        .filter(|&i| rows[i].risk.failures_survived > 0)
        .collect();
    let safe: Vec<usize> = redundant
        .iter()
        .copied()
        .filter(|&i| rows[i].risk.rebuild_loss_chance.unwrap_or(1.0) <= RISK_LIMIT)
        .collect();
    let pool = if !safe.is_empty() {
        &safe
    } else if !redundant.is_empty() {
        why.push(format!(
            "every redundant configuration that fits risks more than {:.0} % of losing data in a \
             rebuild (the disks' unrecoverable-read-error rate): prefer RAID 6 or more, smaller \
             disks",
            RISK_LIMIT * 100.0
        ));
        &redundant
    } else {
        why.push(
            "no redundant configuration offers the capacity asked for: the recommendation \
             loses all data when one disk fails"
                .to_string(),
        );
        &fitting
    };
    let best_score = pool
        .iter()
        .map(|&i| rows[i].score(goal))
        .fold(0.0, f64::max);
    // Among those within TIE of the best: most failures survived (up to two), then capacity,
    // then p99.
    let pick = pool
        .iter()
        .copied()
        .filter(|&i| rows[i].score(goal) >= best_score * (1.0 - TIE))
        .max_by(|&a, &b| {
            let (ra, rb) = (&rows[a], &rows[b]);
            // Beyond two failures survived, capacity counts first (a 4-way mirror is not
            // worth half of RAID 6's space).
            ra.risk
                .failures_survived
                .min(2)
                .cmp(&rb.risk.failures_survived.min(2))
                .then(ra.risk.usable_bytes.cmp(&rb.risk.usable_bytes))
                .then(
                    rb.figures
                        .latency
                        .p99_ms
                        .total_cmp(&ra.figures.latency.p99_ms),
                )
                .then(ra.score(goal).total_cmp(&rb.score(goal)))
        })
        .expect("the pool is not empty");
    let r = &rows[pick];
    why.insert(
        0,
        format!(
            "{}: {} (p99 {:.1} ms), the best {} of the {} configurations{} surviving a disk \
             failure{}",
            r.label,
            unit(r.score(goal)),
            r.figures.latency.p99_ms,
            match goal {
                Goal::Iops => "IOPS",
                Goal::Throughput => "throughput",
            },
            pool.len(),
            ask.capacity
                .map(|c| format!(" offering {}", gb(c)))
                .unwrap_or_default(),
            if pool == &safe {
                format!(
                    " with under {:.0} % chance of losing data in a rebuild",
                    RISK_LIMIT * 100.0
                )
            } else {
                String::new()
            }
        ),
    );
    why.push(format!(
        "{} usable, survives {} failure(s){}, rebuild {} after a failure, chance of losing data \
         to an unrecoverable read error in that rebuild {}",
        gb(r.risk.usable_bytes),
        r.risk.failures_survived,
        if r.risk.failures_survived_best > r.risk.failures_survived {
            format!(" ({} if in different pairs)", r.risk.failures_survived_best)
        } else {
            String::new()
        },
        r.risk
            .rebuild_hours
            .map_or("-".into(), |h| format!("{h:.1} h")),
        r.risk
            .rebuild_loss_chance
            .map_or("-".into(), |p| format!("{:.2} %", p * 100.0))
    ));
    if let Some(d) = r.degraded {
        let s = match goal {
            Goal::Iops => d.iops,
            Goal::Throughput => d.mb_s,
        };
        why.push(format!("with one disk failed: {}", unit(s)));
    }
    // The fastest of all, if it is not the pick: what the pick gives up for safety.
    if let Some(f) = fitting
        .iter()
        .copied()
        .max_by(|&a, &b| rows[a].score(goal).total_cmp(&rows[b].score(goal)))
    {
        if rows[f].score(goal) > r.score(goal) * (1.0 + TIE) {
            why.push(format!(
                "faster: {} at {}, but it survives {} failure(s) ({})",
                rows[f].label,
                unit(rows[f].score(goal)),
                rows[f].risk.failures_survived,
                rows[f].risk.rebuild_loss_chance.map_or(
                    "it loses everything at the first".into(),
                    |p| format!("{:.1} % chance of losing data in a rebuild", p * 100.0)
                )
            ));
        }
    }
    // The best of each other level in the pool, for comparison.
    for level in [Level::Raid10, Level::Raid5, Level::Raid6, Level::Raid1] {
        if level == r.config.level {
            continue;
        }
        if let Some(o) = pool
            .iter()
            .copied()
            .filter(|&i| rows[i].config.level == level)
            .max_by(|&a, &b| rows[a].score(goal).total_cmp(&rows[b].score(goal)))
        {
            why.push(format!(
                "best {}: {} at {} ({:.2}x), {} usable",
                level.name(),
                rows[o].label,
                unit(rows[o].score(goal)),
                rows[o].score(goal) / r.score(goal).max(f64::MIN_POSITIVE),
                gb(rows[o].risk.usable_bytes)
            ));
        }
    }
    (Some(pick), why)
}

/// `4.0 TB`, `1.1 GB` (decimal, as disks are sold).
pub fn gb(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e12 {
        format!("{:.1} TB", b / 1e12)
    } else {
        format!("{:.1} GB", b / 1e9)
    }
}

/// The bench run of `config` on `sim:` members like `ask`'s disks.
pub fn bench_command(ask: &Ask, config: &Config) -> String {
    let size = ask.disks.size;
    let size_text = if size.is_multiple_of(1 << 30) {
        format!("{}G", size >> 30)
    } else {
        size.to_string()
    };
    let members: Vec<String> = (0..config.members)
        .map(|_| format!("sim:{}:{}", ask.disks.class.name(), size_text))
        .collect();
    let mut serve = format!(
        "--serve-arg=--chunk={} --serve-arg=--read-ahead={}",
        bench::workload::size_text(config.chunk).replace("iB", ""),
        config.read_ahead
    );
    if config.journal != JournalMode::None {
        serve.push_str(&format!(
            " --serve-arg=--journal=JOURNAL --serve-arg=--journal-mode={}",
            config.journal
        ));
    }
    format!(
        "raidkit bench --members {} --level {} {} {} --runtime {}",
        members.join(" "),
        config.level.name(),
        serve,
        ask.profile.bench_args(),
        ask.runtime.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::workload::profile;

    fn ask(disks: &str, workload: &str, capacity: Option<u64>) -> Ask {
        let parse = |s: &str| -> Result<u64, String> {
            let n: u64 = s
                .trim_end_matches('G')
                .parse()
                .map_err(|_| "size".to_string())?;
            Ok(n << 30)
        };
        Ask {
            disks: Disks::parse(disks, parse).unwrap(),
            journal: Disks::parse("1xssd:4G", parse).unwrap(),
            profile: profile(workload).unwrap(),
            capacity,
            runtime: Duration::from_secs(2),
            seed: 5,
            rebuild_cap: None,
            cache: CacheConfig::default(),
        }
    }

    #[test]
    fn every_profile_gets_a_redundant_recommendation_with_its_reasons() {
        for p in bench::workload::PROFILES {
            let a = ask("4xhdd7200:1G", p.name, None);
            let plan = plan(&a).unwrap();
            assert_eq!(plan.rows.len(), configurations(&a).len());
            let i = plan.recommended.expect("a recommendation");
            let r = &plan.rows[i];
            assert!(r.risk.failures_survived >= 1, "{}: {}", p.name, r.label);
            assert!(r.degraded.is_some());
            assert!(plan.why[0].starts_with(&r.label), "{:?}", plan.why);
            // Nothing redundant that fits is faster by more than the tie margin.
            let best = plan
                .rows
                .iter()
                .filter(|x| {
                    x.risk.failures_survived >= 1
                        && x.risk.rebuild_loss_chance.unwrap() <= RISK_LIMIT
                })
                .map(|x| x.score(plan.goal))
                .fold(0.0, f64::max);
            assert!(r.score(plan.goal) >= best * (1.0 - TIE), "{}", p.name);
            assert!(plan
                .bench_command
                .as_ref()
                .unwrap()
                .contains(&p.bench_args()));
        }
    }

    #[test]
    fn a_capacity_no_configuration_offers_is_said_so() {
        let plan = plan(&ask("2xhdd7200:1G", "backup", Some(10 << 30))).unwrap();
        assert!(plan.recommended.is_none());
        assert!(plan.why[0].contains("capacity"), "{:?}", plan.why);
        assert!(plan.rows.iter().all(|r| !r.fits));
    }

    #[test]
    fn large_desktop_disks_steer_away_from_raid5() {
        // 4 x 4 TB desktop disks: a RAID 5 rebuild reads 96 Tbit at 1 error per 100 Tbit.
        let mut a = ask("4xhdd7200:1G", "video", None);
        a.disks.size = 4_000_000_000_000;
        a.runtime = Duration::from_secs(1);
        let configs: Vec<Config> = configurations(&a)
            .into_iter()
            .filter(|c| c.chunk == 128 << 10 && c.read_ahead == ReadAhead::Adaptive)
            .collect();
        let plan = plan_of(&a, &configs).unwrap();
        let r = &plan.rows[plan.recommended.unwrap()];
        assert!(
            r.risk.rebuild_loss_chance.unwrap() <= RISK_LIMIT,
            "{}",
            r.label
        );
        assert_ne!(r.config.level, Level::Raid5);
    }
}
