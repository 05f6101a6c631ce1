//! The renderer against md's own shapes and against the rules the parsers read it by.
//!
//! [`parse`] follows prometheus/procfs's `parseMDStat` (what node_exporter's mdadm collector
//! runs; telegraf's mdstat input is a copy of it) rule by rule: it is checked first on a
//! /proc/mdstat in the kernel's shapes, with the values procfs reads from such a file, then
//! every rendered file goes through it. The real node_exporter reads the real file in
//! tests/python/test_mdstat.py.

use super::*;
use volume::{ArrayHealth, TaskKind, TaskStatus};

/// What procfs reads from one array's lines (`MDStat`).
#[derive(Debug, Clone, PartialEq)]
struct Parsed {
    name: String,
    kind: String,
    state: String,
    active: i64,
    total: i64,
    failed: i64,
    down: i64,
    spare: i64,
    blocks: i64,
    synced: i64,
    to_sync: i64,
    pct: f64,
    finish: f64,
    speed: f64,
    /// (name, number, faulty, spare) of each member.
    devices: Vec<(String, i32, bool, bool)>,
}

/// procfs's `parseMDStat`: blank lines, lines that start with a space and the `unused` line
/// are skipped; the first `Personalities : ` line gives the known levels; any other line is
/// an array, whose next three lines must exist.
fn parse(text: &str) -> Result<Vec<Parsed>, String> {
    const PREFIX: &str = "Personalities : ";
    let lines: Vec<&str> = text.split('\n').collect();
    let mut known: Vec<String> = Vec::new();
    let mut arrays = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() || line.starts_with(' ') || line.starts_with("unused") {
            continue;
        }
        if known.is_empty() && line.starts_with(PREFIX) {
            for word in line[PREFIX.len()..].split_whitespace() {
                known.push(word[1..word.len() - 1].to_string());
            }
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 3 {
            return Err(format!("Expected 3+ lines, got {line:?}"));
        }
        let is_level = |w: &str| !w.contains(['(', '[']) && known.iter().any(|k| k == w);
        let (kind, first_member) = match fields.len() {
            n if n > 3 && is_level(fields[3]) => (fields[3], 4),
            n if n > 4 && is_level(fields[4]) => (fields[4], 5),
            _ => ("unknown", 0),
        };
        if lines.len() <= i + 3 {
            return Err(format!("Too few lines for md device: {:?}", fields[0]));
        }
        let (active, total, down, blocks) = status_line(line, lines[i + 1])?;
        let sync = match lines[i + 2].contains("bitmap") {
            true => lines[i + 3],
            false => lines[i + 2],
        };
        let mut state = fields[2].to_string();
        let (mut synced, mut to_sync, mut pct, mut finish, mut speed) =
            (blocks, blocks, 0., 0., 0.);
        let words = ["recovery", "reshape", "check", "resync"];
        if let Some(word) = words.iter().find(|w| sync.contains(*w)) {
            state = match *word {
                "recovery" => "recovering",
                "reshape" => "reshaping",
                "check" => "checking",
                _ => "resyncing",
            }
            .to_string();
            if sync.contains("PENDING") || sync.contains("DELAYED") {
                synced = 0;
            } else {
                (synced, to_sync, pct, finish, speed) = recovery_line(sync)?;
            }
        }
        arrays.push(Parsed {
            name: fields[0].to_string(),
            kind: kind.to_string(),
            state,
            active,
            total,
            failed: line.matches("(F)").count() as i64,
            down,
            spare: line.matches("(S)").count() as i64,
            blocks,
            synced,
            to_sync,
            pct,
            finish,
            speed,
            devices: fields[first_member..]
                .iter()
                .filter_map(|f| device(f))
                .collect(),
        });
    }
    Ok(arrays)
}

