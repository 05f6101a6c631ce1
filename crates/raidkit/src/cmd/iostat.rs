//! `raidkit iostat`: `iostat -x` for the arrays of a running server, from two readings of
//! `GET /v1/stats` (the rate math is `iostats::rates`, pure and unit-tested there).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use iostats::{
    amplification, continues, latency_bucket_upper_ns, rates, size_bucket_upper_bytes, IoSnapshot,
    OpKind, Rates, LATENCY_BUCKETS, SIZE_BUCKETS,
};
use serde_json::json;

use crate::admin_client::Client;
use admin::stats::Snapshot;
use admin::status::wire_name;

/// Show I/O statistics of running arrays and their members, as `iostat -x` does for disks
/// (asks `raidkit serve --admin PATH`, or the daemon's).
///
/// One line per array (its requests as the clients sent them) and one per member role (the
/// operations the array issued to it: client requests, write-back applies and background work
/// together): r/s w/s rMB/s wMB/s (MiB), rareq-sz wareq-sz (KiB), r_await w_await (ms), aqu-sz
/// (average requests in flight), %util (time with a request in flight), and on the array's line
/// the I/O amplification: member reads and writes per client operation (mr/op, mw/op; a RAID 5
/// read-modify-write of 4 KiB is 2 and 2). The first report covers the time since the server
/// started, each later one the INTERVAL before it. Without INTERVAL one report; with INTERVAL
/// and no COUNT, reports until interrupted.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    admin: crate::admin_client::Admin,

    /// Seconds between reports.
    #[arg(value_name = "INTERVAL", value_parser = interval_arg)]
    interval: Option<f64>,

    /// Number of reports (the first, since the start, included).
    #[arg(value_name = "COUNT", requires = "interval")]
    count: Option<u64>,

    /// One JSON object per report (rates per array and member, amplification, histograms).
    #[arg(long)]
    json: bool,

    /// Also print each member's latency histogram over the interval (as `zpool iostat -w`).
    #[arg(long)]
    latency: bool,

    /// Also print each member's request-size histogram over the interval (`zpool iostat -r`).
    #[arg(long)]
    sizes: bool,
}

fn interval_arg(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(secs) if (0.01..=86_400.0).contains(&secs) => Ok(secs),
        Ok(_) => Err("INTERVAL must be between 0.01 and 86400 seconds".into()),
        Err(e) => Err(format!("INTERVAL is a number of seconds: {e}")),
    }
}

/// Snapshots by array name.
type Readings = BTreeMap<String, Snapshot>;

pub fn run(args: Args) -> anyhow::Result<()> {
    let client = args.admin.client()?;
    let names = array_names(&client, args.admin.array.as_deref())?;
    let mut prev: Readings = BTreeMap::new();
    let count = match args.interval {
        None => 1,
        Some(_) => args.count.unwrap_or(u64::MAX),
    };
    let mut next = Instant::now();
    for report in 0..count {
        if report > 0 {
            let interval = Duration::from_secs_f64(args.interval.unwrap_or(1.0));
            next += interval;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        let cur = read_all(&client, &names)?;
        let text = if args.json {
            serde_json::to_string(&report_json(&prev, &cur))? + "\n"
        } else {
            render(&prev, &cur, args.latency, args.sizes)
        };
        print!("{text}");
        use std::io::Write;
        std::io::stdout().flush()?;
        prev = cur;
    }
    Ok(())
}

/// The arrays to report: the one `--array` names, or every one the server serves.
fn array_names(client: &Client, named: Option<&str>) -> anyhow::Result<Vec<String>> {
    if let Some(name) = named {
        return Ok(vec![name.to_string()]);
    }
    let names: Vec<String> = client.statuses()?.into_keys().collect();
    if names.is_empty() {
        bail!("the server serves no array");
    }
    Ok(names)
}

fn read_all(client: &Client, names: &[String]) -> anyhow::Result<Readings> {
    let mut readings = BTreeMap::new();
    for name in names {
        let value = client.get_from(name, "/v1/stats")?;
        let snapshot: Snapshot = serde_json::from_value(value)
            .with_context(|| format!("array {name}: the server's stats do not decode"))?;
        readings.insert(name.clone(), snapshot);
    }
    Ok(readings)
}

/// One device's figures between two readings (`None`: since the start).
fn device_rates(prev: Option<&IoSnapshot>, cur: &IoSnapshot) -> Rates {
    rates(prev.unwrap_or(&IoSnapshot::default()), cur)
}

/// Each member role's (previous, current) counters; a role the previous reading lacks counts
/// from zero.
fn member_pairs<'a>(
    prev: Option<&'a Snapshot>,
    cur: &'a Snapshot,
    zero: &'a IoSnapshot,
) -> Vec<(&'a IoSnapshot, &'a IoSnapshot)> {
    (cur.members.iter().enumerate())
        .map(|(role, now)| {
            let before = prev.and_then(|p| p.members.get(role)).unwrap_or(zero);
            (before, now)
        })
        .collect()
}

