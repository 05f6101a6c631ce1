//! `raidkit status`: the array as the server sees it, via the admin socket.

use std::collections::BTreeMap;

use cache::CacheStats;
use serde_json::json;
use volume::{AtRisk, MemberState, MemberStatus, ScrubReport};

use crate::admin_client::{decode_statuses, Client};
use crate::progress::{follow_with, task_line};
use crate::units::human_bytes;
use admin::mdstat::sync_summary;
use admin::status::{wire_name, JournalSection, QosSection, Status};

/// Show a running array's state (asks `raidkit serve --admin PATH`, or the daemon's).
///
/// A daemon serving several arrays: without --array, one /proc/mdstat style block per array
/// (name, health, level, members with their roles and state, `[4/3] [UU_U]`, the background
/// task), and --json prints `{"arrays": {NAME: status, ...}}`; --array NAME shows that one in
/// full. With one array served, its full status (--json: its status object).
///
/// Prints the array name, level, chunk, size and health (clean, active, degraded, resyncing,
/// rebuilding, failed), a /proc/mdstat style summary (`[4/3] [UU_U]`: roles / in-sync roles,
/// U = in sync), every member with its role, state and error counts (read errors, write
/// errors, timeouts; writes refused for lack of space with the filesystem that is full), the
/// background task with progress, speed and ETA, the speed limits, the
/// journal (mode, ring in use, write-back data not yet on the members, applies under ring
/// pressure), the read cache (memory held, hit rate) and the last scrub's result.
///
/// --mdstat prints every array of the server (or the one --array names) in exactly
/// /proc/mdstat's format, as the file `serve --mdstat` and the daemon keep, for tools that
/// parse /proc/mdstat.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    admin: crate::admin_client::Admin,

    /// Print the server's JSON status unchanged (field names are stable).
    #[arg(long, conflicts_with = "watch")]
    json: bool,

    /// Follow the background work until none is left (or due), then show the status again;
    /// in a terminal the task is a progress bar with speed and ETA, else one line a second.
    #[arg(long)]
    watch: bool,

    /// Print the arrays in exactly /proc/mdstat's format (every array of the server, or the
    /// one --array names), as node_exporter and telegraf parse it.
    #[arg(long, conflicts_with_all = ["json", "watch"])]
    mdstat: bool,
}

/// Ranges at risk listed in the text status (`--json` lists up to 1024).
const AT_RISK_LISTED: usize = 16;

pub fn run(args: Args) -> anyhow::Result<()> {
    let client = args.admin.client()?;
    if args.mdstat {
        let mut statuses = client.statuses()?;
        if let Some(name) = &args.admin.array {
            statuses.retain(|n, _| n == name);
            anyhow::ensure!(!statuses.is_empty(), "no array {name:?} is served here");
        }
        let arrays = statuses.iter().map(|(n, s)| (n.as_str(), &s.volume));
        print!("{}", admin::mdstat::render(arrays));
        return Ok(());
    }
    if !args.admin.names_array() {
        let all = client.process("GET", admin::api::ALL_STATUS_PATH)?;
        if all["arrays"].as_object().is_some_and(|a| a.len() > 1) {
            return run_all(&client, all, &args);
        }
    }
    if args.json {
        let value = client.get("/v1/status")?;
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    if args.watch {
        return watch(&client);
    }
    print!("{}", render(&client.status()?));
    Ok(())
}

/// Shows the status, follows the background work until none runs or is due (a progress bar
/// in a terminal, else one task line per second), then shows the status again.
fn watch(client: &Client) -> anyhow::Result<()> {
    print!("{}", render(&client.status()?));
    follow_with(client, "background task", true)?;
    print!("{}", render(&client.status()?));
    Ok(())
}

/// Every array of a server that serves several.
fn run_all(client: &Client, all: serde_json::Value, args: &Args) -> anyhow::Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    let statuses = decode_statuses(all)?;
    print!("{}", render_all(&statuses));
    if args.watch {
        follow_all(client)?;
        print!("{}", render_all(&client.statuses()?));
    }
    Ok(())
}