/// `evalStatusLine`: the size is the first field; raid0 and linear count their members by
/// the `[` of the array line; else `(\d+) blocks .*\[(\d+)/(\d+)\] \[([U_]+)\]`.
fn status_line(array: &str, status: &str) -> Result<(i64, i64, i64, i64), String> {
    let first = status
        .split_whitespace()
        .next()
        .ok_or("empty status line")?;
    let size: i64 = first.parse().map_err(|e| format!("{status:?}: {e}"))?;
    if array.contains("raid0") || array.contains("linear") {
        let total = array.matches('[').count() as i64;
        return Ok((total, total, 0, size));
    }
    if array.contains("inactive") {
        return Ok((0, 0, 0, size));
    }
    let after = status
        .split_once(" blocks ")
        .filter(|(before, _)| before.ends_with(|c: char| c.is_ascii_digit()))
        .ok_or(format!("no blocks in {status:?}"))?
        .1;
    // `.*` is greedy: the last `[n/m] [U_]` of the line.
    let (total, active, letters) = after
        .match_indices('[')
        .rev()
        .find_map(|(at, _)| counts(&after[at..]))
        .ok_or(format!("no [n/m] [U_] in {status:?}"))?;
    let down = letters.matches('_').count() as i64;
    Ok((active, total, down, size))
}

/// `[n/m] [U_...]` at the start of `text`.
fn counts(text: &str) -> Option<(i64, i64, &str)> {
    let (numbers, rest) = text.strip_prefix('[')?.split_once("] [")?;
    let (n, m) = numbers.split_once('/')?;
    let letters = rest.split(']').next()?;
    let number = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let ok = !letters.is_empty() && letters.chars().all(|c| "U_".contains(c));
    Some((number(n)?, number(m)?, ok.then_some(letters)?))
}

/// `evalRecoveryLine`: `\((\d+/\d+)\)`, `= (.+)%`, `finish=(.+)min`, `speed=(.+)[A-Z]`, each
/// the leftmost match with its greedy group.
#[allow(clippy::type_complexity)]
fn recovery_line(line: &str) -> Result<(i64, i64, f64, f64, f64), String> {
    let blocks = line
        .match_indices('(')
        .find_map(|(at, _)| {
            let (inner, _) = line[at + 1..].split_once(')')?;
            let (a, b) = inner.split_once('/')?;
            Some((a.parse::<i64>().ok()?, b.parse::<i64>().ok()?))
        })
        .ok_or(format!("no (done/total) in {line:?}"))?;
    let greedy = |start: &str, end: fn(&str) -> Option<usize>| -> Result<f64, String> {
        let (_, after) = line
            .split_once(start)
            .ok_or(format!("no {start:?} in {line:?}"))?;
        let stop = end(after).ok_or(format!("no end after {start:?} in {line:?}"))?;
        after[..stop]
            .trim()
            .parse::<f64>()
            .map_err(|e| format!("{line:?}: {e}"))
    };
    let pct = greedy("= ", |s| s.rfind('%'))?;
    let finish = greedy("finish=", |s| s.rfind("min"))?;
    let speed = greedy("speed=", |s| s.rfind(|c: char| c.is_ascii_uppercase()))?;
    Ok((blocks.0, blocks.1, pct, finish, speed))
}

/// `(.*)\[(\d+)\](\([SF]+\))?`: the last `[N]` of the field, its flags right after it.
fn device(field: &str) -> Option<(String, i32, bool, bool)> {
    let (name, number, rest) = field.match_indices('[').rev().find_map(|(at, _)| {
        let (digits, rest) = field[at + 1..].split_once(']')?;
        let number = digits
            .parse::<i32>()
            .ok()
            .filter(|_| !digits.starts_with(['+', '-']))?;
        Some((&field[..at], number, rest))
    })?;
    let flags = rest
        .strip_prefix('(')
        .and_then(|r| r.split_once(')'))
        .map(|(f, _)| f)
        .filter(|f| !f.is_empty() && f.chars().all(|c| "SF".contains(c)))
        .unwrap_or("");
    Some((
        name.to_string(),
        number,
        flags.contains('F'),
        flags.contains('S'),
    ))
}

/// A /proc/mdstat in the kernel's shapes (written for this test after md's code and real
/// files): a degraded RAID 6 with a faulty member, a spare and a bitmap; a RAID 1 recovering
/// with a bitmap; a RAID 10 checking; a RAID 0; a RAID 5 resyncing; a RAID 1 whose resync is
/// delayed (the kernel's tab).
const KERNEL_SHAPES: &str = "\
Personalities : [raid1] [raid6] [raid5] [raid4] [raid10] [raid0] [linear] 
md1 : active raid6 sdf1[5] sde1[4] sdd1[3] sdc1[2](F) sdb1[1] sda1[0] sdg1[6](S)
      7813771264 blocks super 1.2 level 6, 512k chunk, algorithm 2 [6/5] [UU_UUU]
      bitmap: 3/15 pages [12KB], 65536KB chunk

