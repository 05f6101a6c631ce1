//! Member I/O submission, measured (issue 17): a batch of one operation per member (N = 1, 4,
//! 8 members) through (a) today's path, `FileMember`'s positional calls made as the engine's
//! `io::Runner::run` makes them (inline one after the other; on scoped threads when at least two
//! members move ≥ 1 MiB), and (b) io_uring: the batch's operations pushed to a ring and one
//! `io_uring_enter` submitting them and waiting for all. Patterns: 4 KiB random reads and
//! writes, 1 MiB sequential reads and writes; members: buffered files (in the page cache),
//! `O_DIRECT` files, and windows of one loop device with `--direct-io=on` (made by the bench,
//! root needed; skipped with a message otherwise). T submitting threads (1 and 4) stand for
//! requests in flight. Every configuration runs a and b interleaved (a, b, a, b) so load hits
//! both alike. Prints ops/s, CPU per op (the process's user + system time, io_uring's kernel
//! workers included, the loop device's kernel threads not) and the ratio b/a.
//!
//! Run (as root for the loop device): `cargo run --release -p member --example uring_bench`
//! `-- [--dir DIR] [--secs S] [--rounds R]`; `--only KIND/PATTERN/N/T/PATH --batches K` runs
//! one configuration for K batches (for `strace -c -f`).

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};
use member::{AlignedBuf, FileMember, Member, MemberCache, OpenOptions, SimRng, Window};

const MEMBER_BYTES: u64 = 128 << 20;
const MAX_MEMBERS: usize = 8;
const FANOUT_MIN_BYTES: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Buffered,
    DirectFile,
    Loop,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Pattern {
    RandRead4k,
    RandWrite4k,
    SeqRead1m,
    SeqWrite1m,
}

impl Pattern {
    fn size(self) -> usize {
        match self {
            Pattern::RandRead4k | Pattern::RandWrite4k => 4096,
            _ => 1 << 20,
        }
    }
    fn write(self) -> bool {
        matches!(self, Pattern::RandWrite4k | Pattern::SeqWrite1m)
    }
    fn random(self) -> bool {
        self.size() == 4096
    }
    fn name(self) -> &'static str {
        match self {
            Pattern::RandRead4k => "4k-randread",
            Pattern::RandWrite4k => "4k-randwrite",
            Pattern::SeqRead1m => "1m-seqread",
            Pattern::SeqWrite1m => "1m-seqwrite",
        }
    }
}

/// One member as both paths see it: the `FileMember` (or its window) for today's path, a raw
/// descriptor with the same flags and the window's base offset for io_uring.
struct Target {
    member: Arc<dyn Member>,
    raw: Arc<File>,
    base: u64,
}

struct Setup {
    kind: Kind,
    targets: Vec<Target>,
}

fn open_raw(path: &Path, direct: bool) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(if direct { libc::O_DIRECT } else { 0 })
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