/// Follows every array's background work until none runs or is due in any array, printing
/// each busy array's task line once a second.
fn follow_all(client: &Client) -> anyhow::Result<()> {
    let now = |timeout_secs: u64| json!({ "timeout_secs": timeout_secs });
    loop {
        let mut busy = None;
        for name in client.statuses()?.keys() {
            let idle = client.post_to(name, "/v1/wait", &now(0))?;
            if idle.get("idle").and_then(|v| v.as_bool()) != Some(true) {
                busy = Some(name.clone());
                break;
            }
        }
        let Some(busy) = busy else { return Ok(()) };
        // Paces the lines: returns within a second, sooner if that array goes idle.
        client.post_to(&busy, "/v1/wait", &now(1))?;
        for (name, status) in client.statuses()? {
            if let Some(task) = &status.volume.task {
                println!("{name}: {}", task_line(task));
            }
        }
    }
}

/// One /proc/mdstat style block per array, in name order.
pub fn render_all(statuses: &BTreeMap<String, Status>) -> String {
    statuses
        .iter()
        .map(|(name, status)| mdstat_block(name, status))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `home : degraded raid1 /dev/sdb[0] /dev/sdc[1](F) /dev/sdd(S)`, then size, chunk and
/// `[2/1] [U_]`, then the background task and a journal under pressure: /proc/mdstat's
/// shape for a person (health, human sizes, every member named); `status --mdstat` is the
/// exact format (`admin::mdstat`), whose `[n/m] [U_]` this shares.
pub fn mdstat_block(name: &str, status: &Status) -> String {
    let s = &status.volume;
    let members: Vec<String> = s
        .members
        .iter()
        .map(|m| {
            let name = if m.name.is_empty() {
                "missing"
            } else {
                &m.name
            };
            let role = m.role.map(|r| format!("[{r}]")).unwrap_or_default();
            let mark = match m.state {
                MemberState::Faulty => "(F)",
                MemberState::Missing => "(M)",
                MemberState::Spare => "(S)",
                MemberState::Rebuilding => "(rebuilding)",
                MemberState::ReplacementTarget => "(R)",
                MemberState::Replacing => "(replacing)",
                MemberState::Active => "",
            };
            format!("{name}{role}{mark}")
        })
        .collect();
    let mut out = format!(
        "{name} : {} {} {}\n",
        wire_name(s.health),
        s.level,
        members.join(" ")
    );
    out += &format!(
        "      {}, chunk {} {}\n",
        human_bytes(s.size_bytes),
        human_bytes(s.chunk_bytes),
        sync_summary(&s.members)
    );
    if let Some(task) = &s.task {
        out += &format!("      {}\n", task_line(task));
    }
    if let Some(j) = status.journal.as_ref().filter(|j| j.pressure_applies > 0) {
        out += &format!(
            "      journal: {} applies under ring pressure\n",
            j.pressure_applies
        );
    }
    out
}

/// The whole status as text.
pub fn render(status: &Status) -> String {
    let s = &status.volume;
    let mut out = format!(
        "{}: {}, chunk {}, {}, {} {}\n",
        s.name,
        s.level,
        human_bytes(s.chunk_bytes),
        human_bytes(s.size_bytes),
        wire_name(s.health),
        sync_summary(&s.members)
    );
    out += &format!("  uuid {}, events {}\n", s.uuid, s.events);
    let balanced = ["raid1", "raid10", "raid5", "raid6"].contains(&s.level.as_str());
    if let Some(balance) = s.read_balance.as_ref().filter(|_| balanced) {
        out += &format!("  read balance {balance}\n");
    }
    for m in &s.members {
        out += &member_line(m);
        out += &no_space_line(m);
    }
    if s.unsynced_bytes > 0 {
        out += &format!(
            "  {} of stripes left half-written by writes refused for lack of space: \
             resynced once there is space\n",
            human_bytes(s.unsynced_bytes)
        );
    }
    if let Some(risk) = &s.at_risk {
        out += &at_risk_lines(risk);
    }
    out += &bad_block_lines(&s.bad_blocks);
    if let Some(c) = &s.checksum {
        out += &format!(
            "  checksums {}: {} blocks verified, {} mismatches (silent corruption) found, {} \
             rewritten after an unclean shutdown\n",
            c.algorithm, c.verified_blocks, c.mismatches, c.rehashed
        );
    }
    if let Some(task) = &s.task {
        out += &format!("  {}\n", task_line(task));
    }
    out += &format!(
        "  speed limits: min {}/s, max {}/s per member\n",
        human_bytes(s.speed_limits.min_bytes_per_sec),
        human_bytes(s.speed_limits.max_bytes_per_sec)
    );
    if let Some(j) = &status.journal {
        out += &journal_line(j);
    }
    if let Some(c) = &status.cache {
        out += &cache_line(c);
    }
    if let Some(q) = &status.qos {
        out += &qos_line(q);
    }
    if let Some(scrub) = &s.last_scrub {
        out += &scrub_report(scrub);
    }
    out
}

/// The ranges the members' bad-block lists record as lost (none: no line).
fn bad_block_lines(bad: &[volume::BadBlockStatus]) -> String {
    if bad.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "  LOST: {} ranges recorded in bad-block lists (reads of them fail until written):\n",
        bad.len()
    );
    for b in bad {
        out += &format!("    {}\n", lost_range(b));
    }
    out
}