md2 : active raid1 sdh1[2] sdi1[0]
      976630464 blocks super 1.2 [2/1] [U_]
      [===>.................]  recovery = 17.3% (169243008/976630464) finish=72.9min speed=184509K/sec
      bitmap: 1/8 pages [4KB], 65536KB chunk

md3 : active raid10 sdj[0] sdk[1] sdl[2] sdm[3]
      1953260544 blocks super 1.2 512K chunks 2 near-copies [4/4] [UUUU]
      [=>...................]  check =  9.6% (187612160/1953260544) finish=152.4min speed=193063K/sec
      
md4 : active raid0 sdn1[0] sdo1[1]
      1953260544 blocks super 1.2 512k chunks
      
md5 : active raid5 sdp[0] sdq[1] sdr[3]
      1953260544 blocks super 1.2 level 5, 512k chunk, algorithm 2 [3/3] [UUU]
      [>....................]  resync =  0.4% (4194304/976630272) finish=88.2min speed=183712K/sec
      
md6 : active raid1 sds[0] sdt[1]
      1048512 blocks super 1.2 [2/2] [UU]
      \tresync=DELAYED
      
unused devices: <none>
";

/// The array named `name` of a parse.
fn named<'a>(parsed: &'a [Parsed], name: &str) -> &'a Parsed {
    parsed
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no {name} in {parsed:#?}"))
}

#[test]
fn the_parser_replica_reads_the_kernel_shapes_as_procfs_does() {
    let parsed = parse(KERNEL_SHAPES).unwrap();
    assert_eq!(parsed.len(), 6);
    let md1 = named(&parsed, "md1");
    assert_eq!(
        (
            md1.kind.as_str(),
            md1.state.as_str(),
            md1.active,
            md1.total,
            md1.failed,
            md1.down,
            md1.spare
        ),
        ("raid6", "active", 5, 6, 1, 1, 1)
    );
    assert_eq!((md1.blocks, md1.synced), (7813771264, 7813771264));
    assert_eq!(md1.devices[3], ("sdc1".to_string(), 2, true, false));
    assert_eq!(md1.devices[6], ("sdg1".to_string(), 6, false, true));
    let md2 = named(&parsed, "md2");
    assert_eq!(
        (md2.state.as_str(), md2.active, md2.total, md2.down),
        ("recovering", 1, 2, 1)
    );
    assert_eq!((md2.synced, md2.to_sync), (169243008, 976630464));
    assert_eq!((md2.pct, md2.finish, md2.speed), (17.3, 72.9, 184509.0));
    let md3 = named(&parsed, "md3");
    assert_eq!(
        (md3.kind.as_str(), md3.state.as_str(), md3.pct),
        ("raid10", "checking", 9.6)
    );
    let md4 = named(&parsed, "md4");
    assert_eq!((md4.active, md4.total, md4.synced), (2, 2, 1953260544));
    let md5 = named(&parsed, "md5");
    assert_eq!(
        (md5.state.as_str(), md5.synced, md5.pct),
        ("resyncing", 4194304, 0.4)
    );
    let md6 = named(&parsed, "md6");
    assert_eq!((md6.state.as_str(), md6.synced), ("resyncing", 0));
    // What procfs refuses, the replica refuses.
    assert!(parse("Personalities :\nunused devices: <none>\n").is_err());
    assert!(parse("md0 : active raid1 a[0]\n      12 blocks [1/1] [U]\n").is_err());
    let no_speed = KERNEL_SHAPES.replace("speed=184509K/sec", "");
    assert!(parse(&no_speed).is_err());
}

fn member(role: Option<usize>, name: &str, state: MemberState) -> MemberStatus {
    MemberStatus::new(role, name, state)
}

/// An array of `level` with `members`, 64 KiB chunks, no task and no bitmap.
fn array_of(level: &str, size_bytes: u64, members: Vec<MemberStatus>) -> VolumeStatus {
    let health = ArrayHealth::Active;
    VolumeStatus {
        events: 1,
        ..VolumeStatus::new("on-disk name", level, 64 << 10, size_bytes, health, members)
    }
}

fn task(
    kind: TaskKind,
    done_bytes: u64,
    total_bytes: u64,
    rate: u64,
    eta: Option<u64>,
) -> TaskStatus {
    TaskStatus::new(kind, None, done_bytes, total_bytes, rate, eta)
}