/// Member operations of each kind per client operation over the interval.
fn amplification_of(prev: Option<&Snapshot>, cur: &Snapshot) -> Option<[f64; 5]> {
    let zero = IoSnapshot::default();
    let client = cur.client.as_ref()?;
    let client_prev = prev.and_then(|p| p.client.as_ref()).unwrap_or(&zero);
    amplification((client_prev, client), &member_pairs(prev, cur, &zero))
}

const HEADER: &str = "device                    r/s      w/s    rMB/s    wMB/s rareq-sz wareq-sz  r_await  w_await  aqu-sz  %util  mr/op  mw/op";

fn line(out: &mut String, device: &str, r: &Rates, amp: Option<[f64; 5]>) {
    let mib = |b: f64| b / (1 << 20) as f64;
    let kib = |b: f64| b / 1024.0;
    let _ = write!(
        out,
        "{device:<22} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>7.2} {:>6.1}",
        r.read.ops_per_sec,
        r.write.ops_per_sec,
        mib(r.read.bytes_per_sec),
        mib(r.write.bytes_per_sec),
        kib(r.read.avg_size_bytes),
        kib(r.write.avg_size_bytes),
        r.read.await_ms,
        r.write.await_ms,
        r.queue_size,
        r.util_percent,
    );
    match amp {
        Some(a) => {
            let _ = writeln!(out, " {:>6.2} {:>6.2}", a[0], a[1]);
        }
        None => out.push('\n'),
    }
}

/// The text report of `cur` against `prev` (empty: since the start).
fn render(prev: &Readings, cur: &Readings, latency: bool, sizes: bool) -> String {
    let mut out = String::new();
    // The interval of the first array's client counters.
    let at_ns = |r: &Readings| {
        (r.values().next())
            .and_then(|s| s.client)
            .map_or(0, |c| c.at_ns)
    };
    let since = match prev.is_empty() {
        true => "since start".to_string(),
        false => {
            let secs = at_ns(cur).saturating_sub(at_ns(prev)) as f64 / 1e9;
            format!("last {secs:.1} s")
        }
    };
    let when = cur.values().next().map_or(0, |s| s.unix_ms);
    let _ = writeln!(
        out,
        "{} ({since})",
        humantime::format_rfc3339_seconds(unix(when))
    );
    let _ = writeln!(out, "{HEADER}");
    for (name, snap) in cur {
        let before = prev.get(name);
        if let Some(client) = &snap.client {
            let r = device_rates(before.and_then(|p| p.client.as_ref()), client);
            line(&mut out, name, &r, amplification_of(before, snap));
        }
        for (role, io) in snap.members.iter().enumerate() {
            let r = device_rates(before.and_then(|p| p.members.get(role)), io);
            line(&mut out, &member_label(snap, role), &r, None);
        }
        if latency {
            out.push_str(&histogram(before, snap, Histogram::Latency));
        }
        if sizes {
            out.push_str(&histogram(before, snap, Histogram::Sizes));
        }
    }
    out.push('\n');
    out
}

fn unix(ms: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_millis(ms)
}

/// ` 2 /dev/sdc` (role and member; `-` for a missing role).
fn member_label(snap: &Snapshot, role: usize) -> String {
    let member = snap.member(role);
    let name = (member.map(|m| m.name.as_str()))
        .filter(|n| !n.is_empty())
        .unwrap_or("-");
    let state = member.map(|m| wire_name(m.state)).unwrap_or_default();
    let label = format!("  {role} {name}");
    match state.as_str() {
        "active" | "" => label,
        other => format!("{label} ({other})"),
    }
}

#[derive(Clone, Copy)]
enum Histogram {
    Latency,
    Sizes,
}

