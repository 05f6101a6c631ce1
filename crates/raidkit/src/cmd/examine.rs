//! `raidkit examine`: print members' superblocks, as text or JSON.

use anyhow::Context;
use member::OpenOptions;
use ondisk::{ArrayState, Role, RoleState, Superblock};
use serde::Serialize;

use crate::units::human_bytes;

/// Print the raidkit superblock of each member (read-only; nothing is written).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON (an array with one object per member; field names are stable).
    #[arg(long, conflicts_with = "scan")]
    json: bool,

    /// Print a configuration entry (`[[array]]` table, as the daemon's config file takes it)
    /// for each array found on the given files, block devices, NBD URIs or globs (quote
    /// globs: "/dev/sd*"); with none, every block device in /proc/partitions (as `mdadm
    /// --examine --scan`).
    #[arg(long)]
    scan: bool,

    /// Member files or block devices.
    #[arg(value_name = "MEMBER", required_unless_present = "scan")]
    members: Vec<String>,
}

/// The JSON form of one member's superblock. Field names are a stable interface.
#[derive(Debug, Serialize)]
struct SuperblockJson {
    member: String,
    format_version: u32,
    feature_compat: u64,
    feature_incompat: u64,
    array_uuid: String,
    array_name: String,
    level: String,
    layout: u32,
    chunk_bytes: u64,
    member_count: u32,
    /// Role number, or null for a spare.
    role: Option<u32>,
    spare: bool,
    member_uuid: String,
    data_offset_bytes: u64,
    data_bytes: u64,
    array_size_bytes: u64,
    member_bytes: u64,
    ctime_secs: u64,
    utime_secs: u64,
    events: u64,
    state: &'static str,
    recovery_offset_bytes: Option<u64>,
    /// The target of a replace: its data-area bytes copied so far (as of a clean shutdown).
    replace_offset_bytes: Option<u64>,
    /// The write-intent bitmap: array bytes per bit, or null without one.
    bitmap_region_bytes: Option<u64>,
    /// The used-regions map: array bytes per bit, or null without one (rebuilds copy all).
    used_region_bytes: Option<u64>,
    /// A reshape in progress (`grow --add` stopped before the end), or null.
    reshape: Option<ReshapeJson>,
    /// The process serving the array (or that did and did not stop cleanly), or null.
    owner: Option<OwnerJson>,
    roles: Vec<RoleJson>,
    /// Encryption at rest, or null for an array without it.
    encryption: Option<EncryptionJson>,
    /// The member's bad-block list, or null when it keeps none.
    bad_blocks: Option<BadBlocksJson>,
    /// Block checksums, or null for an array without them.
    checksum: Option<ChecksumJson>,
}

/// A reshape in progress: the old member count, the recorded position, the backup area.
#[derive(Debug, Serialize)]
struct ReshapeJson {
    old_member_count: u32,
    position_bytes: u64,
    backup_offset_bytes: u64,
}

/// Where the member's checksum area is and its algorithm.
#[derive(Debug, Serialize)]
struct ChecksumJson {
    algorithm: &'static str,
    area_offset_bytes: u64,
    area_bytes: u64,
}

