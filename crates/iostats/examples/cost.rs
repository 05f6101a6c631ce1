//! The CPU cost of counting one request: `IoCounters::begin` + `end`, on one thread and on two
//! threads sharing one counter (as request threads do), against one clock read alone. CPU time
//! is the thread's on-CPU time (/proc/thread-self/schedstat), so a loaded machine's waiting is
//! not counted. `cargo run --release -p iostats --example cost`
use iostats::{IoCounters, OpKind};
use std::hint::black_box;
use std::sync::Arc;

/// This thread's on-CPU time, nanoseconds.
fn cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    text.split_whitespace().next().unwrap().parse().unwrap()
}

fn per_op(n: u64, f: impl Fn(u64)) -> f64 {
    let start = cpu_ns();
    for i in 0..n {
        f(i);
    }
    (cpu_ns() - start) as f64 / n as f64
}

fn main() {
    let n = 5_000_000;
    let clock = per_op(n, |_| {
        black_box(std::time::Instant::now());
    });
    let c = IoCounters::new();
    let pair = per_op(n, |i| {
        let s = c.begin();
        black_box(c.end(s, OpKind::Write, 4096 + (i & 7) * 512, true));
    });
    let shared = Arc::new(IoCounters::new());
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let c = Arc::clone(&shared);
            std::thread::spawn(move || {
                per_op(n, |i| {
                    let s = c.begin();
                    black_box(c.end(s, OpKind::Read, 4096 + (i & 7) * 512, true));
                })
            })
        })
        .collect();
    let contended: Vec<f64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    println!("one clock read (Instant::now): {clock:.1} ns CPU");
    println!("one request counted (begin + end), one thread: {pair:.1} ns CPU");
    println!(
        "one request counted, two threads on one counter: {:.1} / {:.1} ns CPU",
        contended[0], contended[1]
    );
}
