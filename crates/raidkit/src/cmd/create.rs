//! `raidkit create`: write superblocks for a new array.

use std::sync::Arc;

use layout::Level;
use member::{Member, OpenOptions};
use metadata::CreateOptions;

/// Create a new array: write a raidkit superblock to every member.
///
/// Members are given in role order. Each member is zeroed (hole punching on files, discard or
/// zero-out on block devices) so the array needs no initial sync. A member that already carries
/// a raidkit superblock or has non-zero data in its first MiB is refused unless --force is
/// given. Every level but linear uses the smallest member's data size (rounded down to the
/// chunk) on every member.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// RAID level: linear (alias concat), 0 (raid0), 1 (raid1), 10 (raid10), 5 (raid5),
    /// 6 (raid6). Members needed: linear ≥1, 0/1/10 ≥2, 5 ≥3, 6 ≥4.
    #[arg(long, short = 'l', value_name = "LEVEL", value_parser = parse_level)]
    level: Level,

    /// Chunk (stripe unit) size: a power of two from 4K to 4M.
    #[arg(long, short = 'c', value_name = "SIZE", default_value = "128K", value_parser = super::size_arg)]
    chunk: u64,

    /// Array name stored in the superblocks (1 to 32 bytes of UTF-8).
    #[arg(long, short = 'n', value_name = "NAME", default_value = "raidkit")]
    name: String,

    /// Create missing member files, sparse, with this size (K, M, G, T suffixes).
    #[arg(long, short = 's', value_name = "SIZE", value_parser = super::size_arg)]
    size: Option<u64>,

    /// Overwrite members that carry a superblock or data (destroys their contents).
    #[arg(long, short = 'f')]
    force: bool,

    /// Member files or block devices, in role order.
    #[arg(value_name = "MEMBER", required = true)]
    members: Vec<String>,
}

fn parse_level(text: &str) -> Result<Level, String> {
    text.parse::<Level>().map_err(|e| e.to_string())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Check what needs no member before creating any member file.
    let min = args.level.min_members();
    if args.members.len() < min {
        anyhow::bail!(
            "{} needs at least {min} members, {} given",
            args.level,
            args.members.len()
        );
    }
    metadata::validate_name(&args.name).map_err(anyhow::Error::msg)?;
    let opts = OpenOptions {
        create_size: args.size,
        read_only: false,
    };
    let members = args
        .members
        .iter()
        .map(|spec| member::open(spec, &opts).map_err(anyhow::Error::from))
        .collect::<anyhow::Result<Vec<Arc<dyn Member>>>>()?;
    let create_opts = CreateOptions {
        chunk_bytes: args.chunk,
        force: args.force,
        ..CreateOptions::new(args.level, &args.name)
    };
    let superblocks = metadata::create(&members, &create_opts)?;
    let first = &superblocks[0];
    println!(
        "created {} array \"{}\" {}: {} members, chunk {} bytes, {} bytes",
        first.level,
        first.name,
        first.array_uuid,
        first.member_count,
        first.chunk_bytes,
        first.array_size_bytes
    );
    Ok(())
}
