//! Sequential 128 KiB reads at queue depth 1 through the read cache, read-ahead off vs on vs
//! adaptive, over a file-backed export that adds a fixed latency to every read (a disk or
//! network member: 150 µs by default) on top of the real `pread` copy.
//!
//! ```text
//! cargo run --release -p cache --example readahead_bench -- [--size-mib 256] [--latency-us 150]
//!     [--rounds 3] [--window-kib 1024] [--read-kib 128]
//! ```
//!
//! Prints MB/s per mode (best of the rounds, modes interleaved so background load hits each
//! alike), the ratio to read-ahead off, and the measured latency of reads below.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cache::{CacheConfig, ReadAhead, ReadCache};
use nbd::Export;

/// A file with an added per-read latency.
struct SlowFile {
    file: Arc<File>,
    size: u64,
    latency: Duration,
    reads: AtomicU64,
    read_nanos: AtomicU64,
}

impl Export for SlowFile {
    fn size(&self) -> u64 {
        self.size
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let start = Instant::now();
        std::thread::sleep(self.latency);
        self.file.read_exact_at(buf, offset)?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        let nanos = start.elapsed().as_nanos() as u64;
        self.read_nanos.fetch_add(nanos, Ordering::Relaxed);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn trim(&self, _: u64, _: u64) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

struct Options {
    size_bytes: u64,
    latency: Duration,
    rounds: usize,
    window_bytes: u64,
    read_bytes: usize,
}

fn parse_options() -> Options {
    let mut options = Options {
        size_bytes: 256 << 20,
        latency: Duration::from_micros(150),
        rounds: 3,
        window_bytes: 1 << 20,
        read_bytes: 128 << 10,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value: u64 = match pair.get(1).map(|v| v.parse()) {
            Some(Ok(v)) => v,
            _ => usage(&format!("{} needs a number", pair[0])),
        };
        match pair[0].as_str() {
            "--size-mib" => options.size_bytes = value << 20,
            "--latency-us" => options.latency = Duration::from_micros(value),
            "--rounds" => options.rounds = value.max(1) as usize,
            "--window-kib" => options.window_bytes = value << 10,
            "--read-kib" => options.read_bytes = (value << 10) as usize,
            "--bench" => {}
            other => usage(&format!("unknown option {other}")),
        }
    }
    options
}

fn usage(problem: &str) -> ! {
    eprintln!("readahead_bench: {problem}");
    eprintln!("options: --size-mib N --latency-us N --rounds N --window-kib N --read-kib N");
    std::process::exit(2)
}

/// A temporary file of `size` bytes of non-zero data (so it is really read and copied).
fn make_file(size: u64) -> io::Result<Arc<File>> {
    let file = tempfile::tempfile()?;
    let chunk: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let mut offset = 0;
    while offset < size {
        let len = chunk.len().min((size - offset) as usize);
        file.write_all_at(&chunk[..len], offset)?;
        offset += len as u64;
    }
    Ok(Arc::new(file))
}

/// One sequential pass at queue depth 1; returns (MB/s, reads below, mean latency below).
fn pass(file: &Arc<File>, options: &Options, mode: Option<ReadAhead>) -> (f64, u64, Duration) {
    let inner = SlowFile {
        file: Arc::clone(file),
        size: options.size_bytes,
        latency: options.latency,
        reads: AtomicU64::new(0),
        read_nanos: AtomicU64::new(0),
    };
    let config = match mode {
        None => CacheConfig::disabled(),
        Some(read_ahead) => CacheConfig {
            read_ahead,
            window_bytes: options.window_bytes,
            ..CacheConfig::default()
        },
    };
    let cache = ReadCache::new(inner, config).unwrap_or_else(|e| usage(&e.to_string()));
    let mut buf = vec![0u8; options.read_bytes];
    let start = Instant::now();
    let mut offset = 0;
    while offset < options.size_bytes {
        let len = buf.len().min((options.size_bytes - offset) as usize);
        cache.read(offset, &mut buf[..len]).expect("read");
        offset += len as u64;
    }
    let elapsed = start.elapsed();
    let inner = cache.into_inner();
    let reads = inner.reads.load(Ordering::Relaxed);
    let mean = Duration::from_nanos(inner.read_nanos.load(Ordering::Relaxed) / reads.max(1));
    let mbps = options.size_bytes as f64 / elapsed.as_secs_f64() / 1e6;
    (mbps, reads, mean)
}

fn main() -> io::Result<()> {
    let options = parse_options();
    let file = make_file(options.size_bytes)?;
    let modes: [(&str, Option<ReadAhead>); 4] = [
        ("no cache", None),
        ("off", Some(ReadAhead::Off)),
        ("on", Some(ReadAhead::On)),
        ("adaptive", Some(ReadAhead::Adaptive)),
    ];
    let mut best = [(0.0f64, 0u64, Duration::ZERO); 4];
    for _ in 0..options.rounds {
        for (i, &(_, mode)) in modes.iter().enumerate() {
            let result = pass(&file, &options, mode);
            if result.0 > best[i].0 {
                best[i] = result;
            }
        }
    }
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "sequential {} KiB reads, QD1, {} MiB, +{} µs per read below, window {} KiB, best of {}",
        options.read_bytes >> 10,
        options.size_bytes >> 20,
        options.latency.as_micros(),
        options.window_bytes >> 10,
        options.rounds
    )?;
    writeln!(
        out,
        "| read-ahead | MB/s | × off | reads below | mean latency below |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|")?;
    let off = best[1].0;
    for (i, &(name, _)) in modes.iter().enumerate() {
        let (mbps, reads, mean) = best[i];
        writeln!(
            out,
            "| {name} | {mbps:.0} | {:.2} | {reads} | {} µs |",
            mbps / off,
            mean.as_micros()
        )?;
    }
    Ok(())
}