/// One recorded range: role, member, member bytes, and what array bytes it holds.
fn lost_range(b: &volume::BadBlockStatus) -> String {
    let held = match b.array_offset {
        Some(at) => format!("array offset {at}"),
        None => format!(
            "parity of the stripe at array offset {}",
            b.stripe_array_offset
        ),
    };
    format!(
        "role {} {}: member bytes {}-{} ({}), {held}",
        b.role,
        b.member,
        b.member_offset,
        b.member_offset + b.len,
        human_bytes(b.len)
    )
}

fn at_risk_lines(risk: &AtRisk) -> String {
    let head = "  AT RISK: started dirty and degraded without a journal (--start-dirty-degraded): \
                data may read back wrong in";
    if risk.whole_array {
        return format!(
            "{head} the whole array ({}, no write-intent bitmap), until the missing members \
             are rebuilt\n",
            human_bytes(risk.bytes)
        );
    }
    let mut out = format!(
        "{head} {} ranges ({}), listed until the missing members are rebuilt:\n",
        risk.ranges_count,
        human_bytes(risk.bytes)
    );
    for r in risk.ranges.iter().take(AT_RISK_LISTED) {
        out += &format!(
            "    bytes {}-{} ({})\n",
            r.offset_bytes,
            r.offset_bytes + r.len_bytes,
            human_bytes(r.len_bytes)
        );
    }
    let more = risk.ranges_count.saturating_sub(AT_RISK_LISTED as u64);
    if more > 0 {
        out += &format!("    and {more} more (status --json lists the first 1024)\n");
    }
    out
}

fn journal_line(j: &JournalSection) -> String {
    let mut line = format!(
        "  journal {} ({}): {} of {} in use",
        j.name,
        wire_name(j.mode),
        human_bytes(j.used_bytes),
        human_bytes(j.ring_bytes)
    );
    if let Some(unapplied) = j.unapplied_bytes {
        line += &format!(", {} not yet on the members", human_bytes(unapplied));
    }
    if j.volatile {
        let reason = j.volatile_reason.as_deref().unwrap_or("in RAM");
        line += &format!(", VOLATILE ({reason}: a power cut empties it)");
    }
    line += &format!(", {} commits, {} checkpoints", j.commits, j.checkpoints);
    if j.pressure_applies > 0 {
        line += &format!(
            ", {} applies under ring pressure (a larger journal would avoid them)",
            j.pressure_applies
        );
    }
    line + "\n"
}

