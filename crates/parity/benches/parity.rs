//! Single-thread throughput of the parity kernels, printed as a Markdown table.
//!
//! Rates are per CPU-second of the benchmarking thread (so, per core), measured in interleaved
//! best-of-5 rounds; other load on the machine still disturbs caches, so compare columns of one
//! run rather than runs.
//!
//! GB/s counts data bytes: n data blocks x chunk bytes per call (10^9 bytes per GB), for
//! `xor_gen` (n sources -> P), `pq_gen` (n data -> P and Q) and `recover2` (two data blocks
//! lost, rebuilt from the other data, P and Q). Columns: the scalar reference, each kernel this
//! CPU can run, and with `--features compare-rusty-erasure` the rusty_erasure crate.
//!
//! `cargo bench -p parity [--features compare-rusty-erasure]`; RAIDKIT_BENCH_SECS sets the time
//! per cell (default 0.5); a trailing argument filters the ops by name (`-- pq`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use parity::Kernel;

#[derive(Clone, Copy)]
enum Op {
    XorGen,
    PqGen,
    Recover2,
}

#[derive(Clone, Copy)]
enum Imp {
    Scalar,
    Kernel(Kernel),
    #[cfg(feature = "compare-rusty-erasure")]
    RustyErasure,
}

impl Imp {
    fn name(self) -> &'static str {
        match self {
            Imp::Scalar => "scalar ref",
            Imp::Kernel(k) => k.name(),
            #[cfg(feature = "compare-rusty-erasure")]
            Imp::RustyErasure => "rusty_erasure",
        }
    }
}

/// n data blocks, then P, then Q, filled with a fixed pseudo-random pattern.
fn stripe(n: usize, chunk: usize) -> Vec<Vec<u8>> {
    let mut rng = testsupport::Rng::new(0x2545_f491_4f6c_dd1d);
    let mut blocks: Vec<Vec<u8>> = (0..n + 2).map(|_| rng.bytes(chunk)).collect();
    let (data, parity) = blocks.split_at_mut(n);
    let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let (p, q) = parity.split_at_mut(1);
    parity::scalar::pq_gen(&data, &mut p[0], &mut q[0]);
    blocks
}

fn run_kernel(op: Op, imp: Imp, blocks: &mut [Vec<u8>], n: usize) {
    let (data, parity) = blocks.split_at_mut(n);
    let (p, q) = parity.split_at_mut(1);
    let (p, q) = (&mut p[0], &mut q[0]);
    match op {
        Op::XorGen | Op::PqGen => {
            let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
            match (op, imp) {
                (Op::XorGen, Imp::Scalar) => parity::scalar::xor_gen(&data, p),
                (Op::XorGen, Imp::Kernel(k)) => k.xor_gen(&data, p),
                (_, Imp::Scalar) => parity::scalar::pq_gen(&data, p, q),
                (_, Imp::Kernel(k)) => k.pq_gen(&data, p, q),
                #[cfg(feature = "compare-rusty-erasure")]
                _ => unreachable!(),
            }
        }
        Op::Recover2 => {
            let mut refs: Vec<&mut [u8]> = data.iter_mut().map(|d| d.as_mut_slice()).collect();
            refs.push(p);
            refs.push(q);
            match imp {
                Imp::Scalar => parity::scalar::reconstruct(&mut refs, true, &[0, 1]),
                Imp::Kernel(k) => k.reconstruct(&mut refs, true, &[0, 1]),
                #[cfg(feature = "compare-rusty-erasure")]
                Imp::RustyErasure => unreachable!(),
            }
        }
    }
}

/// CPU time consumed by the calling thread, in seconds. Rates are per CPU-second of this thread
/// ("per core"), so time the thread spent descheduled on a shared machine does not count.
fn thread_cpu_seconds() -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the clock id is a constant Linux supports.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

/// A prepared call of one implementation on a stripe it is handed.
type Runner = Box<dyn FnMut(&mut [Vec<u8>])>;

fn runner(op: Op, imp: Imp, n: usize) -> Runner {
    match imp {
        #[cfg(feature = "compare-rusty-erasure")]
        Imp::RustyErasure => rusty::runner(op, n),
        _ => Box::new(move |blocks| run_kernel(op, imp, blocks, n)),
    }
}

/// GB/s of every implementation for one cell. Measured in interleaved rounds (each round runs
/// every implementation for `budget / ROUNDS`, at least 3 calls) so background load on a shared
/// machine hits all columns alike; each column keeps its best round. Afterwards every stripe
/// must be unchanged, which checks that each implementation rewrote P, Q or the recovered
/// blocks byte-identically to the scalar reference.
fn measure_cell(op: Op, imps: &[Imp], n: usize, chunk: usize, budget: Duration) -> Vec<f64> {
    const ROUNDS: u32 = 5;
    let original = stripe(n, chunk);
    let mut states: Vec<(Runner, Vec<Vec<u8>>)> = imps
        .iter()
        .map(|&imp| (runner(op, imp, n), original.clone()))
        .collect();
    let mut best = vec![0.0f64; imps.len()];
    for (run, blocks) in states.iter_mut() {
        run(blocks);
    }
    for _ in 0..ROUNDS {
        for ((run, blocks), best) in states.iter_mut().zip(best.iter_mut()) {
            let (start, cpu_start) = (Instant::now(), thread_cpu_seconds());
            let mut calls = 0u64;
            while calls < 3 || start.elapsed() < budget / ROUNDS {
                run(black_box(blocks));
                calls += 1;
            }
            let cpu_seconds = thread_cpu_seconds() - cpu_start;
            *best = best.max(calls as f64 / cpu_seconds);
        }
    }
    for (imp, (_, blocks)) in imps.iter().zip(&states) {
        let what = op_name(op);
        assert!(
            blocks == &original,
            "{}: {what} n={n} chunk={chunk} differs",
            imp.name()
        );
    }
    best.iter()
        .map(|calls_per_s| calls_per_s * (n * chunk) as f64 / 1e9)
        .collect()
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::XorGen => "xor_gen",
        Op::PqGen => "pq_gen",
        Op::Recover2 => "recover2",
    }
}

