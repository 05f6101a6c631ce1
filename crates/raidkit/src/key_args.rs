//! The encryption flags: how a key is given (`serve`, `create`, `key`), and how a new key slot
//! is made (`create --encrypt`, `key add|change`).

use std::path::PathBuf;

use crypt::{KdfParams, KeySource};

/// Where the key comes from (neither flag: typed on the terminal).
#[derive(Debug, Clone, clap::Args)]
pub struct KeyArgs {
    /// Encrypted arrays: the key file whose bytes are the key (1 byte to 1 MiB, e.g. `head -c
    /// 64 /dev/urandom > FILE`). Without it or --passphrase-file the passphrase is asked for on
    /// the terminal.
    #[arg(long, value_name = "FILE", conflicts_with = "passphrase_file")]
    pub key_file: Option<PathBuf>,

    /// Encrypted arrays: a file holding the passphrase (its final newline is not part of it).
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
}

/// How `serve` and `create` say where a key is given, in messages.
pub const HOW: &str =
    "--key-file FILE or --passphrase-file FILE, or run on a terminal to be asked for the passphrase";

impl KeyArgs {
    /// The source these flags name (a prompt when neither is given).
    pub fn source(&self) -> KeySource {
        KeySource::from_args(self.key_file.as_deref(), self.passphrase_file.as_deref())
    }

    /// True when a file was named.
    pub fn given(&self) -> bool {
        self.key_file.is_some() || self.passphrase_file.is_some()
    }
}

/// The cost of a new key slot's Argon2id.
#[derive(Debug, Clone, clap::Args)]
pub struct KdfArgs {
    /// Argon2id memory for the new key slot (K, M, G suffixes; at least 8K, at most 4G): the
    /// more, the costlier each guess of a passphrase.
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = crate::cmd::size_arg)]
    pub kdf_memory: u64,

    /// Argon2id passes over that memory for the new key slot (1 to 64).
    #[arg(long, value_name = "N", default_value_t = KdfParams::DEFAULT.iterations)]
    pub kdf_iterations: u32,
}

impl KdfArgs {
    /// The parameters, checked.
    pub fn params(&self) -> anyhow::Result<KdfParams> {
        let params = KdfParams {
            memory_kib: u32::try_from(self.kdf_memory / 1024).unwrap_or(u32::MAX),
            iterations: self.kdf_iterations,
            parallelism: KdfParams::DEFAULT.parallelism,
        };
        params
            .check()
            .map_err(|e| anyhow::anyhow!("--kdf-memory/--kdf-iterations: {e}"))?;
        Ok(params)
    }
}

/// A new key area for `create --encrypt` (the passphrase typed twice when asked for), and
/// its data key; prints which slot and parameters it made.
pub fn new_key_area(
    key: &KeyArgs,
    kdf: &KdfArgs,
    name: &str,
) -> anyhow::Result<(crypt::KeyArea, crypt::DataKey)> {
    let params = kdf.params()?;
    let secret = key
        .source()
        .read(&format!("New passphrase for array \"{name}\""), true)?;
    let (area, data_key) = crypt::KeyArea::create(&secret, params).map_err(anyhow::Error::msg)?;
    println!(
        "encrypted: {}, {}-byte units; key slot 0 ({params}) opens with {}",
        area.cipher_name(),
        area.unit_bytes(),
        key.source()
    );
    Ok((area, data_key))
}
