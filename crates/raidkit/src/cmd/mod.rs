//! One module per subcommand.

pub mod bench;
pub mod create;
pub mod daemon;
pub mod examine;
pub mod grow;
pub mod iostat;
pub mod journal;
pub mod key;
pub mod manage;
pub mod monitor;
pub mod plan;
pub mod reload;
pub mod serve;
pub mod status;

/// Parses a size argument (`64K`, `1M`, `2G`…, powers of 1024) for clap.
pub fn size_arg(text: &str) -> Result<u64, String> {
    member::parse_size(text).map_err(|e| e.to_string())
}
