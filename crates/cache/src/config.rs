//! [`CacheConfig`] and [`ReadAhead`]: what the user chooses, validated before anything is built.

use std::fmt;
use std::str::FromStr;

/// Default cache memory: 64 MiB, modest next to the page cache of a file server.
pub const SIZE_BYTES_DEFAULT: u64 = 64 << 20;
/// Largest cache accepted (64 GiB); slot indices stay far below `u32::MAX`.
pub const SIZE_BYTES_MAX: u64 = 64 << 30;
/// Default cache block (the unit of caching and eviction): 64 KiB.
pub const BLOCK_BYTES_DEFAULT: u64 = 64 << 10;
/// Smallest block: one 4 KiB page.
pub const BLOCK_BYTES_MIN: u64 = 4 << 10;
/// Largest block: 4 MiB.
pub const BLOCK_BYTES_MAX: u64 = 4 << 20;
/// Default read-ahead window: 1 MiB kept ahead of each sequential stream.
pub const WINDOW_BYTES_DEFAULT: u64 = 1 << 20;
/// Largest read-ahead window: 32 MiB (the NBD request limit).
pub const WINDOW_BYTES_MAX: u64 = 32 << 20;
/// Default number of read-ahead worker threads.
pub const PREFETCH_WORKERS_DEFAULT: usize = 4;
/// Largest number of read-ahead worker threads.
pub const PREFETCH_WORKERS_MAX: usize = 16;
/// Default read-ahead queue length (jobs waiting for a worker); full means dropped.
pub const PREFETCH_QUEUE_DEFAULT: usize = 16;
/// Largest read-ahead queue length.
pub const PREFETCH_QUEUE_MAX: usize = 1024;
/// Default number of sequential-stream detectors (one stream each, shared by all connections).
pub const STREAMS_DEFAULT: usize = 16;
/// Largest number of stream detectors.
pub const STREAMS_MAX: usize = 256;

/// When the cache reads ahead of the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadAhead {
    /// Never: only blocks a client read are cached.
    Off,
    /// After every read, the window that follows it is fetched.
    On,
    /// Only for streams seen reading sequentially (two consecutive reads); stops when the
    /// access turns random, like hardware controllers' adaptive read-ahead.
    #[default]
    Adaptive,
}

impl fmt::Display for ReadAhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReadAhead::Off => "off",
            ReadAhead::On => "on",
            ReadAhead::Adaptive => "adaptive",
        })
    }
}

impl FromStr for ReadAhead {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "off" => Ok(ReadAhead::Off),
            "on" => Ok(ReadAhead::On),
            "adaptive" => Ok(ReadAhead::Adaptive),
            _ => Err(ConfigError::ReadAheadMode {
                text: text.to_string(),
            }),
        }
    }
}

/// How the read cache is sized and when it reads ahead. `size_bytes == 0` makes the cache a
/// plain pass-through (no memory, no threads).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CacheConfig {
    /// Memory for cached blocks; rounded down to whole blocks. 0 disables the cache.
    pub size_bytes: u64,
    /// Cache block: a power of two from 4 KiB to 4 MiB; blocks are aligned to it.
    pub block_bytes: u64,
    /// Read-ahead mode.
    pub read_ahead: ReadAhead,
    /// Bytes kept prefetched ahead of a sequential stream: a multiple of `block_bytes`, at
    /// most [`WINDOW_BYTES_MAX`] and at most half the cache.
    pub window_bytes: u64,
    /// Read-ahead worker threads (1 to [`PREFETCH_WORKERS_MAX`]).
    pub prefetch_workers: usize,
    /// Read-ahead jobs that may wait for a worker (1 to [`PREFETCH_QUEUE_MAX`]).
    pub prefetch_queue: usize,
    /// Sequential-stream detectors (1 to [`STREAMS_MAX`]).
    pub streams: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            size_bytes: SIZE_BYTES_DEFAULT,
            block_bytes: BLOCK_BYTES_DEFAULT,
            read_ahead: ReadAhead::default(),
            window_bytes: WINDOW_BYTES_DEFAULT,
            prefetch_workers: PREFETCH_WORKERS_DEFAULT,
            prefetch_queue: PREFETCH_QUEUE_DEFAULT,
            streams: STREAMS_DEFAULT,
        }
    }
}

impl CacheConfig {
    /// A configuration that caches nothing and forwards every call.
    pub fn disabled() -> Self {
        CacheConfig {
            size_bytes: 0,
            ..CacheConfig::default()
        }
    }

    /// The cache an operator asks for with a size, a read-ahead mode and, optionally, a
    /// read-ahead window (default: the default window, or half a smaller cache), checked.
    pub fn sized(
        size_bytes: u64,
        read_ahead: ReadAhead,
        window_bytes: Option<u64>,
    ) -> Result<Self, ConfigError> {
        let defaults = CacheConfig::default();
        let block = defaults.block_bytes;
        let half_cache = size_bytes / block / 2 * block;
        let config = CacheConfig {
            size_bytes,
            read_ahead,
            window_bytes: window_bytes.unwrap_or_else(|| defaults.window_bytes.min(half_cache)),
            ..defaults
        };
        config.validate()?;
        Ok(config)
    }

    /// True when the cache holds memory (`size_bytes > 0`).
    pub fn enabled(&self) -> bool {
        self.size_bytes > 0
    }

    /// Cache capacity in whole blocks.
    pub fn capacity_blocks(&self) -> u64 {
        self.size_bytes / self.block_bytes
    }

