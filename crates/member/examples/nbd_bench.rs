//! Throughput of `NbdMember` against `nbdkit memory` on a Unix socket: sequential 1 MiB reads
//! and writes from one thread, and 4 KiB random reads from 1 and 16 threads sharing one
//! connection, verifying what it reads. Run: `cargo run --release -p member --example nbd_bench`,
//! or give a URI of any server with at least 512 MiB to measure that one instead
//! (`... --example nbd_bench -- nbd+unix:///?socket=PATH`).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use member::{Member, NbdMember, OpenOptions, RemoteOptions, SimRng};

const SIZE_BYTES: u64 = 512 << 20;

fn main() {
    if let Some(uri) = std::env::args().nth(1) {
        run(&uri);
        return;
    }
    let dir = std::env::temp_dir().join(format!("nbd_bench.{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let sock = dir.join("s");
    let pid = dir.join("pid");
    let mut server = Command::new("nbdkit")
        .args(["-f", "--exit-with-parent", "-P"])
        .arg(&pid)
        .arg("-U")
        .arg(&sock)
        .args(["memory", &SIZE_BYTES.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("nbdkit");
    while !pid.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    run(&format!("nbd+unix:///?socket={}", sock.display()));
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

fn run(uri: &str) {
    let m = Arc::new(
        NbdMember::open(uri, &OpenOptions::default(), &RemoteOptions::default()).expect("open"),
    );
    assert!(
        m.len() >= SIZE_BYTES,
        "the export needs at least {SIZE_BYTES} bytes"
    );
    println!("{}", m.description());
    sequential(&m);
    for threads in [1, 16] {
        random_reads(&m, threads);
    }
}

fn sequential(m: &NbdMember) {
    let mut buf = vec![0u8; 1 << 20];
    let start = Instant::now();
    for i in 0..(SIZE_BYTES >> 20) {
        buf.fill(i as u8);
        m.write_at(&buf, i << 20).expect("write");
    }
    let mib_s = (SIZE_BYTES >> 20) as f64 / start.elapsed().as_secs_f64();
    println!("sequential 1 MiB writes, 1 thread: {mib_s:.0} MiB/s");
    let start = Instant::now();
    for i in 0..(SIZE_BYTES >> 20) {
        m.read_at(&mut buf, i << 20).expect("read");
        assert!(
            buf.iter().all(|&b| b == i as u8),
            "MiB {i} reads back wrong"
        );
    }
    let mib_s = (SIZE_BYTES >> 20) as f64 / start.elapsed().as_secs_f64();
    println!("sequential 1 MiB reads, 1 thread: {mib_s:.0} MiB/s");
}

fn random_reads(m: &Arc<NbdMember>, threads: u64) {
    let per_thread = 40_000 / threads;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let m = Arc::clone(m);
            std::thread::spawn(move || {
                let mut rng = SimRng::new(t);
                let mut buf = [0u8; 4096];
                for _ in 0..per_thread {
                    let at = rng.below(SIZE_BYTES / 4096) * 4096;
                    m.read_at(&mut buf, at).expect("read");
                    assert!(
                        buf.iter().all(|&b| b == (at >> 20) as u8),
                        "wrong data at {at}"
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    let iops = (per_thread * threads) as f64 / start.elapsed().as_secs_f64();
    println!("random 4 KiB reads, {threads} threads, one connection: {iops:.0} IOPS");
}