#[test]
fn a_healthy_and_a_degraded_array_render_as_md_prints_them() {
    use MemberState::*;
    let home = array_of(
        "raid1",
        1 << 30,
        vec![
            member(Some(0), "/dev/sdb", Active),
            member(Some(1), "/dev/sdc", Active),
        ],
    );
    let mut media = array_of(
        "raid5",
        3 << 30,
        vec![
            member(Some(0), "/srv/m0", Active),
            member(Some(1), "/srv/m1", Faulty),
            member(Some(2), "", Missing),
            member(Some(3), "/srv/m3", Active),
            member(None, "/srv/m4", Spare),
        ],
    );
    media.chunk_bytes = 512 << 10;
    media.bitmap = Some(BitmapStatus {
        region_bytes: 64 << 20,
        regions: 48,
        dirty_regions: 2,
        resync_pending_regions: 0,
        block_writes: 9,
    });
    let text = render([("home", &home), ("media", &media)]);
    assert_eq!(
        text,
        "Personalities : [linear] [raid0] [raid1] [raid10] [raid5] [raid6] \n\
         home : active raid1 /dev/sdb[0] /dev/sdc[1]\n\
         \x20     1048576 blocks super external:raidkit [2/2] [UU]\n\
         \x20     \n\
         media : active raid5 /srv/m0[0] /srv/m1[1](F) /srv/m3[3] /srv/m4[4](S)\n\
         \x20     3145728 blocks super external:raidkit level 5, 512k chunk, algorithm 2 [4/2] [U__U]\n\
         \x20     bitmap: 1/1 pages [4KB], 65536KB chunk\n\
         \n\
         unused devices: <none>\n"
    );
    let parsed = parse(&text).unwrap();
    let media = named(&parsed, "media");
    assert_eq!(
        (
            media.kind.as_str(),
            media.state.as_str(),
            media.active,
            media.total
        ),
        ("raid5", "active", 2, 4)
    );
    assert_eq!((media.failed, media.spare, media.down), (1, 1, 2));
    assert_eq!((media.blocks, media.synced), (3145728, 3145728));
    assert_eq!(media.devices[1], ("/srv/m1".to_string(), 1, true, false));
    let home = named(&parsed, "home");
    assert_eq!(
        (home.active, home.total, home.failed, home.down),
        (2, 2, 0, 0)
    );
}

#[test]
fn the_progress_line_is_md_s() {
    // The example of md's documentation, in raidkit's units (bytes, bytes per second).
    let mut t = task(
        TaskKind::Rebuild,
        37043392 << 10,
        292945152 << 10,
        33440 << 10,
        Some(127 * 60 + 32),
    );
    let limits = SpeedLimits::default();
    assert_eq!(
        progress(&t, &limits),
        "[==>..................]  recovery = 12.6% (37043392/292945152) finish=127.5min \
         speed=33440K/sec"
    );
    (t.kind, t.done_bytes, t.eta_secs) = (TaskKind::Scrub, 1 << 20, Some(59));
    assert_eq!(
        progress(&t, &limits),
        "[>....................]  check =  0.0% (1024/292945152) finish=0.9min speed=33440K/sec"
    );
    // Done but not yet over: 99.9 % as md shows it (never "=100.0%", which procfs refuses).
    (t.kind, t.done_bytes) = (TaskKind::Resync, t.total_bytes);
    assert!(progress(&t, &limits).starts_with("[===================>.]  resync = 99.9% "));
    // No rate measured yet: the time left at the minimum speed limit (1 MiB/s).
    let fresh = task(TaskKind::Replace, 0, 600 << 20, 0, None);
    assert_eq!(
        progress(&fresh, &limits),
        "[>....................]  recovery =  0.0% (0/614400) finish=10.0min speed=0K/sec"
    );
    // Paused outside the background window: its position, no speed.
    let mut paused = task(TaskKind::Scrub, 300 << 20, 600 << 20, 8 << 20, Some(37));
    paused.paused = Some("outside the background window 19:00-05:00".into());
    assert_eq!(
        progress(&paused, &limits),
        "[==========>..........]  check = 50.0% (307200/614400) finish=5.0min speed=0K/sec"
    );
    for kind in [TaskKind::Repair, TaskKind::InitialSync] {
        assert!(progress(&task(kind, 1, 2, 0, None), &limits).contains("  resync = 50.0% "));
    }
}