impl Histogram {
    fn buckets(self) -> usize {
        match self {
            Histogram::Latency => LATENCY_BUCKETS,
            Histogram::Sizes => SIZE_BUCKETS,
        }
    }

    fn counts(self, io: &IoSnapshot, kind: OpKind) -> Vec<u64> {
        match self {
            Histogram::Latency => io.kind(kind).latency.to_vec(),
            Histogram::Sizes => io.kind(kind).sizes.to_vec(),
        }
    }

    /// The row label of bucket `k`: its upper bound.
    fn label(self, k: usize) -> String {
        match self {
            Histogram::Latency => match latency_bucket_upper_ns(k) {
                Some(ns) if ns < 1_000_000 => format!("{}us", ns / 1000),
                Some(ns) if ns < 1_000_000_000 => format!("{}ms", ns / 1_000_000),
                Some(ns) => format!("{}s", ns / 1_000_000_000),
                None => "more".into(),
            },
            Histogram::Sizes => match size_bucket_upper_bytes(k) {
                Some(b) if b < 1 << 20 => format!("{}K", b >> 10).replace("0K", "512"),
                Some(b) if b < 1 << 30 => format!("{}M", b >> 20),
                Some(b) => format!("{}G", b >> 30),
                None => "more".into(),
            },
        }
    }

    fn title(self) -> &'static str {
        match self {
            Histogram::Latency => "latency (at most)",
            Histogram::Sizes => "request size (at most)",
        }
    }
}

/// Per member role, reads and writes per bucket over the interval, as `zpool iostat -w/-r`:
/// one row per bucket from the first to the last with any count.
fn histogram(prev: Option<&Snapshot>, cur: &Snapshot, which: Histogram) -> String {
    let zero = IoSnapshot::default();
    let pairs = member_pairs(prev, cur, &zero);
    // Columns: per role, reads then writes.
    // Counters reset in between count from zero, as in the rates (`iostats::continues`).
    let columns: Vec<Vec<u64>> = (pairs.iter())
        .flat_map(|&(before, now)| {
            let before = if continues(before, now) {
                before
            } else {
                &zero
            };
            [OpKind::Read, OpKind::Write].map(|kind| {
                let earlier = which.counts(before, kind);
                (which.counts(now, kind).iter().zip(&earlier))
                    .map(|(c, e)| c.saturating_sub(*e))
                    .collect()
            })
        })
        .collect();
    let used = |k: usize| columns.iter().any(|c| c[k] > 0);
    let mut out = String::new();
    let _ = writeln!(out, "  {}", which.title());
    let Some(lo) = (0..which.buckets()).find(|&k| used(k)) else {
        let _ = writeln!(out, "  (no reads or writes)");
        return out;
    };
    let hi = (0..which.buckets()).rev().find(|&k| used(k)).unwrap_or(lo);
    let _ = write!(out, "  {:>8}", "");
    for role in 0..pairs.len() {
        let _ = write!(
            out,
            " {:>9} {:>9}",
            format!("{role} read"),
            format!("{role} write")
        );
    }
    out.push('\n');
    for k in lo..=hi {
        let _ = write!(out, "  {:>8}", which.label(k));
        for c in &columns {
            let _ = write!(out, " {:>9}", c[k]);
        }
        out.push('\n');
    }
    out
}

