//! `raidkit key add|remove|change`: the key slots of a stopped encrypted array. Each unlocks
//! the array with a key it already has, changes the key area, and rewrites every member's
//! superblock with it (events unchanged, as `journal add` does).

use anyhow::{bail, Context};
use crypt::{KdfParams, KeyArea, KeySource, Secret};

use crate::key_args::{KdfArgs, KeyArgs};

/// Add, remove or change a key of a stopped encrypted array.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

/// The new key of `add` and `change` (neither flag: typed twice on the terminal).
#[derive(Debug, Clone, clap::Args)]
struct NewKeyArgs {
    /// The new key: a key file whose bytes are the key.
    #[arg(long, value_name = "FILE", conflicts_with = "new_passphrase_file")]
    new_key_file: Option<std::path::PathBuf>,
    /// The new key: a file holding the passphrase.
    #[arg(long, value_name = "FILE")]
    new_passphrase_file: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Add a key in a free slot (eight in all); --key-file or --passphrase-file (or the
    /// terminal) is a key the array already opens with.
    Add {
        #[command(flatten)]
        key: KeyArgs,
        #[command(flatten)]
        new: NewKeyArgs,
        #[command(flatten)]
        kdf: KdfArgs,
        /// The array's members (any order).
        #[arg(value_name = "MEMBER", required = true)]
        members: Vec<String>,
    },
    /// Remove the slot the key given opens (or, with --slot, that slot, the key given proving
    /// you may). The last slot is never removed.
    Remove {
        #[command(flatten)]
        key: KeyArgs,
        /// Remove this slot instead of the one the key opens.
        #[arg(long, value_name = "N")]
        slot: Option<usize>,
        #[arg(value_name = "MEMBER", required = true)]
        members: Vec<String>,
    },
    /// Replace the key given by a new one, in the same slot.
    Change {
        #[command(flatten)]
        key: KeyArgs,
        #[command(flatten)]
        new: NewKeyArgs,
        #[command(flatten)]
        kdf: KdfArgs,
        #[arg(value_name = "MEMBER", required = true)]
        members: Vec<String>,
    },
}

impl NewKeyArgs {
    /// The new slot's KDF parameters and its secret for array `name` (read or prompted for).
    fn with(&self, kdf: &KdfArgs, name: &str) -> anyhow::Result<(KdfParams, Secret)> {
        let params = kdf.params()?;
        let secret = (self.source()).read(&format!("New passphrase for {name}"), true)?;
        Ok((params, secret))
    }

    fn source(&self) -> KeySource {
        KeySource::from_args(
            self.new_key_file.as_deref(),
            self.new_passphrase_file.as_deref(),
        )
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.action {
        Action::Add {
            key,
            new,
            kdf,
            members,
        } => edit(
            &members,
            &key,
            "a key is added",
            |name, area, data_key, _slot| {
                let (params, secret) = new.with(&kdf, name)?;
                let slot = area
                    .add(&data_key, &secret, params)
                    .map_err(anyhow::Error::msg)?;
                Ok(format!("key slot {slot} ({params}) added to {name}"))
            },
        ),
        Action::Remove { key, slot, members } => edit(
            &members,
            &key,
            "a key is removed",
            |name, area, _, opened| {
                let slot = slot.unwrap_or(opened);
                area.remove(slot).map_err(anyhow::Error::msg)?;
                Ok(format!("key slot {slot} removed from {name}"))
            },
        ),
        Action::Change {
            key,
            new,
            kdf,
            members,
        } => edit(
            &members,
            &key,
            "a key is changed",
            |name, area, data_key, slot| {
                let (params, secret) = new.with(&kdf, name)?;
                area.replace(slot, &data_key, &secret, params)
                    .map_err(anyhow::Error::msg)?;
                Ok(format!("key slot {slot} of {name} changed ({params})"))
            },
        ),
    }
}

/// Opens the stopped array's members, unlocks its freshest key area with `key`, lets
/// `change` edit the area (given the array's name, the data key and the slot `key` opened),
/// then writes the area to every member of the array and prints what `change` says.
fn edit(
    specs: &[String],
    key: &KeyArgs,
    what: &str,
    change: impl FnOnce(&str, &mut KeyArea, crypt::DataKey, usize) -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    let members = super::journal::open_stopped(specs, what)?;
    let Some(sb) = ondisk::freshest_superblock(&members) else {
        bail!("no member carries a raidkit superblock");
    };
    let name = format!("array \"{}\" ({})", sb.name, sb.array_uuid);
    let Some(mut area) = sb.encryption.clone() else {
        bail!(
            "{name} is not encrypted: it has no keys (raidkit create --encrypt makes one that has)"
        );
    };
    let secret = key
        .source()
        .read(&format!("Passphrase for {name}"), false)
        .with_context(|| format!("cannot read the key of {name}"))?;
    let (data_key, slot) = area
        .unlock(&secret)
        .with_context(|| format!("cannot unlock {name} with {}", key.source()))?;
    let said = change(&name, &mut area, data_key, slot)?;
    let uuid = sb.array_uuid;
    ondisk::rewrite_superblocks(&members, |sb| {
        if sb.array_uuid == uuid {
            sb.set_encryption(Some(area.clone()));
        }
    })
    .with_context(|| format!("writing the key slots of {name}"))?;
    println!("raidkit: {said}");
    Ok(())
}