#[test]
fn each_background_task_reads_as_its_md_state_with_the_blocks_synced() {
    use MemberState::*;
    let mut raid6 = array_of(
        "raid6",
        256 << 20,
        (0..4)
            .map(|r| member(Some(r), &format!("m{r}"), Active))
            .collect(),
    );
    let cases = [
        (TaskKind::Rebuild, "recovering"),
        (TaskKind::Replace, "recovering"),
        (TaskKind::Scrub, "checking"),
        (TaskKind::Repair, "resyncing"),
        (TaskKind::Resync, "resyncing"),
        (TaskKind::InitialSync, "resyncing"),
    ];
    let done = |kind| task(kind, 128 << 20, 128 << 20, 8 << 20, Some(0));
    for kind in [TaskKind::Rebuild, TaskKind::Scrub, TaskKind::Resync] {
        raid6.task = Some(done(kind));
        let text = render([("r6", &raid6)]);
        let p = &parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))[0];
        assert_eq!((p.synced, p.pct), (128 << 10, 99.9), "{text}");
    }
    for (kind, state) in cases {
        raid6.task = Some(task(kind, 40 << 20, 128 << 20, 8 << 20, Some(11)));
        for bitmap in [
            None,
            Some(BitmapStatus {
                region_bytes: 1 << 20,
                regions: 256,
                dirty_regions: 0,
                resync_pending_regions: 0,
                block_writes: 0,
            }),
        ] {
            raid6.bitmap = bitmap;
            let text = render([("r6", &raid6)]);
            let parsed = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(parsed.len(), 1, "{text}");
            let p = &parsed[0];
            assert_eq!(p.state, state, "{kind:?}\n{text}");
            assert_eq!((p.synced, p.to_sync), (40 << 10, 128 << 10), "{text}");
            assert_eq!((p.pct, p.finish, p.speed), (31.2, 0.1, 8192.0), "{text}");
            assert_eq!(p.blocks, 256 << 10);
        }
    }
    // A rebuild: the member being rebuilt is listed with no mark and counted out of sync.
    raid6.members[2].state = Rebuilding;
    raid6.task = Some(task(TaskKind::Rebuild, 1 << 20, 128 << 20, 0, None));
    raid6.bitmap = None;
    let text = render([("r6", &raid6)]);
    assert!(
        text.contains("r6 : active raid6 m0[0] m1[1] m2[2] m3[3]\n"),
        "{text}"
    );
    assert!(
        text.contains("level 6, 64k chunk, algorithm 2 [4/3] [UU_U]\n"),
        "{text}"
    );
    let p = &parse(&text).unwrap()[0];
    assert_eq!(
        (p.active, p.total, p.down, p.failed, p.synced),
        (3, 4, 1, 0, 1024)
    );
}

#[test]
fn every_level_has_its_personality_s_geometry_and_parses() {
    use MemberState::*;
    let members = |n: usize| -> Vec<MemberStatus> {
        (0..n)
            .map(|r| member(Some(r), &format!("/d/{r}"), Active))
            .collect()
    };
    let cases = [
        ("linear", 3, " 64k rounding\n", (3, 3)),
        ("raid0", 3, " 64k chunks\n", (3, 3)),
        ("raid1", 2, " [2/2] [UU]\n", (2, 2)),
        (
            "raid10",
            4,
            " 64K chunks 2 near-copies [4/4] [UUUU]\n",
            (4, 4),
        ),
        (
            "raid5",
            3,
            " level 5, 64k chunk, algorithm 2 [3/3] [UUU]\n",
            (3, 3),
        ),
        (
            "raid6",
            4,
            " level 6, 64k chunk, algorithm 2 [4/4] [UUUU]\n",
            (4, 4),
        ),
    ];
    for (level, n, geometry, (active, total)) in cases {
        let status = array_of(level, 96 << 20, members(n));
        let text = render([("a", &status)]);
        let size_line = format!("      98304 blocks super external:raidkit{geometry}");
        assert!(text.contains(&size_line), "{level}: {text}");
        let p = &parse(&text).unwrap()[0];
        assert_eq!(
            (p.kind.as_str(), p.state.as_str()),
            (level, "active"),
            "{text}"
        );
        assert_eq!((p.active, p.total, p.failed), (active, total, 0), "{text}");
        assert_eq!(p.devices.len(), n);
    }
    // A faulty raid0 member: md has none (the array stops), raidkit lists it (F).
    let mut raid0 = array_of("raid0", 96 << 20, members(2));
    raid0.members[1].state = Faulty;
    raid0.health = ArrayHealth::Failed;
    let p = &parse(&render([("z", &raid0)])).unwrap()[0];
    assert_eq!((p.failed, p.total), (1, 2));
}

