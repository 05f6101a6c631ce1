//! AES-256-XTS throughput on one core: `cargo run --release -p crypt --example xts_speed
//! [SECONDS]`. Encrypts and decrypts a 1 MiB buffer of 512-byte units (the layer's piece)
//! over and over for SECONDS (default 3) each, and prints GB/s (10^9 bytes per second) and
//! whether the processor has AES-NI; then the same with `xts-mode` (one block at a time), the
//! reference the batched code is tested against.

use std::time::{Duration, Instant};

use aes::cipher::KeyInit;
use aes::Aes256;
use crypt::{DataCipher, DataKey};
use xts_mode::{get_tweak_default, Xts128};

fn rate(what: &str, secs: f64, f: impl Fn(&mut [u8])) {
    let mut buf = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        f(&mut buf);
        bytes += buf.len() as u64;
    }
    let gbps = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
    println!("{what}: {gbps:.2} GB/s on one core");
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("SECONDS is a number"))
        .unwrap_or(3.0);
    let aes_ni = std::arch::is_x86_feature_detected!("aes");
    println!("AES-NI: {}", if aes_ni { "yes" } else { "no" });
    let cipher = DataCipher::new(&DataKey::random());
    rate("aes-256-xts encrypt", secs, |b| cipher.encrypt(b, 12345));
    rate("aes-256-xts decrypt", secs, |b| cipher.decrypt(b, 12345));
    let reference = Xts128::new(Aes256::new(&[1; 32].into()), Aes256::new(&[2; 32].into()));
    rate("xts-mode encrypt (block at a time)", secs, |b| {
        reference.encrypt_area(b, 512, 12345, get_tweak_default)
    });
}