/// A member's bad-block list: the ranges of its data area recorded as lost.
#[derive(Debug, Serialize)]
struct BadBlocksJson {
    /// Bytes of the data area: `[offset, offset + len)` each.
    ranges: Vec<BadRangeJson>,
    /// Why the list could not be read (then `ranges` is empty), or null.
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct BadRangeJson {
    offset: u64,
    len: u64,
}

/// The list `sb` names on `m`, read.
fn bad_blocks_json(m: &dyn member::Member, sb: &Superblock) -> Option<BadBlocksJson> {
    let at = sb.bad_blocks?;
    Some(match ondisk::badblocks::read_list(m, &sb.array_uuid, &at) {
        Ok(list) => BadBlocksJson {
            ranges: (list.ranges().iter())
                .map(|r| BadRangeJson {
                    offset: r.offset,
                    len: r.len,
                })
                .collect(),
            error: None,
        },
        Err(e) => BadBlocksJson {
            ranges: Vec::new(),
            error: Some(e.to_string()),
        },
    })
}

/// An encrypted array's cipher and key slots (never anything secret).
#[derive(Debug, Serialize)]
struct EncryptionJson {
    cipher: &'static str,
    unit_bytes: usize,
    key_slots: Vec<KeySlotJson>,
}

#[derive(Debug, Serialize)]
struct KeySlotJson {
    slot: usize,
    kdf: &'static str,
    memory_kib: u32,
    iterations: u32,
    parallelism: u32,
}

#[derive(Debug, Serialize)]
struct OwnerJson {
    host_name: String,
    pid: u32,
    since_secs: u64,
    renewed_secs: u64,
    lease_secs: u32,
}

#[derive(Debug, Serialize)]
struct RoleJson {
    role: usize,
    member_uuid: String,
    data_bytes: u64,
    state: &'static str,
    /// A spare that is the target of a replace of this role.
    replacing: Option<u32>,
}

fn state_name(state: ArrayState) -> &'static str {
    match state {
        ArrayState::Clean => "clean",
        ArrayState::Dirty => "dirty",
    }
}

fn role_state_name(state: RoleState) -> &'static str {
    match state {
        RoleState::Unused => "unused",
        RoleState::Active => "active",
        RoleState::Faulty => "faulty",
        RoleState::Missing => "missing",
        RoleState::Spare => "spare",
    }
}

fn to_json(member: &str, sb: &Superblock, bad_blocks: Option<BadBlocksJson>) -> SuperblockJson {
    let roles = sb
        .roles
        .iter()
        .enumerate()
        .filter(|(_, r)| r.state != RoleState::Unused)
        .map(|(role, r)| RoleJson {
            role,
            member_uuid: r.member_uuid.to_string(),
            data_bytes: r.data_bytes,
            state: role_state_name(r.state),
            replacing: r.replacing,
        })
        .collect();
    SuperblockJson {
        member: member.to_string(),
        format_version: sb.version,
        feature_compat: sb.feature_compat,
        feature_incompat: sb.feature_incompat,
        array_uuid: sb.array_uuid.to_string(),
        array_name: sb.name.clone(),
        level: sb.level.to_string(),
        layout: sb.layout,
        chunk_bytes: sb.chunk_bytes,
        member_count: sb.member_count,
        role: sb.role_index().map(|r| r as u32),
        spare: sb.role == Role::Spare,
        member_uuid: sb.member_uuid.to_string(),
        data_offset_bytes: sb.data_offset_bytes,
        data_bytes: sb.data_bytes,
        array_size_bytes: sb.array_size_bytes,
        member_bytes: sb.member_bytes,
        ctime_secs: sb.ctime_secs,
        utime_secs: sb.utime_secs,
        events: sb.events,
        state: state_name(sb.state),
        recovery_offset_bytes: sb.recovery_offset_bytes,
        replace_offset_bytes: sb.replace_offset_bytes,
        bitmap_region_bytes: sb.bitmap.map(|b| b.region_bytes),
        used_region_bytes: sb.used_map.map(|u| u.region_bytes),
        reshape: sb.reshape.map(|r| ReshapeJson {
            old_member_count: r.old_member_count,
            position_bytes: r.position_bytes,
            backup_offset_bytes: r.backup_offset_bytes,
        }),
        owner: sb.owner.as_ref().map(|o| OwnerJson {
            host_name: o.process.host_name.clone(),
            pid: o.process.pid,
            since_secs: o.since_secs,
            renewed_secs: o.renewed_secs,
            lease_secs: o.lease_secs,
        }),
        roles,
        checksum: sb.checksum.map(|c| ChecksumJson {
            algorithm: c.alg.name(),
            area_offset_bytes: c.offset_bytes,
            area_bytes: c.bytes,
        }),
        encryption: sb.encryption.as_ref().map(|area| EncryptionJson {
            cipher: area.cipher_name(),
            unit_bytes: area.unit_bytes(),
            key_slots: (area.active().into_iter())
                .map(|(slot, kdf)| KeySlotJson {
                    slot,
                    kdf: "argon2id",
                    memory_kib: kdf.memory_kib,
                    iterations: kdf.iterations,
                    parallelism: kdf.parallelism,
                })
                .collect(),
        }),
        bad_blocks,
    }
}