fn fill(path: &Path, bytes: u64) {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .expect("create member file");
    if f.metadata().unwrap().len() == bytes {
        return;
    }
    let mut rng = SimRng::new(bytes);
    let mut chunk = vec![0u8; 1 << 20];
    for i in 0..bytes >> 20 {
        for b in chunk.chunks_mut(8) {
            b.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        f.write_all_at(&chunk, i << 20).expect("fill member file");
    }
    f.sync_all().unwrap();
}

fn files(dir: &Path, kind: Kind) -> Setup {
    let cache = if kind == Kind::Buffered {
        MemberCache::Buffered
    } else {
        MemberCache::Direct
    };
    let opts = OpenOptions {
        exclusive: false,
        ..OpenOptions::default()
    };
    let targets = (0..MAX_MEMBERS)
        .map(|i| {
            let path = dir.join(format!("m{i}.img"));
            fill(&path, MEMBER_BYTES);
            let name = path.display().to_string();
            let member = FileMember::open_cached(&path, &name, &opts, cache).expect("open member");
            assert_eq!(member.is_direct(), kind != Kind::Buffered);
            Target {
                member: Arc::new(member),
                raw: Arc::new(open_raw(&path, kind != Kind::Buffered)),
                base: 0,
            }
        })
        .collect();
    Setup { kind, targets }
}

/// The loop device (direct-io on) over `dir/loop.img`, as 8 windows of `MEMBER_BYTES`.
fn loop_device(dir: &Path) -> Option<(Setup, String)> {
    let backing = dir.join("loop.img");
    fill(&backing, MEMBER_BYTES * MAX_MEMBERS as u64);
    let out = Command::new("losetup")
        .args(["--find", "--show", "--direct-io=on"])
        .arg(&backing)
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "no loop device (losetup: {}): loop-device rows skipped",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return None;
    }
    let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let opts = OpenOptions {
        exclusive: false,
        ..OpenOptions::default()
    };
    let whole: Arc<dyn Member> = Arc::new(
        FileMember::open_cached(Path::new(&dev), &dev, &opts, MemberCache::Direct)
            .expect("open loop device"),
    );
    let raw = Arc::new(open_raw(Path::new(&dev), true));
    let targets = (0..MAX_MEMBERS)
        .map(|i| {
            let base = i as u64 * MEMBER_BYTES;
            Target {
                member: Arc::new(Window::new(whole.clone(), base, MEMBER_BYTES)),
                raw: raw.clone(),
                base,
            }
        })
        .collect();
    Some((
        Setup {
            kind: Kind::Loop,
            targets,
        },
        dev,
    ))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path_ {
    Threads,
    Uring,
}

/// Where each batch's operations go: per member, the offset of the next operation.
struct Offsets {
    rng: SimRng,
    next: Vec<u64>,
}

impl Offsets {
    fn new(seed: u64, members: usize) -> Offsets {
        Offsets {
            rng: SimRng::new(seed),
            next: vec![0; members],
        }
    }
    fn take(&mut self, pattern: Pattern, member: usize) -> u64 {
        let size = pattern.size() as u64;
        let blocks = MEMBER_BYTES / size;
        if pattern.random() {
            return self.rng.below(blocks) * size;
        }
        let at = self.next[member];
        self.next[member] = (at + size) % (blocks * size);
        at
    }
}

/// Today's path: as `Runner::run` runs a batch of one operation per member.
fn batch_threads(targets: &[Target], pattern: Pattern, bufs: &mut [AlignedBuf], offs: &[u64]) {
    let one = |t: &Target, buf: &mut AlignedBuf, off: u64| {
        if pattern.write() {
            t.member.write_at(buf, off).expect("write");
        } else {
            t.member.read_at(buf, off).expect("read");
        }
    };
    if targets.len() >= 2 && pattern.size() >= FANOUT_MIN_BYTES {
        std::thread::scope(|s| {
            for ((t, buf), &off) in targets.iter().zip(bufs.iter_mut()).zip(offs) {
                s.spawn(move || one(t, buf, off));
            }
        });
    } else {
        for ((t, buf), &off) in targets.iter().zip(bufs.iter_mut()).zip(offs) {
            one(t, buf, off);
        }
    }
}

/// io_uring: every operation of the batch pushed, one submit-and-wait for all.
fn batch_uring(
    ring: &mut IoUring,
    targets: &[Target],
    pattern: Pattern,
    bufs: &mut [AlignedBuf],
    offs: &[u64],
) {
    let len = pattern.size() as u32;
    for (i, ((t, buf), &off)) in targets.iter().zip(bufs.iter_mut()).zip(offs).enumerate() {
        let fd = types::Fd(t.raw.as_raw_fd());
        let at = t.base + off;
        let entry = if pattern.write() {
            opcode::Write::new(fd, buf.as_ptr(), len).offset(at).build()
        } else {
            opcode::Read::new(fd, buf.as_mut_ptr(), len)
                .offset(at)
                .build()
        }
        .user_data(i as u64);
        // SAFETY: the descriptor and the buffer live until the completions are reaped below.
        unsafe { ring.submission().push(&entry).expect("ring has room") };
    }
    ring.submit_and_wait(targets.len()).expect("io_uring_enter");
    let mut done = 0;
    while done < targets.len() {
        for cqe in ring.completion() {
            assert_eq!(cqe.result(), len as i32, "short or failed uring op");
            done += 1;
        }
        if done < targets.len() {
            ring.submit_and_wait(targets.len() - done)
                .expect("io_uring_enter");
        }
    }
}

fn cpu_secs() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

struct Figure {
    ops: u64,
    secs: f64,
    cpu: f64,
}

/// `threads` threads each running batches over the first `members` targets until `limit`
/// (a time, or a number of batches per thread).
fn measure(
    setup: &Setup,
    pattern: Pattern,
    members: usize,
    threads: usize,
    path: Path_,
    limit: Limit,
) -> Figure {
    let targets = &setup.targets[..members];
    let cpu0 = cpu_secs();
    let start = Instant::now();
    let ops: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut bufs: Vec<AlignedBuf> = (0..members)
                        .map(|_| AlignedBuf::zeroed(pattern.size(), 4096))
                        .collect();
                    let mut ring = IoUring::new(64).expect("io_uring_setup");
                    // Sequential streams: each thread its own region of each member.
                    let mut offsets = Offsets::new(0x5eed + t as u64, members);
                    for n in offsets.next.iter_mut() {
                        *n = (MEMBER_BYTES / threads as u64) * t as u64 / pattern.size() as u64
                            * pattern.size() as u64;
                    }
                    let mut offs = vec![0u64; members];
                    let mut batches = 0u64;
                    let begun = Instant::now();
                    loop {
                        match limit {
                            Limit::Time(d) if begun.elapsed() >= d => break,
                            Limit::Batches(k) if batches >= k => break,
                            _ => {}
                        }
                        for (m, o) in offs.iter_mut().enumerate() {
                            *o = offsets.take(pattern, m);
                        }
                        match path {
                            Path_::Threads => batch_threads(targets, pattern, &mut bufs, &offs),
                            Path_::Uring => {
                                batch_uring(&mut ring, targets, pattern, &mut bufs, &offs)
                            }
                        }
                        batches += 1;
                    }
                    batches * members as u64
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    Figure {
        ops,
        secs: start.elapsed().as_secs_f64(),
        cpu: cpu_secs() - cpu0,
    }
}

#[derive(Clone, Copy)]
enum Limit {
    Time(Duration),
    Batches(u64),
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Buffered => "buffered-file",
        Kind::DirectFile => "direct-file",
        Kind::Loop => "loop-direct",
    }
}