/// The JSON report: per array the client's and each member's rates, the amplification by kind
/// and the histograms over the interval.
fn report_json(prev: &Readings, cur: &Readings) -> serde_json::Value {
    let zero = IoSnapshot::default();
    let arrays: Vec<serde_json::Value> = (cur.iter())
        .map(|(name, snap)| {
            let before = prev.get(name);
            let members: Vec<serde_json::Value> = (member_pairs(before, snap, &zero).iter())
                .enumerate()
                .map(|(role, (b, now))| {
                    json!({
                        "role": role,
                        "name": snap.member_name(role),
                        "rates": rates(b, now),
                    })
                })
                .collect();
            let amp = amplification_of(before, snap).map(|a| {
                let by_kind: serde_json::Map<String, serde_json::Value> = (OpKind::ALL.iter())
                    .map(|k| (k.name().to_string(), json!(a[k.index()])))
                    .collect();
                by_kind
            });
            json!({
                "name": name,
                "unix_ms": snap.unix_ms,
                "since_start": before.is_none(),
                "health": snap.status.volume.health,
                "client": snap.client.map(|c| device_rates(before.and_then(|p| p.client.as_ref()), &c)),
                "amplification": amp,
                "members": members,
            })
        })
        .collect();
    json!({ "arrays": arrays })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RAID 1 of two over 10 s: 1,000 client writes of 4 KiB, each written to both members.
    fn readings(at_secs: u64, writes: u64) -> Readings {
        let mut status = serde_json::from_value::<admin::status::Status>(sample_status()).unwrap();
        status.volume.name = "home".into();
        let io = |ops: u64| {
            let mut s = IoSnapshot {
                at_ns: at_secs * 1_000_000_000,
                busy_ns: at_secs * 100_000_000,
                ..IoSnapshot::default()
            };
            s.write.ops = ops;
            s.write.bytes = ops * 4096;
            s.write.time_ns = ops * 500_000;
            s.write.latency[9] = ops;
            s.write.sizes[3] = ops;
            s
        };
        let snap = Snapshot {
            unix_ms: at_secs * 1000,
            status,
            client: Some(io(writes)),
            members: vec![io(writes), io(writes)],
        };
        BTreeMap::from([("home".to_string(), snap)])
    }

    fn sample_status() -> serde_json::Value {
        json!({
            "name": "home", "uuid": "6f1c2a4e-0b7d-4c1e-9d2a-3b5f7e9a1c20", "level": "raid1",
            "chunk_bytes": 65536, "size_bytes": 1048576, "health": "clean",
            "members": [
                {"role": 0, "name": "a.img", "state": "active", "read_errors": 0, "write_errors": 0,
                 "timeouts": 0, "no_space_errors": 0, "stuck_calls": 0, "abandoned_calls": 0,
                 "filesystem": null, "rebuild_offset_bytes": null},
                {"role": 1, "name": "b.img", "state": "faulty", "read_errors": 0, "write_errors": 1,
                 "timeouts": 0, "no_space_errors": 0, "stuck_calls": 0, "abandoned_calls": 0,
                 "filesystem": null, "rebuild_offset_bytes": null}
            ],
            "task": null, "speed_limits": {"min_bytes_per_sec": 1, "max_bytes_per_sec": 2},
            "last_scrub": null, "events": 1, "bitmap": null, "unsynced_bytes": 0, "at_risk": null,
            "journal": null, "cache": null
        })
    }

    #[test]
    fn a_report_shows_the_interval_rates_and_the_amplification() {
        let prev = readings(10, 1_000);
        let cur = readings(20, 2_000);
        let text = render(&prev, &cur, true, true);
        let array = text.lines().find(|l| l.starts_with("home")).unwrap();
        let fields: Vec<&str> = array.split_whitespace().collect();
        // device r/s w/s rMB/s wMB/s rareq-sz wareq-sz r_await w_await aqu-sz %util mr/op mw/op
        assert_eq!(
            fields,
            [
                "home", "0.0", "100.0", "0.00", "0.39", "0.0", "4.0", "0.00", "0.50", "0.05",
                "10.0", "0.00", "2.00"
            ],
            "{text}"
        );
        assert!(text.contains("(last 10.0 s)"), "{text}");
        assert!(text.contains("  1 b.img (faulty)"), "{text}");
        // Latency: 1,000 writes per member in the ≤ 512 µs bucket; sizes in the ≤ 4K bucket.
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["512us", "0", "1000", "0", "1000"]),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["4K", "0", "1000", "0", "1000"]),
            "{text}"
        );
        // The first report is since the start.
        let first = render(&BTreeMap::new(), &cur, false, false);
        assert!(first.contains("since start"), "{first}");
        let fields: Vec<&str> = first
            .lines()
            .find(|l| l.starts_with("home"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(fields[2], "100.0", "{first}");
        // The server restarted in between (its clock and counts start again) and has done
        // more than before: rates and histograms alike count from zero.
        let restarted = render(&readings(100, 500), &cur, true, false);
        let fields: Vec<&str> = (restarted.lines())
            .find(|l| l.starts_with("home"))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(fields[2], "100.0", "{restarted}");
        assert!(
            restarted
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["512us", "0", "2000", "0", "2000"]),
            "{restarted}"
        );
        let report = report_json(&prev, &cur);
        assert_eq!(report["arrays"][0]["amplification"]["write"], 2.0);
        assert_eq!(report["arrays"][0]["client"]["write"]["ops_per_sec"], 100.0);
        assert_eq!(report["arrays"][0]["members"][1]["name"], "b.img");
    }
}
