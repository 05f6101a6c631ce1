//! `raidkit create`: write superblocks for a new array.

use std::sync::Arc;

use layout::Level;
use member::{Member, OpenOptions};
use ondisk::CreateOptions;
use service::array_journal;

/// Create a new array: write a raidkit superblock to every member.
///
/// Members are given in role order. Each member is zeroed (hole punching on files, discard or
/// zero-out on block devices) so the array needs no initial sync. A member that already carries
/// a raidkit superblock or has non-zero data in its first MiB is refused unless --force is
/// given. Every level but linear uses the smallest member's data size (rounded down to the
/// chunk) on every member.
///
/// Member files created with --size are sparse: they take space on their filesystem only as the
/// array is written. When the members on one filesystem could outgrow its free space, create
/// says so; --preallocate reserves the space up front instead.
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

    /// A hot spare (repeatable): it receives a spare superblock of the new array and takes
    /// the place of the first member that fails while the array is served.
    #[arg(long, value_name = "MEMBER")]
    spare: Vec<String>,

    /// Skip the initial sync of members that cannot be zeroed cheaply (block devices, remote
    /// members): you promise they are zeroed or otherwise consistent (as mdadm --assume-clean).
    #[arg(long)]
    assume_clean: bool,

    /// When the array needs an initial sync, run it now (progress bar in a terminal) instead
    /// of in the background the first time the array is served.
    #[arg(long, conflicts_with = "assume_clean")]
    sync_now: bool,

    /// Reserve the member files' blocks now (fallocate) instead of leaving them sparse, so a
    /// full filesystem can never refuse the array's writes later. Refused before anything is
    /// written when the filesystem has not the room. (A client's TRIM releases blocks again.)
    #[arg(long)]
    preallocate: bool,

    #[command(flatten)]
    bitmap: BitmapArgs,

    #[command(flatten)]
    journal: crate::journal_args::JournalArgs,

    /// Encrypt the array at rest (AES-256-XTS, a random data key kept in key slots wrapped by
    /// Argon2id): no member and no journal ever holds plaintext. The key is --key-file,
    /// --passphrase-file or a passphrase typed twice on the terminal; `raidkit key add`
    /// adds others.
    #[arg(long)]
    encrypt: bool,

    /// Keep a checksum (ALG: crc32c) of every 4 KiB block of every member, parity included, in a
    /// checksum area before the data (4 bytes per block; the data offset grows past 1 MiB
    /// when the area needs it). Every read is checked: a block changed behind raidkit's back
    /// is rewritten from redundancy (a mirror copy, parity), or is a read error on linear and
    /// RAID 0; scrub checks every block.
    #[arg(long, value_name = "ALG")]
    checksum: Option<ondisk::ChecksumAlg>,

    #[command(flatten)]
    key: crate::key_args::KeyArgs,

    #[command(flatten)]
    kdf: crate::key_args::KdfArgs,

    /// Member files, block devices or NBD URIs, in role order.
    #[arg(value_name = "MEMBER", required = true)]
    members: Vec<String>,
}

/// The write-intent bitmap flags (create, and serve --create).
#[derive(Debug, clap::Args)]
pub struct BitmapArgs {
    /// Write-intent bitmap region: array bytes per bit (a power of two, at least 4K; default
    /// 64M, grown when the array would need more than 2^20 bits). After an unclean shutdown
    /// only regions with their bit set are resynced. Redundant levels only.
    #[arg(long, value_name = "SIZE", value_parser = super::size_arg, conflicts_with = "no_bitmap")]
    pub bitmap_region: Option<u64>,

    /// No write-intent bitmap (on by default for RAID 1, 10, 5 and 6): an unclean shutdown
    /// then resyncs the whole array, and a returning member is rebuilt in full.
    #[arg(long)]
    pub no_bitmap: bool,

    /// No bad-block list (on by default for RAID 1, 10, 5 and 6): a rebuild that meets an
    /// unreadable range where no redundancy is left then fails instead of recording the range
    /// as lost and going on.
    #[arg(long)]
    pub no_bad_blocks: bool,

    /// Used-regions map region: array bytes per bit (a multiple of 4K, rounded up to whole
    /// stripes; default 4M, grown when the array would need more than 2^20 bits). A rebuild,
    /// replace or initial sync copies only the regions that were written (and not trimmed
    /// whole since). Redundant levels only.
    #[arg(long, value_name = "SIZE", value_parser = super::size_arg, conflicts_with = "no_used_map")]
    pub used_region: Option<u64>,

    /// No used-regions map (on by default for RAID 1, 10, 5 and 6): rebuilds, replaces and
    /// initial syncs then copy every byte.
    #[arg(long)]
    pub no_used_map: bool,
}

impl BitmapArgs {
    /// The region size to create with, given the level's default.
    pub fn region(&self, default: Option<u64>) -> Option<u64> {
        match (self.no_bitmap, self.bitmap_region) {
            (true, _) => None,
            (false, Some(region)) => Some(region),
            (false, None) => default,
        }
    }

    /// The used-map region to create with, given the level's default.
    pub fn used_region(&self, default: Option<u64>) -> Option<u64> {
        match (self.no_used_map, self.used_region) {
            (true, _) => None,
            (false, Some(region)) => Some(region),
            (false, None) => default,
        }
    }
}

fn parse_level(text: &str) -> Result<Level, String> {
    text.parse::<Level>().map_err(|e| e.to_string())
}

