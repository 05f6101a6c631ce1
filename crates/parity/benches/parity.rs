//! Single-thread throughput of the parity kernels, printed as a Markdown table.
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
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut blocks: Vec<Vec<u8>> = (0..n + 2)
        .map(|_| {
            (0..chunk)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        })
        .collect();
    let (data, parity) = blocks.split_at_mut(n);
    let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let (p, q) = parity.split_at_mut(1);
    parity::scalar::pq_gen(&data, &mut p[0], &mut q[0]);
    blocks
}

/// Best calls-per-second over `ROUNDS` rounds of `budget / ROUNDS` each (at least 3 calls per
/// round): the best round is the one least disturbed by other work on a shared machine.
fn rate(budget: Duration, mut body: impl FnMut()) -> f64 {
    const ROUNDS: u32 = 5;
    body();
    let mut best = 0.0f64;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let mut calls = 0u64;
        while calls < 3 || start.elapsed() < budget / ROUNDS {
            body();
            calls += 1;
        }
        best = best.max(calls as f64 / start.elapsed().as_secs_f64());
    }
    best
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

/// GB/s for one cell; also checks the stripe is still consistent afterwards.
fn measure(op: Op, imp: Imp, n: usize, chunk: usize, budget: Duration) -> f64 {
    let mut blocks = stripe(n, chunk);
    let original = blocks.clone();
    let per_second = match imp {
        #[cfg(feature = "compare-rusty-erasure")]
        Imp::RustyErasure => rusty::rate_of(op, &mut blocks, n, budget),
        _ => rate(budget, || run_kernel(op, imp, black_box(&mut blocks), n)),
    };
    assert!(
        blocks == original,
        "{}: stripe changed by {} n={n} chunk={chunk}",
        imp.name(),
        op_name(op)
    );
    per_second * (n * chunk) as f64 / 1e9
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
    let (chunks_kib, counts): (&[usize], &[usize]) = if smoke {
        (&[64], &[4])
    } else {
        (&[64, 256, 1024], &[4, 8])
    };
    let mut imps = vec![Imp::Scalar];
    imps.extend(Kernel::available().into_iter().map(Imp::Kernel));
    #[cfg(feature = "compare-rusty-erasure")]
    imps.push(Imp::RustyErasure);
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
        for &chunk_kib in chunks_kib {
            for &n in counts {
                let cells: Vec<String> = imps
                    .iter()
                    .map(|&imp| format!("{:.1}", measure(op, imp, n, chunk_kib * 1024, budget)))
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

    use super::{rate, Op};
    use rusty_erasure::{raid, Matrix};
    use std::time::Duration;

    pub fn rate_of(op: Op, blocks: &mut [Vec<u8>], n: usize, budget: Duration) -> f64 {
        let (data, parity) = blocks.split_at_mut(n);
        let (p, q) = parity.split_at_mut(1);
        let (p, q) = (&mut p[0], &mut q[0]);
        match op {
            Op::XorGen => {
                let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
                rate(budget, || {
                    raid::xor_gen(&data, p).expect("rusty_erasure xor_gen")
                })
            }
            Op::PqGen => {
                let data: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
                rate(budget, || {
                    raid::pq_gen(&data, p, q).expect("rusty_erasure pq_gen")
                })
            }
            Op::Recover2 => recover2(data, p, q, n, budget),
        }
    }

    fn recover2(data: &mut [Vec<u8>], p: &[u8], q: &[u8], n: usize, budget: Duration) -> f64 {
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
        let (lost, rest) = data.split_at_mut(2);
        let (d0, d1) = lost.split_at_mut(1);
        let mut shards: Vec<Option<&[u8]>> = vec![None, None];
        shards.extend(rest.iter().map(|d| Some(d.as_slice())));
        shards.push(Some(p));
        shards.push(Some(q));
        let mut out: Vec<&mut [u8]> = vec![&mut d0[0], &mut d1[0]];
        rate(budget, || {
            coder
                .recover_with(&plan, &shards, &mut out)
                .expect("recover_with")
        })
    }
}
