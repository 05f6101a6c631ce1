//! Times a fuzz target outside the fuzzer: runs every input of a directory through it (in one
//! process, as AFL++'s persistent mode does) for a number of rounds and prints the inputs per
//! second and the slowest inputs. `scripts/fuzz.sh time TARGET DIR [ROUNDS]`.

use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 || args.len() > 4 {
        eprintln!("usage: time-inputs TARGET DIR [ROUNDS]");
        std::process::exit(2);
    }
    let Some((_, target)) = raidkit_fuzz::TARGETS.iter().find(|(n, _)| *n == args[1]) else {
        eprintln!("time-inputs: unknown target {}", args[1]);
        std::process::exit(2);
    };
    let rounds: usize = match args.get(3).map(|r| r.parse()) {
        None => 1,
        Some(Ok(r)) if r > 0 => r,
        Some(_) => {
            eprintln!(
                "time-inputs: ROUNDS must be a positive number, not {}",
                args[3]
            );
            std::process::exit(2);
        }
    };
    let mut inputs = Vec::new();
    let entries = std::fs::read_dir(&args[2]).unwrap_or_else(|e| {
        eprintln!("time-inputs: cannot read {}: {e}", args[2]);
        std::process::exit(1);
    });
    for entry in entries.flatten() {
        if entry.path().is_file() {
            let bytes = std::fs::read(entry.path()).expect("read an input");
            inputs.push((entry.file_name().to_string_lossy().into_owned(), bytes));
        }
    }
    inputs.sort();
    let mut each = vec![Duration::ZERO; inputs.len()];
    let start = Instant::now();
    for _ in 0..rounds {
        for (i, (_, bytes)) in inputs.iter().enumerate() {
            let t = Instant::now();
            target(bytes);
            each[i] += t.elapsed();
        }
    }
    let total = start.elapsed();
    let runs = inputs.len() * rounds;
    println!(
        "{}: {runs} runs of {} inputs in {:.2} s: {:.0} runs/s, {:.1} µs a run",
        args[1],
        inputs.len(),
        total.as_secs_f64(),
        runs as f64 / total.as_secs_f64(),
        total.as_secs_f64() * 1e6 / runs as f64
    );
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(each[i]));
    println!("slowest (µs a run):");
    for &i in order.iter().take(8) {
        println!(
            "  {:>9.1}  {}",
            each[i].as_secs_f64() * 1e6 / rounds as f64,
            inputs[i].0
        );
    }
}