/// RAM members are empty again once this command exits: an array created on them starts
/// degraded (or not at all) the next time. Refused without --force; `serve --create` is the
/// way to run an array in RAM.
fn check_ram_members(args: &Args) -> anyhow::Result<()> {
    let Some(ram) = args
        .members
        .iter()
        .chain(&args.spare)
        .find(|spec| member::ram_spec(spec))
    else {
        return Ok(());
    };
    let why = format!(
        "member {ram}: a RAM member is empty again when `raidkit create` exits, so the array \
         would start degraded, or not at all, the next time"
    );
    if !args.force {
        anyhow::bail!(
            "{why}; for an array in RAM use `raidkit serve --create --level L mem:SIZE ...`, \
             or give --force to create it anyway"
        );
    }
    eprintln!("raidkit: warning: {why}");
    Ok(())
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
    ondisk::validate_name(&args.name).map_err(anyhow::Error::msg)?;
    let journal = args.journal.options();
    crate::journal_args::warn_volatile(array_journal::check_new(&journal)?);
    check_ram_members(&args)?;
    if args.key.given() && !args.encrypt {
        anyhow::bail!("--key-file and --passphrase-file make an encrypted array: add --encrypt");
    }
    // Asked for before any member is touched.
    let encryption = match args.encrypt {
        true => Some(crate::key_args::new_key_area(&args.key, &args.kdf, &args.name)?.0),
        false => None,
    };
    let opts = OpenOptions {
        create_size: args.size,
        read_only: false,
        ..OpenOptions::default()
    };
    let open = |specs: &[String]| {
        specs
            .iter()
            .map(|spec| member::open(spec, &opts).map_err(anyhow::Error::from))
            .collect::<anyhow::Result<Vec<Arc<dyn Member>>>>()
    };
    let members = open(&args.members)?;
    let defaults = CreateOptions::new(args.level, &args.name);
    let create_opts = CreateOptions {
        chunk_bytes: args.chunk,
        force: args.force,
        spares: open(&args.spare)?,
        assume_clean: args.assume_clean,
        bitmap_region_bytes: args.bitmap.region(defaults.bitmap_region_bytes),
        bad_blocks: defaults.bad_blocks && !args.bitmap.no_bad_blocks,
        used_region_bytes: args.bitmap.used_region(defaults.used_region_bytes),
        encryption,
        checksum: args.checksum,
        ..defaults
    };
    let superblocks =
        crate::space::create_with(&args.members, &args.spare, args.preallocate, || {
            Ok(ondisk::create(&members, &create_opts)?)
        })?;
    if let Some(path) = &journal.path {
        let jsb = array_journal::add(&members, path, &journal)?;
        println!("journal {} ({}) on {path}", jsb.journal_uuid, jsb.mode);
    }
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
    for line in unused_space(&args.members, &superblocks) {
        println!("{line}");
    }
    match &first.bitmap {
        Some(b) => println!(
            "write-intent bitmap: {} regions of {} bytes",
            first.array_size_bytes.div_ceil(b.region_bytes),
            b.region_bytes
        ),
        None => println!("no write-intent bitmap"),
    }
    if let Some(c) = &first.checksum {
        println!(
            "checksums: {} per 4 KiB block, {} bytes per member at byte {}; data offset {}",
            c.alg, c.bytes, c.offset_bytes, first.data_offset_bytes
        );
    }
    match &first.used_map {
        Some(u) => println!(
            "used-regions map: {} regions of {} bytes (rebuilds copy only written regions)",
            u.regions(first.array_size_bytes),
            u.region_bytes
        ),
        None => println!("no used-regions map"),
    }
    if first.resync_offset_bytes.is_none() {
        return Ok(());
    }
    if !args.sync_now {
        println!("initial sync pending: it runs in the background when the array is served");
        return Ok(());
    }
    initial_sync(members, create_opts.spares)
}

/// A note for each member of a striped or mirrored array that holds 1 % or more beyond what
/// the array uses of it (every member holds as much as the smallest), as mdadm warns when the
/// largest member exceeds the size. Linear arrays use every member whole.
pub(crate) fn unused_space(names: &[String], superblocks: &[ondisk::Superblock]) -> Vec<String> {
    let unused = |sb: &ondisk::Superblock| {
        sb.member_bytes
            .saturating_sub(sb.data_offset_bytes + sb.data_bytes)
    };
    let members: Vec<(&String, &ondisk::Superblock)> = names
        .iter()
        .zip(superblocks)
        .filter(|(_, sb)| sb.level != Level::Linear)
        .collect();
    let Some((smallest, _)) = members.iter().min_by_key(|(_, sb)| sb.member_bytes) else {
        return Vec::new();
    };
    members
        .iter()
        .filter(|(_, sb)| unused(sb) > 0 && unused(sb) * 100 >= sb.member_bytes)
        .map(|(name, sb)| {
            format!(
                "note: {name}: {} of its {} unused (every member holds as much as the \
                 smallest, {smallest}); once the smaller members are replaced by larger ones, \
                 `raidkit grow --size max` puts it to use",
                crate::units::human_bytes(unused(sb)),
                crate::units::human_bytes(sb.member_bytes),
            )
        })
        .collect()
}

/// Assembles the new array and runs its initial sync in the foreground, with a progress bar
/// in a terminal, then closes it clean.
fn initial_sync(members: Vec<Arc<dyn Member>>, spares: Vec<Arc<dyn Member>>) -> anyhow::Result<()> {
    let mut all = members;
    all.extend(spares);
    let volume = Arc::new(volume::assemble(all, &volume::AssembleOptions::default())?);
    let syncing = Arc::clone(&volume);
    let worker = std::thread::spawn(move || syncing.resync());
    crate::progress::follow_local(|| volume.status().task, || worker.is_finished());
    worker
        .join()
        .map_err(|_| anyhow::anyhow!("the initial sync thread panicked"))??;
    volume.close()?;
    println!("initial sync finished");
    Ok(())
}