    /// Checks every field; the error names the field and the reason.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        let block = self.block_bytes;
        if !block.is_power_of_two() || !(BLOCK_BYTES_MIN..=BLOCK_BYTES_MAX).contains(&block) {
            return Err(ConfigError::BlockBytes { bytes: block });
        }
        if self.size_bytes < block || self.size_bytes > SIZE_BYTES_MAX {
            return Err(ConfigError::SizeBytes {
                bytes: self.size_bytes,
                block_bytes: block,
            });
        }
        self.validate_read_ahead()?;
        check_count(
            "prefetch_workers",
            self.prefetch_workers,
            PREFETCH_WORKERS_MAX,
        )?;
        check_count("prefetch_queue", self.prefetch_queue, PREFETCH_QUEUE_MAX)?;
        check_count("streams", self.streams, STREAMS_MAX)
    }

    fn validate_read_ahead(&self) -> Result<(), ConfigError> {
        if self.read_ahead == ReadAhead::Off {
            return Ok(());
        }
        let window = self.window_bytes;
        let half_cache = self.capacity_blocks() / 2 * self.block_bytes;
        let ok = window >= self.block_bytes
            && window.is_multiple_of(self.block_bytes)
            && window <= WINDOW_BYTES_MAX
            && window <= half_cache;
        if ok {
            Ok(())
        } else {
            Err(ConfigError::WindowBytes {
                bytes: window,
                block_bytes: self.block_bytes,
                max_bytes: WINDOW_BYTES_MAX.min(half_cache),
            })
        }
    }
}

fn check_count(field: &'static str, value: usize, max: usize) -> Result<(), ConfigError> {
    if (1..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::Count { field, value, max })
    }
}

/// A configuration the cache refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The read-ahead mode is not `off`, `on` or `adaptive`.
    ReadAheadMode { text: String },
    /// The block size is not a power of two from 4 KiB to 4 MiB.
    BlockBytes { bytes: u64 },
    /// The cache is smaller than one block or larger than [`SIZE_BYTES_MAX`].
    SizeBytes { bytes: u64, block_bytes: u64 },
    /// The window is not a whole number of blocks within its maximum.
    WindowBytes {
        bytes: u64,
        block_bytes: u64,
        max_bytes: u64,
    },
    /// A count is outside `1..=max`.
    Count {
        field: &'static str,
        value: usize,
        max: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ReadAheadMode { text } => {
                write!(f, "read-ahead mode {text:?}: expected off, on or adaptive")
            }
            ConfigError::BlockBytes { bytes } => write!(
                f,
                "cache block size {bytes} bytes: must be a power of two from \
                 {BLOCK_BYTES_MIN} to {BLOCK_BYTES_MAX} bytes"
            ),
            ConfigError::SizeBytes { bytes, block_bytes } => write!(
                f,
                "cache size {bytes} bytes: must be 0 (no cache) or from one block \
                 ({block_bytes} bytes) to {SIZE_BYTES_MAX} bytes"
            ),
            ConfigError::WindowBytes {
                bytes,
                block_bytes,
                max_bytes,
            } => write!(
                f,
                "read-ahead window {bytes} bytes: must be a multiple of the cache block \
                 ({block_bytes} bytes) from one block to {max_bytes} bytes (at most 32 MiB \
                 and half the cache)"
            ),
            ConfigError::Count { field, value, max } => {
                write!(f, "cache {field} = {value}: must be from 1 to {max}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_modes_parse() {
        assert_eq!(CacheConfig::default().validate(), Ok(()));
        assert_eq!(CacheConfig::disabled().validate(), Ok(()));
        for mode in [ReadAhead::Off, ReadAhead::On, ReadAhead::Adaptive] {
            assert_eq!(mode.to_string().parse::<ReadAhead>(), Ok(mode));
        }
        assert_eq!("ADAPTIVE".parse::<ReadAhead>(), Ok(ReadAhead::Adaptive));
        let err = "sometimes".parse::<ReadAhead>().unwrap_err();
        assert!(err.to_string().contains("\"sometimes\""), "{err}");
    }

    #[test]
    fn bad_fields_are_named() {
        let base = CacheConfig::default();
        let cases = [
            (
                CacheConfig {
                    block_bytes: 3000,
                    ..base.clone()
                },
                "block size",
            ),
            (
                CacheConfig {
                    size_bytes: 1000,
                    ..base.clone()
                },
                "cache size",
            ),
            (
                CacheConfig {
                    window_bytes: 1000,
                    ..base.clone()
                },
                "window",
            ),
            (
                CacheConfig {
                    window_bytes: 64 << 20,
                    ..base.clone()
                },
                "window",
            ),
            (
                CacheConfig {
                    streams: 0,
                    ..base.clone()
                },
                "streams",
            ),
            (
                CacheConfig {
                    prefetch_workers: 99,
                    ..base.clone()
                },
                "prefetch_workers",
            ),
            (
                CacheConfig {
                    prefetch_queue: 0,
                    ..base.clone()
                },
                "prefetch_queue",
            ),
        ];
        for (config, word) in cases {
            let err = config.validate().unwrap_err();
            assert!(err.to_string().contains(word), "{err} should name {word}");
        }
        let small = CacheConfig {
            size_bytes: 1 << 20,
            ..base
        };
        assert!(
            small.validate().is_err(),
            "window 1 MiB > half of a 1 MiB cache"
        );
        let off = CacheConfig {
            read_ahead: ReadAhead::Off,
            ..small
        };
        assert_eq!(off.validate(), Ok(()));
    }
}