/// The daemon's QoS of the array: its latency target and how it is met, and whether (how
/// hard) it is throttled for another array's target.
fn qos_line(q: &QosSection) -> String {
    let mut line = "  qos:".to_string();
    if let Some(target) = q.latency_target_us {
        line += &format!(" latency target {target} µs");
        if let (Some(n), Some(over)) = (q.last_window_requests, q.last_window_over_target) {
            line += &format!(" (last window: {over} of {n} requests over it)");
        }
        line += &format!(", missed in {} windows;", q.windows_missed);
    }
    if q.throttle_level == 0 {
        line += " not throttled";
    } else {
        let at_once = match q.max_in_flight {
            Some(1) => "1 request at a time".to_string(),
            Some(n) => format!("{n} requests at a time"),
            None => "no limit on requests at a time".to_string(),
        };
        line += &format!(
            " THROTTLED for another array's latency target, level {} of {} ({at_once}",
            q.throttle_level, q.max_level
        );
        if q.pause_factor > 0 {
            line += &format!(
                ", a pause of {}× each request's time after it",
                q.pause_factor
            );
        }
        line += ")";
    }
    line += &format!(
        "; {} requests held back, {:.3} s in all",
        q.throttled_requests,
        q.throttled_us as f64 / 1e6
    );
    let caps: Vec<String> = [
        (q.max_bandwidth_bytes_per_sec).map(|b| format!("{}/s", human_bytes(b))),
        q.max_iops.map(|n| format!("{n} requests/s")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !caps.is_empty() {
        line += &format!(
            "; capped at {}: {} requests waited, {:.3} s in all",
            caps.join(" and "),
            q.capped_requests,
            q.capped_us as f64 / 1e6
        );
    }
    line + "\n"
}

fn cache_line(c: &CacheStats) -> String {
    if c.capacity_bytes == 0 {
        return "  read cache: off\n".to_string();
    }
    let lookups = c.hits + c.misses;
    let rate = match lookups {
        0 => "no reads yet".to_string(),
        n => format!(
            "{:.0} % of block lookups hit",
            c.hits as f64 * 100.0 / n as f64
        ),
    };
    format!(
        "  read cache: {} of {} held, {rate} ({} hits, {} misses, {} read-ahead hits)\n",
        human_bytes(c.allocated_bytes),
        human_bytes(c.capacity_bytes),
        c.hits,
        c.misses,
        c.prefetch_hits
    )
}

fn member_line(m: &MemberStatus) -> String {
    let role = match (m.role, m.state) {
        (Some(r), MemberState::ReplacementTarget) => format!("new {r}"),
        (Some(r), _) => format!("role {r}"),
        (None, _) => "spare".to_string(),
    };
    let name = if m.name.is_empty() { "-" } else { &m.name };
    let mut line = format!("  {role:<7} {:<18} {name}", wire_name(m.state));
    if m.role.is_some() {
        line += &format!(
            "  (errors: {} read, {} write, {} timeouts)",
            m.read_errors, m.write_errors, m.timeouts
        );
    }
    if m.abandoned_calls > 0 {
        line += &format!(
            "  {} call(s) abandoned stuck in the kernel, {} still stuck",
            m.abandoned_calls, m.stuck_calls
        );
    }
    if let Some(offset) = m.rebuild_offset_bytes {
        line += &format!("  rebuilt {}", human_bytes(offset));
    }
    if m.write_mostly {
        line += "  write-mostly";
    }
    if m.slow {
        let ms =
            |us: Option<u64>| us.map_or("?".to_string(), |us| format!("{:.1}", us as f64 / 1000.0));
        line += &format!(
            "  SLOW: {} ms per request against {} ms for its peers (reads served around it)",
            ms(m.latency_us),
            ms(m.peers_latency_us)
        );
    }
    line + "\n"
}

/// A member that refused writes for lack of space: how many, and the filesystem that is full.
fn no_space_line(m: &MemberStatus) -> String {
    if m.no_space_errors == 0 {
        return String::new();
    }
    let place = match &m.filesystem {
        Some(fs) => format!(
            "; filesystem {} has {} free of {}",
            fs.place(),
            human_bytes(fs.free_bytes),
            human_bytes(fs.size_bytes)
        ),
        None => String::new(),
    };
    format!(
        "          out of space: {} writes refused (not a fault){place}\n",
        m.no_space_errors
    )
}

/// The scrub result, with every listed mismatch location.
pub fn scrub_report(s: &ScrubReport) -> String {
    let state = if s.finished { "finished" } else { "running" };
    let mut out = format!(
        "  scrub ({state}): {} stripes checked, {} mismatches, {} repaired\n",
        s.stripes_checked, s.mismatches, s.repaired
    );
    for m in &s.first_mismatches {
        out += &format!(
            "    mismatch ({}) stripe {} array offset {}: role {} {} at data offset {}\n",
            m.kind, m.stripe, m.array_offset, m.role, m.member, m.member_offset
        );
    }
    if s.mismatches > s.first_mismatches.len() as u64 {
        out += &format!(
            "    ... and {} more\n",
            s.mismatches - s.first_mismatches.len() as u64
        );
    }
    if s.units_lost > 0 {
        out += &format!(
            "    {} stripes not compared: they hold ranges no member or redundancy can provide, \
             recorded as lost (reads of them fail until written):\n",
            s.units_lost
        );
        for b in &s.lost {
            out += &format!("    lost {}\n", lost_range(b));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use admin::status::JournalMode;
    use volume::{ArrayHealth, ArrayRange, FilesystemStatus, TaskKind, TaskStatus, VolumeStatus};

    /// A member with no errors and nothing optional.
    fn member(role: Option<usize>, name: &str, state: MemberState) -> MemberStatus {
        MemberStatus::new(role, name, state)
    }

    /// Role 1 rebuilding: 1 MiB of 4 MiB done at 1 MiB/s, 3 s to go.
    fn a_rebuild_of_role_1() -> Option<TaskStatus> {
        Some(TaskStatus::new(
            TaskKind::Rebuild,
            Some(1),
            1 << 20,
            4 << 20,
            1 << 20,
            Some(3),
        ))
    }

    /// The array "demo" with no members, no optional part and no section.
    fn bare(level: &str, health: ArrayHealth) -> Status {
        Status {
            volume: VolumeStatus {
                events: 7,
                ..VolumeStatus::new("demo", level, 65536, 3 << 30, health, Vec::new())
            },
            journal: None,
            cache: None,
            qos: None,
        }
    }

    #[test]
    fn renders_a_degraded_array_with_a_rebuild() {
        let mut status = bare("raid5", ArrayHealth::Rebuilding);
        let s = &mut status.volume;
        (s.chunk_bytes, s.size_bytes) = (65536, 3221225472);
        let mut rebuilding = member(Some(1), "b", MemberState::Rebuilding);
        rebuilding.rebuild_offset_bytes = Some(1048576);
        s.members = vec![
            member(Some(0), "a", MemberState::Active),
            rebuilding,
            member(None, "c", MemberState::Spare),
        ];
        s.task = a_rebuild_of_role_1();
        let text = render(&status);
        assert!(
            text.starts_with("demo: raid5, chunk 64.0 KiB, 3.0 GiB, rebuilding [2/1] [U_]"),
            "{text}"
        );
        assert!(
            text.contains("rebuild role 1: 25.0% (1.0 MiB of 4.0 MiB) at 1.0 MiB/s, ETA 0:00:03"),
            "{text}"
        );
        assert!(text.contains("spare   spare"), "{text}");
        assert!(
            text.contains("b  (errors: 0 read, 0 write, 0 timeouts)  rebuilt 1.0 MiB"),
            "{text}"
        );
        assert!(
            !text.contains("journal") && !text.contains("read cache"),
            "{text}"
        );
    }

    #[test]
    fn renders_the_ranges_at_risk() {
        let mut status = bare("raid5", ArrayHealth::Degraded);
        let range = |offset_bytes, len_bytes| ArrayRange {
            offset_bytes,
            len_bytes,
        };
        status.volume.at_risk = Some(AtRisk {
            ranges: vec![range(0, 67108864), range(201326592, 67108864)],
            ranges_count: 2,
            bytes: 134217728,
            whole_array: false,
        });
        let text = render(&status);
        assert!(
            text.contains("AT RISK: started dirty and degraded without a journal")
                && text.contains("2 ranges (128.0 MiB), listed until the missing members")
                && text.contains("    bytes 0-67108864 (64.0 MiB)\n")
                && text.contains("    bytes 201326592-268435456 (64.0 MiB)\n"),
            "{text}"
        );
        status.volume.at_risk = Some(AtRisk {
            ranges: vec![range(0, 1048576)],
            ranges_count: 1,
            bytes: 1048576,
            whole_array: true,
        });
        let text = render(&status);
        assert!(
            text.contains("the whole array (1.0 MiB, no write-intent"),
            "{text}"
        );
        status.volume.at_risk = None;
        let text = render(&status);
        assert!(!text.contains("AT RISK"), "{text}");
    }

    #[test]
    fn renders_the_ranges_recorded_as_lost() {
        let mut status = bare("raid5", ArrayHealth::Active);
        assert!(!render(&status).contains("LOST"));
        let lost = |member_offset, array_offset| volume::BadBlockStatus {
            role: 2,
            member: "c".into(),
            member_offset,
            len: 4096,
            array_offset,
            stripe_array_offset: 1 << 20,
        };
        status.volume.bad_blocks = vec![lost(8192, Some(1 << 20)), lost(1 << 16, None)];
        let text = render(&status);
        assert!(
            text.contains("LOST: 2 ranges recorded in bad-block lists")
                && text.contains("    role 2 c: member bytes 8192-12288 (4.0 KiB), array offset 1048576\n")
                && text.contains("member bytes 65536-69632 (4.0 KiB), parity of the stripe at array offset 1048576\n"),
            "{text}"
        );
    }

    #[test]
    fn renders_the_journal_and_the_cache() {
        let mut status = bare("raid5", ArrayHealth::Active);
        let mut journal = JournalSection {
            name: "/dev/shm/j".into(),
            mode: JournalMode::WriteBack,
            volatile: true,
            volatile_reason: Some("on tmpfs, a filesystem in RAM".into()),
            ring_bytes: 268435456,
            used_bytes: 3145728,
            write_back_record_bytes: 0,
            records_live: 0,
            commits: 10,
            checkpoints: 2,
            pressure_applies: 0,
            unapplied_bytes: Some(1048576),
        };
        status.journal = Some(journal.clone());
        status.cache = Some(CacheStats {
            hits: 3,
            misses: 1,
            prefetch_hits: 2,
            allocated_bytes: 2097152,
            capacity_bytes: 67108864,
            ..CacheStats::default()
        });
        let text = render(&status);
        assert!(
            text.contains(
                "journal /dev/shm/j (write-back): 3.0 MiB of 256.0 MiB in use, 1.0 MiB not yet \
                 on the members, VOLATILE (on tmpfs, a filesystem in RAM: a power cut \
                 empties it), 10 commits, 2 checkpoints\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "read cache: 2.0 MiB of 64.0 MiB held, 75 % of block lookups hit (3 hits, \
                 1 misses, 2 read-ahead hits)"
            ),
            "{text}"
        );
        journal = JournalSection {
            name: "j".into(),
            mode: JournalMode::WriteThrough,
            volatile: false,
            volatile_reason: None,
            ring_bytes: 1048576,
            used_bytes: 0,
            commits: 0,
            checkpoints: 0,
            pressure_applies: 4,
            unapplied_bytes: None,
            ..journal
        };
        status.journal = Some(journal);
        status.cache = Some(CacheStats::default());
        let text = render(&status);
        assert!(
            text.contains("journal j (write-through): 0 B of 1.0 MiB in use, 0 commits"),
            "{text}"
        );
        assert!(!text.contains("VOLATILE"), "{text}");
        assert!(text.contains("4 applies under ring pressure"), "{text}");
        assert!(text.contains("read cache: off"), "{text}");
    }

    #[test]
    fn renders_the_qos_of_a_protected_and_of_a_throttled_array() {
        let mut status = bare("raid5", ArrayHealth::Active);
        let protected = QosSection {
            latency_target_us: Some(500),
            throttle_level: 0,
            max_level: 7,
            max_in_flight: None,
            pause_factor: 0,
            throttled_requests: 0,
            throttled_us: 0,
            scale_downs: 0,
            windows_missed: 4,
            last_window_requests: Some(120),
            last_window_over_target: Some(3),
            max_bandwidth_bytes_per_sec: None,
            max_iops: None,
            capped_requests: 0,
            capped_us: 0,
        };
        status.qos = Some(protected.clone());
        let text = render(&status);
        assert!(
            text.contains(
                "  qos: latency target 500 µs (last window: 3 of 120 requests over it), missed \
                 in 4 windows; not throttled; 0 requests held back, 0.000 s in all\n"
            ),
            "{text}"
        );
        status.qos = Some(QosSection {
            latency_target_us: None,
            throttle_level: 6,
            max_in_flight: Some(1),
            pause_factor: 3,
            throttled_requests: 42,
            throttled_us: 1_500_000,
            last_window_requests: None,
            last_window_over_target: None,
            ..protected
        });
        let text = render(&status);
        assert!(
            text.contains(
                "  qos: THROTTLED for another array's latency target, level 6 of 7 (1 request \
                 at a time, a pause of 3× each request's time after it); 42 requests held \
                 back, 1.500 s in all\n"
            ),
            "{text}"
        );
        status.qos = Some(QosSection {
            max_bandwidth_bytes_per_sec: Some(100 << 20),
            max_iops: Some(2000),
            capped_requests: 7,
            capped_us: 250_000,
            ..protected
        });
        let text = render(&status);
        assert!(
            text.contains(
                "; capped at 100.0 MiB/s and 2000 requests/s: 7 requests waited, 0.250 s in \
                 all\n"
            ),
            "{text}"
        );
        status.qos = None;
        assert!(!render(&status).contains("qos"));
    }

    #[test]
    fn a_member_out_of_space_names_its_filesystem() {
        let mut status = bare("raid5", ArrayHealth::Active);
        status.volume.name = "a".into();
        status.volume.unsynced_bytes = 3 << 20;
        let mut full = member(Some(1), "/mnt/t/m1", MemberState::Active);
        full.no_space_errors = 7;
        full.filesystem = Some(FilesystemStatus {
            mount_point: "/mnt/t".into(),
            fs_type: "tmpfs".into(),
            free_bytes: 0,
            size_bytes: 200 << 20,
        });
        status.volume.members.push(full);
        let text = render(&status);
        assert!(
            text.contains("out of space: 7 writes refused (not a fault); filesystem /mnt/t (tmpfs) has 0 B free of 200.0 MiB"),
            "{text}"
        );
        assert!(
            text.contains("3.0 MiB of stripes left half-written"),
            "{text}"
        );
    }

    #[test]
    fn renders_one_mdstat_block_per_array() {
        let mut home = bare("raid1", ArrayHealth::Rebuilding);
        home.volume.size_bytes = 15 << 20;
        home.volume.members = vec![
            member(Some(0), "/d/home0", MemberState::Active),
            member(Some(1), "/d/spare", MemberState::Rebuilding),
            member(None, "/d/old", MemberState::Faulty),
        ];
        home.volume.task = a_rebuild_of_role_1();
        let mut media = bare("raid5", ArrayHealth::Degraded);
        media.volume.members = vec![
            member(Some(0), "/d/m0", MemberState::Active),
            member(Some(1), "", MemberState::Missing),
            member(Some(2), "/d/m2", MemberState::Active),
            member(None, "/d/m3", MemberState::Spare),
        ];
        media.journal = Some(JournalSection {
            name: "/d/j".into(),
            mode: JournalMode::WriteBack,
            volatile: false,
            volatile_reason: None,
            ring_bytes: 1 << 20,
            used_bytes: 0,
            write_back_record_bytes: 0,
            records_live: 0,
            commits: 0,
            checkpoints: 0,
            pressure_applies: 3,
            unapplied_bytes: Some(0),
        });
        let statuses = BTreeMap::from([("media".to_string(), media), ("home".to_string(), home)]);
        let text = render_all(&statuses);
        assert_eq!(
            text,
            "home : rebuilding raid1 /d/home0[0] /d/spare[1](rebuilding) /d/old(F)\n\
             \x20     15.0 MiB, chunk 64.0 KiB [2/1] [U_]\n\
             \x20     rebuild role 1: 25.0% (1.0 MiB of 4.0 MiB) at 1.0 MiB/s, ETA 0:00:03\n\
             \n\
             media : degraded raid5 /d/m0[0] missing[1](M) /d/m2[2] /d/m3(S)\n\
             \x20     3.0 GiB, chunk 64.0 KiB [3/2] [U_U]\n\
             \x20     journal: 3 applies under ring pressure\n"
        );
        let all = json!({ "arrays": serde_json::to_value(&statuses).unwrap() });
        assert_eq!(decode_statuses(all).unwrap(), statuses);
        assert!(decode_statuses(json!({ "status": {} })).is_err());
    }
}