/// 65536 → "65536 (64.0 KiB)": the exact value first, the unit form beside it.
fn bytes(n: u64) -> String {
    if n < 1024 {
        return n.to_string();
    }
    format!("{n} ({})", human_bytes(n))
}

/// Seconds since the Unix epoch → "2026-11-25T07:30:28Z" (UTC, ISO 8601).
fn date(secs: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The text form: sizes in bytes with units beside them, dates in UTC (`--json` keeps raw
/// values).
fn render_text(j: &SuperblockJson) -> String {
    let role = match j.role {
        Some(r) => format!("{r} of {}", j.member_count),
        None => "spare".to_string(),
    };
    let rows = [
        ("format version", j.format_version.to_string()),
        ("array uuid", j.array_uuid.clone()),
        ("array name", j.array_name.clone()),
        ("level", j.level.clone()),
        ("chunk bytes", bytes(j.chunk_bytes)),
        ("members", j.member_count.to_string()),
        ("role", role),
        ("member uuid", j.member_uuid.clone()),
        ("data offset", bytes(j.data_offset_bytes)),
        ("data bytes", bytes(j.data_bytes)),
        ("array bytes", bytes(j.array_size_bytes)),
        ("member bytes", bytes(j.member_bytes)),
        ("events", j.events.to_string()),
        ("state", j.state.to_string()),
        (
            "bitmap",
            match j.bitmap_region_bytes {
                Some(r) => format!("{} per bit", human_bytes(r)),
                None => "none".to_string(),
            },
        ),
        (
            "checksums",
            match &j.checksum {
                Some(c) => format!(
                    "{} per 4 KiB block, {} at byte {}",
                    c.algorithm,
                    bytes(c.area_bytes),
                    c.area_offset_bytes
                ),
                None => "none".to_string(),
            },
        ),
        (
            "used map",
            match j.used_region_bytes {
                Some(r) => format!("{} per bit (used-regions map)", human_bytes(r)),
                None => "none".to_string(),
            },
        ),
        (
            "reshape",
            match &j.reshape {
                Some(r) => format!(
                    "{} -> {} members, moved below array byte {} (backup area at byte {}); \
                     finish it with raidkit grow and every member",
                    r.old_member_count, j.member_count, r.position_bytes, r.backup_offset_bytes
                ),
                None => "none".to_string(),
            },
        ),
        ("created", date(j.ctime_secs)),
        ("updated", date(j.utime_secs)),
    ];
    let mut out = format!("{}:\n", j.member);
    for (key, value) in rows {
        out += &format!("  {key:<15} {value}\n");
    }
    if let Some(offset) = j.recovery_offset_bytes {
        out += &format!("  {:<15} {}\n", "rebuilt to", bytes(offset));
    }
    if let Some(offset) = j.replace_offset_bytes {
        out += &format!("  {:<15} {}\n", "replaced to", bytes(offset));
    }
    if let Some(o) = &j.owner {
        out += &format!(
            "  {:<15} pid {} on host {} since {}, lease renewed {} for {} s\n",
            "owner",
            o.pid,
            o.host_name,
            date(o.since_secs),
            date(o.renewed_secs),
            o.lease_secs
        );
    }
    if let Some(e) = &j.encryption {
        out += &format!(
            "  {:<15} {}, {}-byte units\n",
            "encryption", e.cipher, e.unit_bytes
        );
        for k in &e.key_slots {
            out += &format!(
                "  {:<15} {} m={} t={} p={}\n",
                format!("key slot {}", k.slot),
                k.kdf,
                human_bytes(u64::from(k.memory_kib) * 1024),
                k.iterations,
                k.parallelism
            );
        }
    }
    if let Some(b) = &j.bad_blocks {
        let summary = match (&b.error, b.ranges.len()) {
            (Some(e), _) => format!("unreadable: {e}"),
            (None, 0) => "none recorded".to_string(),
            (None, n) => format!("{n} ranges of the data area recorded as lost"),
        };
        out += &format!("  {:<15} {summary}\n", "bad blocks");
        for r in &b.ranges {
            out += &format!(
                "  {:<15} bytes {}-{} ({})\n",
                "",
                r.offset,
                r.offset + r.len,
                human_bytes(r.len)
            );
        }
    }
    for r in &j.roles {
        let replacing = match r.replacing {
            Some(role) => format!(", replacing role {role}"),
            None => String::new(),
        };
        out += &format!(
            "  role {:<10} {} {} ({}{replacing})\n",
            r.role,
            r.state,
            r.member_uuid,
            human_bytes(r.data_bytes)
        );
    }
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.scan {
        return scan(&args.members);
    }
    let opts = OpenOptions {
        create_size: None,
        read_only: true,
        ..OpenOptions::default()
    };
    let mut out = Vec::with_capacity(args.members.len());
    for spec in &args.members {
        let m = member::open(spec, &opts)?;
        let sb = ondisk::read_superblock(m.as_ref())
            .with_context(|| format!("member {spec}: cannot examine"))?;
        out.push(to_json(spec, &sb, bad_blocks_json(m.as_ref(), &sb)));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for j in &out {
            print!("{}", render_text(j));
        }
    }
    Ok(())
}

/// `--scan`: every array superblock and journal found on `specs`, written as config entries.
fn scan(specs: &[String]) -> anyhow::Result<()> {
    let devices = scan_targets(specs)?;
    let opts = OpenOptions {
        create_size: None,
        read_only: true,
        ..OpenOptions::default()
    };
    let (mut members, mut journals) = (Vec::new(), Vec::new());
    for (path, named) in &devices {
        let device = match member::open(path, &opts) {
            Ok(device) => device,
            Err(e) if *named => anyhow::bail!("{path}: cannot open it to scan: {e}"),
            Err(_) => continue, // a partition that went away, a drive without media
        };
        match ondisk::read_superblock(device.as_ref()) {
            Ok(superblock) => members.push(config::ScannedMember {
                path: path.clone(),
                superblock,
            }),
            Err(ondisk::ReadSuperblockError::Io(e)) if *named => {
                anyhow::bail!("{path}: cannot read it to scan: {e}")
            }
            Err(_) => {
                if let Ok(sb) = journal::read_superblock(device.as_ref()) {
                    journals.push(config::ScannedJournal {
                        path: path.clone(),
                        array_uuid: sb.array_uuid,
                        journal_uuid: sb.journal_uuid,
                    });
                }
            }
        }
    }
    if members.is_empty() {
        anyhow::bail!(
            "no raidkit array superblock on any of the {} devices scanned",
            devices.len()
        );
    }
    print!(
        "{}",
        config::render_scan(&config::group(&members, &journals))
    );
    Ok(())
}

/// The devices `--scan` reads, each with whether the user named it (an error opening it is
/// then reported, not skipped): the specs with globs expanded, or every block device of
/// /proc/partitions.
fn scan_targets(specs: &[String]) -> anyhow::Result<Vec<(String, bool)>> {
    let mut targets = Vec::new();
    if specs.is_empty() {
        let table = std::fs::read_to_string("/proc/partitions")
            .context("cannot list block devices (/proc/partitions); name the devices to scan")?;
        for name in table
            .lines()
            .skip(2)
            .filter_map(|l| l.split_whitespace().nth(3))
        {
            let path = format!("/dev/{name}");
            if std::path::Path::new(&path).exists() {
                targets.push((path, false));
            }
        }
    }
    for spec in specs {
        if !spec.contains(['*', '?', '[']) || spec.contains("://") {
            targets.push((spec.clone(), true));
            continue;
        }
        let paths = glob::glob(spec).with_context(|| format!("{spec:?} is not a valid glob"))?;
        for path in paths {
            let path = path.with_context(|| format!("cannot expand {spec:?}"))?;
            targets.push((path.display().to_string(), false));
        }
    }
    // One entry per path; a path both named and matched by a glob counts as named.
    targets.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    targets.dedup_by(|later, first| later.0 == first.0);
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_shows_dates_in_utc_and_sizes_with_units() {
        let j = SuperblockJson {
            member: "a.img".into(),
            format_version: 1,
            feature_compat: 0,
            feature_incompat: 0,
            array_uuid: "u".into(),
            array_name: "media".into(),
            level: "raid5".into(),
            layout: 0,
            chunk_bytes: 65536,
            member_count: 4,
            role: Some(2),
            spare: false,
            member_uuid: "m".into(),
            data_offset_bytes: 1 << 20,
            data_bytes: 9 << 20,
            array_size_bytes: 27 << 20,
            member_bytes: 10 << 20,
            ctime_secs: 1795585227,
            utime_secs: 1795585228,
            events: 3,
            state: "clean",
            recovery_offset_bytes: Some(3 << 20),
            replace_offset_bytes: None,
            bitmap_region_bytes: Some(64 << 20),
            used_region_bytes: Some(4 << 20),
            reshape: None,
            owner: Some(OwnerJson {
                host_name: "vm".into(),
                pid: 42,
                since_secs: 1795585227,
                renewed_secs: 1795585228,
                lease_secs: 30,
            }),
            roles: vec![RoleJson {
                role: 0,
                member_uuid: "m".into(),
                data_bytes: 9 << 20,
                state: "active",
                replacing: None,
            }],
            checksum: Some(ChecksumJson {
                algorithm: "crc32c",
                area_offset_bytes: 12288,
                area_bytes: 4096,
            }),
            encryption: Some(EncryptionJson {
                cipher: "aes-xts-plain64 (AES-256)",
                unit_bytes: 512,
                key_slots: vec![KeySlotJson {
                    slot: 2,
                    kdf: "argon2id",
                    memory_kib: 65536,
                    iterations: 3,
                    parallelism: 1,
                }],
            }),
            bad_blocks: Some(BadBlocksJson {
                ranges: vec![BadRangeJson {
                    offset: 1 << 20,
                    len: 4096,
                }],
                error: None,
            }),
        };
        let text = render_text(&j);
        for needle in [
            "  created         2026-11-25T05:40:27Z\n",
            "  updated         2026-11-25T05:40:28Z\n",
            "  chunk bytes     65536 (64.0 KiB)\n",
            "  encryption      aes-xts-plain64 (AES-256), 512-byte units\n",
            "  key slot 2      argon2id m=64.0 MiB t=3 p=1\n",
            "  data offset     1048576 (1.0 MiB)\n",
            "  array bytes     28311552 (27.0 MiB)\n",
            "  member bytes    10485760 (10.0 MiB)\n",
            "  bitmap          64.0 MiB per bit\n",
            "  checksums       crc32c per 4 KiB block, 4096 (4.0 KiB) at byte 12288\n",
            "  used map        4.0 MiB per bit (used-regions map)\n",
            "  rebuilt to      3145728 (3.0 MiB)\n",
            "  bad blocks      1 ranges of the data area recorded as lost\n",
            "                  bytes 1048576-1052672 (4.0 KiB)\n",
            "  role 0          active m (9.0 MiB)\n",
            "  owner           pid 42 on host vm since 2026-11-25T05:40:27Z, lease renewed \
             2026-11-25T05:40:28Z for 30 s\n",
        ] {
            assert!(text.contains(needle), "{needle:?} in:\n{text}");
        }
        assert!(!text.contains("1795585227"), "{text}");
    }
}