const PATTERNS: [Pattern; 4] = [
    Pattern::RandRead4k,
    Pattern::RandWrite4k,
    Pattern::SeqRead1m,
    Pattern::SeqWrite1m,
];

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir = PathBuf::from("/var/tmp/uring_bench");
    let mut secs = 0.5f64;
    let mut rounds = 2usize;
    let mut only: Option<String> = None;
    let mut batches = 10_000u64;
    while let Some(a) = args.next() {
        let mut v = || args.next().expect("a value after the flag");
        match a.as_str() {
            "--dir" => dir = PathBuf::from(v()),
            "--secs" => secs = v().parse().expect("--secs S"),
            "--rounds" => rounds = v().parse().expect("--rounds R"),
            "--only" => only = Some(v()),
            "--batches" => batches = v().parse().expect("--batches K"),
            other => panic!("unknown argument {other}"),
        }
    }
    std::fs::create_dir_all(&dir).expect("bench dir");
    let mut setups = vec![files(&dir, Kind::Buffered), files(&dir, Kind::DirectFile)];
    let mut loop_dev = None;
    if let Some((setup, dev)) = loop_device(&dir) {
        setups.push(setup);
        loop_dev = Some(dev);
    }
    // Page-cache members: warm every byte in (a cold first read would favour the later path).
    for t in &setups[0].targets {
        let mut buf = vec![0u8; 1 << 20];
        for i in 0..MEMBER_BYTES >> 20 {
            t.member.read_at(&mut buf, i << 20).unwrap();
        }
    }
    if let Some(spec) = only {
        let parts: Vec<&str> = spec.split('/').collect();
        let setup = setups
            .iter()
            .find(|s| kind_name(s.kind) == parts[0])
            .expect("KIND: buffered-file, direct-file or loop-direct");
        let pattern = *PATTERNS
            .iter()
            .find(|p| p.name() == parts[1])
            .expect("PATTERN");
        let n: usize = parts[2].parse().unwrap();
        let t: usize = parts[3].parse().unwrap();
        let path = if parts[4] == "uring" {
            Path_::Uring
        } else {
            Path_::Threads
        };
        let f = measure(setup, pattern, n, t, path, Limit::Batches(batches));
        println!(
            "{spec}: {} ops in {:.2} s, {:.1} µs CPU/op",
            f.ops,
            f.secs,
            f.cpu / f.ops as f64 * 1e6
        );
    } else {
        let mut load = String::new();
        if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
            load = l.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
        }
        println!(
            "load average at start: {load}; {rounds} rounds of {secs} s per path, interleaved"
        );
        println!(
            "| members | pattern | N | T | threads ops/s | uring ops/s | ratio | threads CPU µs/op | uring CPU µs/op | CPU ratio |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for setup in &setups {
            for pattern in PATTERNS {
                for n in [1usize, 4, 8] {
                    for t in [1usize, 4] {
                        let mut acc = [(0u64, 0f64, 0f64); 2];
                        for _ in 0..rounds {
                            for (i, path) in [Path_::Threads, Path_::Uring].into_iter().enumerate()
                            {
                                let f = measure(
                                    setup,
                                    pattern,
                                    n,
                                    t,
                                    path,
                                    Limit::Time(Duration::from_secs_f64(secs)),
                                );
                                acc[i].0 += f.ops;
                                acc[i].1 += f.secs;
                                acc[i].2 += f.cpu;
                            }
                        }
                        let rate = |a: (u64, f64, f64)| a.0 as f64 / a.1;
                        let cpu = |a: (u64, f64, f64)| a.2 / a.0 as f64 * 1e6;
                        println!(
                            "| {} | {} | {n} | {t} | {:.0} | {:.0} | {:.2}× | {:.1} | {:.1} | {:.2}× |",
                            kind_name(setup.kind),
                            pattern.name(),
                            rate(acc[0]),
                            rate(acc[1]),
                            rate(acc[1]) / rate(acc[0]),
                            cpu(acc[0]),
                            cpu(acc[1]),
                            cpu(acc[1]) / cpu(acc[0]),
                        );
                    }
                }
            }
        }
        if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
            println!(
                "load average at end: {}",
                l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
            );
        }
    }
    drop(setups);
    if let Some(dev) = loop_dev {
        let _ = Command::new("losetup").args(["-d", &dev]).status();
    }
}
