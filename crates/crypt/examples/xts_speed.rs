//! AES-256-XTS throughput on one core: `cargo run --release -p crypt --example xts_speed
//! [SECONDS]`. Encrypts and decrypts a 1 MiB buffer of 512-byte units (the layer's piece)
//! over and over for SECONDS (default 3) each, and prints GB/s (10^9 bytes per second) and
//! whether the processor has AES-NI and VAES, for each implementation it runs (VAES, and the
//! portable one around the `aes` crate: in place, into another buffer as a write, and
//! zero-aware as a read); then the same with `xts-mode` (one block at a time), the reference
//! the batched code is tested against.

use std::time::{Duration, Instant};

use aes::cipher::KeyInit;
use aes::Aes256;
use crypt::{DataCipher, DataKey, Implementation};
use xts_mode::{get_tweak_default, Xts128};

/// This thread's time on a CPU so far (Linux: /proc/thread-self/schedstat), so the rate per
/// core is right on a machine shared with other work; `None` where that file is missing.
fn cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        s.split_whitespace().next()?.parse().ok()?,
    ))
}

fn rate(what: &str, secs: f64, f: impl Fn(&mut [u8])) {
    let mut buf = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    let cpu_start = cpu_time();
    let mut bytes = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        f(&mut buf);
        bytes += buf.len() as u64;
    }
    let wall = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
    match (cpu_start, cpu_time()) {
        (Some(a), Some(b)) => {
            let cpu = bytes as f64 / (b - a).as_secs_f64() / 1e9;
            println!("{what}: {cpu:.2} GB/s per core (CPU time; {wall:.2} GB/s of wall time)");
        }
        _ => println!("{what}: {wall:.2} GB/s on one core (wall time)"),
    }
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("SECONDS is a number"))
        .unwrap_or(3.0);
    let aes_ni = std::arch::is_x86_feature_detected!("aes");
    println!("AES-NI: {}", if aes_ni { "yes" } else { "no" });
    let key = DataKey::random();
    println!(
        "VAES (AES-NI, AVX-512F, VAES): {}",
        if Implementation::Vaes.is_available() {
            "yes"
        } else {
            "no"
        }
    );
    // Each implementation this processor runs (RAIDKIT_CRYPT does not matter here): in place,
    // then the data path's own calls, a write's encryption into another buffer and a read's
    // decryption that leaves zero units alone.
    for implementation in [Implementation::Vaes, Implementation::Portable] {
        if !implementation.is_available() {
            continue;
        }
        let cipher = DataCipher::with(&key, implementation);
        let what = implementation.name();
        rate(&format!("aes-256-xts encrypt ({what})"), secs, |b| {
            cipher.encrypt(b, 12345)
        });
        rate(&format!("aes-256-xts decrypt ({what})"), secs, |b| {
            cipher.decrypt(b, 12345)
        });
        let src = vec![0x5au8; 1 << 20];
        rate(
            &format!("aes-256-xts encrypt into another buffer ({what})"),
            secs,
            |b| cipher.encrypt_to(&src, b, 12345),
        );
        rate(
            &format!("aes-256-xts decrypt_nonzero, no zero unit ({what})"),
            secs,
            |b| cipher.decrypt_nonzero(b, 12345),
        );
    }
    let reference = Xts128::new(Aes256::new(&[1; 32].into()), Aes256::new(&[2; 32].into()));
    rate("xts-mode encrypt (block at a time)", secs, |b| {
        reference.encrypt_area(b, 512, 12345, get_tweak_default)
    });
}