fn main() {
    let secs: f64 = std::env::var("RAIDKIT_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.5);
    // `cargo bench` passes --bench; without it (`cargo test --benches`) only a quick smoke run.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let budget = Duration::from_secs_f64(if smoke { 0.001 } else { secs });
    let (mut chunks_kib, counts): (Vec<usize>, &[usize]) = if smoke {
        (vec![64], &[4])
    } else {
        (vec![4, 64, 256, 1024], &[4, 8])
    };
    // RAIDKIT_BENCH_CHUNKS_KIB=4,64 measures only those chunk sizes.
    if let Ok(list) = std::env::var("RAIDKIT_BENCH_CHUNKS_KIB") {
        chunks_kib = list
            .split(',')
            .filter_map(|kib| kib.trim().parse().ok())
            .collect();
    }
    let mut imps = vec![Imp::Scalar];
    imps.extend(Kernel::available().into_iter().map(Imp::Kernel));
    #[cfg(feature = "compare-rusty-erasure")]
    imps.push(Imp::RustyErasure);
    // RAIDKIT_BENCH_IMPLS=avx512gfni,rusty_erasure keeps only the named columns.
    if let Ok(keep) = std::env::var("RAIDKIT_BENCH_IMPLS") {
        imps.retain(|imp| keep.split(',').any(|name| name == imp.name()));
    }
    println!("dispatch picks: {}\n", Kernel::best().name());
    let names: Vec<&str> = imps.iter().map(|i| i.name()).collect();
    println!("| op | chunk | data blocks | {} |", names.join(" | "));
    println!("|---|---|---|{}", "---:|".repeat(imps.len()));
    // `cargo bench -p parity -- pq` runs only the ops whose name contains "pq".
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    for op in [Op::XorGen, Op::PqGen, Op::Recover2] {
        if filter
            .as_ref()
            .is_some_and(|f| !op_name(op).contains(f.as_str()))
        {
            continue;
        }
        for &chunk_kib in &chunks_kib {
            for &n in counts {
                let cells: Vec<String> = measure_cell(op, &imps, n, chunk_kib * 1024, budget)
                    .iter()
                    .map(|gbps| format!("{gbps:.1}"))
                    .collect();
                println!(
                    "| {} | {chunk_kib} KiB | {n} | {} |",
                    op_name(op),
                    cells.join(" | ")
                );
            }
        }
    }
}

#[cfg(feature = "compare-rusty-erasure")]
mod rusty {
    //! The same work through rusty_erasure 0.4.3: `raid::xor_gen`, `raid::pq_gen`, and for
    //! recovery its Reed-Solomon decoder over the P+Q matrix [I; 1..1; g^0..g^(n-1)], with the
    //! decode plan built once outside the timed loop (the favourable case for it).

    use super::{Op, Runner};
    use rusty_erasure::{raid, Matrix};

    pub fn runner(op: Op, n: usize) -> Runner {
        match op {
            Op::XorGen => Box::new(move |blocks: &mut [Vec<u8>]| {
                let (data, parity) = blocks.split_at_mut(n);
                let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
                raid::xor_gen(&data, &mut parity[0]).expect("rusty_erasure xor_gen");
            }),
            Op::PqGen => Box::new(move |blocks: &mut [Vec<u8>]| {
                let (data, parity) = blocks.split_at_mut(n);
                let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
                let (p, q) = parity.split_at_mut(1);
                raid::pq_gen(&data, &mut p[0], &mut q[0]).expect("rusty_erasure pq_gen");
            }),
            Op::Recover2 => recover2(n),
        }
    }

    fn recover2(n: usize) -> Runner {
        let mut bytes = vec![0u8; (n + 2) * n];
        for i in 0..n {
            bytes[i * n + i] = 1;
            bytes[n * n + i] = 1;
            bytes[(n + 1) * n + i] = parity::gf_pow2(i);
        }
        let matrix = Matrix::from_bytes(n + 2, n, bytes).expect("P+Q matrix");
        let coder = rusty_erasure::coder(matrix).expect("coder");
        let mut present = vec![true; n + 2];
        present[0] = false;
        present[1] = false;
        let plan = coder.decode_plan(&present, &[0, 1]).expect("decode plan");
        Box::new(move |blocks: &mut [Vec<u8>]| {
            let (lost, rest) = blocks.split_at_mut(2);
            let (d0, d1) = lost.split_at_mut(1);
            let mut shards: Vec<Option<&[u8]>> = vec![None, None];
            shards.extend(rest.iter().map(|d| Some(d.as_slice())));
            let mut out: Vec<&mut [u8]> = vec![&mut d0[0], &mut d1[0]];
            coder
                .recover_with(&plan, &shards, &mut out)
                .expect("recover_with");
        })
    }
}