#[test]
fn spares_replacements_and_faulty_members_without_a_role_get_their_own_numbers() {
    use MemberState::*;
    let mut status = array_of(
        "raid1",
        1 << 30,
        vec![
            member(Some(0), "a", Active),
            member(Some(1), "b", Replacing),
            member(Some(1), "c", ReplacementTarget),
            member(None, "d", Spare),
            member(None, "e", Faulty),
        ],
    );
    status.task = Some(task(TaskKind::Replace, 0, 1 << 30, 0, None));
    let text = render([("r", &status)]);
    assert!(text.starts_with("Personalities"), "{text}");
    assert!(
        text.contains("r : active raid1 a[0] b[1] c[2](R) d[3](S) e[4](F)\n"),
        "{text}"
    );
    assert!(text.contains(" [2/2] [UU]\n"), "{text}");
    let p = &parse(&text).unwrap()[0];
    assert_eq!(
        (p.active, p.total, p.spare, p.failed, p.state.as_str()),
        (2, 2, 1, 1, "recovering")
    );
    let numbers: Vec<i32> = p.devices.iter().map(|d| d.1).collect();
    assert_eq!(numbers, [0, 1, 2, 3, 4]);
}

#[test]
fn a_write_mostly_member_carries_md_s_w_mark() {
    use MemberState::*;
    let mut b = member(Some(1), "b", Active);
    b.write_mostly = true;
    let mut c = member(Some(2), "c", Faulty);
    c.write_mostly = true;
    let status = array_of("raid1", 1 << 30, vec![member(Some(0), "a", Active), b, c]);
    let text = render([("r", &status)]);
    assert!(
        text.contains("r : active raid1 a[0] b[1](W) c[2](W)(F)\n"),
        "{text}"
    );
    let p = &parse(&text).unwrap()[0];
    assert_eq!((p.active, p.total, p.failed), (2, 3, 1));
}

#[test]
fn names_are_one_field_the_parsers_read_back() {
    use MemberState::*;
    assert_eq!(token("my array"), "my_array");
    assert_eq!(token("nbd://[::1]:10809/x"), "nbd://_::1_:10809/x");
    assert_eq!(token("a(F)\tb"), "a_F__b");
    let status = array_of(
        "raid1",
        1 << 20,
        vec![
            member(Some(0), "nbd://[::1]:10809/disk (F)", Active),
            member(Some(1), "nbd+unix:///d?socket=/run/s.sock", Active),
            member(None, "/mnt/my disks/spare", Spare),
        ],
    );
    let text = render([("old backups", &status)]);
    let p = &parse(&text).unwrap()[0];
    assert_eq!(p.name, "old_backups");
    assert_eq!((p.active, p.total, p.failed, p.spare), (2, 2, 0, 1));
    let names: Vec<&str> = p.devices.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "nbd://_::1_:10809/disk__F_",
            "nbd+unix:///d?socket=/run/s.sock",
            "/mnt/my_disks/spare"
        ]
    );
}

#[test]
fn no_array_is_the_two_lines_md_prints() {
    let none: [(&str, &VolumeStatus); 0] = [];
    let text = render(none);
    assert_eq!(
        text,
        "Personalities : [linear] [raid0] [raid1] [raid10] [raid5] [raid6] \n\
         unused devices: <none>\n"
    );
    assert_eq!(parse(&text).unwrap(), []);
}

#[test]
fn the_sync_summary_counts_roles_in_sync() {
    use MemberState::*;
    let members = [
        member(Some(0), "", Active),
        member(Some(1), "", Active),
        member(Some(2), "", Faulty),
        member(Some(3), "", Replacing),
        member(Some(3), "", ReplacementTarget),
        member(None, "", Spare),
    ];
    assert_eq!(sync_summary(&members), "[4/3] [UU_U]");
}
