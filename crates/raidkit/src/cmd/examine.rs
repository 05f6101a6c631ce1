//! `raidkit examine`: print members' superblocks, as text or JSON.

use anyhow::Context;
use member::OpenOptions;
use metadata::{ArrayState, Role, RoleState, Superblock};
use serde::Serialize;

/// Print the raidkit superblock of each member (read-only; nothing is written).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON (an array with one object per member; field names are stable).
    #[arg(long)]
    json: bool,

    /// Member files or block devices.
    #[arg(value_name = "MEMBER", required = true)]
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
    /// The write-intent bitmap: array bytes per bit, or null without one.
    bitmap_region_bytes: Option<u64>,
    roles: Vec<RoleJson>,
}

#[derive(Debug, Serialize)]
struct RoleJson {
    role: usize,
    member_uuid: String,
    data_bytes: u64,
    state: &'static str,
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

fn to_json(member: &str, sb: &Superblock) -> SuperblockJson {
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
        bitmap_region_bytes: sb.bitmap.map(|b| b.region_bytes),
        roles,
    }
}

fn print_text(j: &SuperblockJson) {
    println!("{}:", j.member);
    let role = match j.role {
        Some(r) => format!("{r} of {}", j.member_count),
        None => "spare".to_string(),
    };
    let rows = [
        ("format version", j.format_version.to_string()),
        ("array uuid", j.array_uuid.clone()),
        ("array name", j.array_name.clone()),
        ("level", j.level.clone()),
        ("chunk bytes", j.chunk_bytes.to_string()),
        ("members", j.member_count.to_string()),
        ("role", role),
        ("member uuid", j.member_uuid.clone()),
        ("data offset", j.data_offset_bytes.to_string()),
        ("data bytes", j.data_bytes.to_string()),
        ("array bytes", j.array_size_bytes.to_string()),
        ("events", j.events.to_string()),
        ("state", j.state.to_string()),
        (
            "bitmap",
            match j.bitmap_region_bytes {
                Some(r) => format!("{r} bytes per bit"),
                None => "none".to_string(),
            },
        ),
        ("created", j.ctime_secs.to_string()),
        ("updated", j.utime_secs.to_string()),
    ];
    for (key, value) in rows {
        println!("  {key:<15} {value}");
    }
    for r in &j.roles {
        println!(
            "  role {:<10} {} {} ({} bytes)",
            r.role, r.state, r.member_uuid, r.data_bytes
        );
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let opts = OpenOptions {
        create_size: None,
        read_only: true,
    };
    let mut out = Vec::with_capacity(args.members.len());
    for spec in &args.members {
        let m = member::open(spec, &opts)?;
        let sb = metadata::read_superblock(m.as_ref())
            .with_context(|| format!("member {spec}: cannot examine"))?;
        out.push(to_json(spec, &sb));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for j in &out {
            print_text(j);
        }
    }
    Ok(())
}
