//! The server driven by real NBD clients (libnbd's nbdinfo and nbdcopy, QEMU's qemu-io).
//! A missing client fails the test (see `testsupport::require_tool`).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use common::*;

const SIZE: usize = 32 << 20;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn client");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed: {stdout}\n{stderr}");
    stdout
}

fn start(transport: Transport, jitter_us: u64) -> (Arc<MemExport>, TestServer) {
    let mut export = MemExport::new(SIZE);
    export.jitter_us = jitter_us;
    let export = Arc::new(export);
    (
        export.clone(),
        TestServer::start(export, config("disk"), transport),
    )
}

#[test]
fn nbdinfo_shows_flags_and_block_sizes() {
    if !testsupport::require_tool("nbdinfo") {
        return;
    }
    let (_export, server) = start(Transport::Unix, 0);
    let json: String = run(Command::new("nbdinfo").args(["--json", &server.uri]))
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    for expected in [
        "\"export-name\":\"disk\"",
        "\"export-size\":33554432",
        "\"is_read_only\":false",
        "\"can_flush\":true",
        "\"can_fua\":true",
        "\"can_trim\":true",
        "\"can_zero\":true",
        "\"can_fast_zero\":true",
        "\"can_cache\":true",
        "\"can_multi_conn\":true",
        "\"block_size_minimum\":1",
        "\"block_size_preferred\":262144",
        "\"block_size_maximum\":33554432",
        "\"base:allocation\"",
    ] {
        assert!(json.contains(expected), "nbdinfo lacks {expected}: {json}");
    }
    let list = run(Command::new("nbdinfo").args(["--list", &server.uri]));
    assert!(list.contains("export=\"disk\""), "{list}");
}

fn qemu_io(uri: &str, commands: &[String]) -> String {
    let mut cmd = Command::new("qemu-io");
    cmd.args(["-f", "raw", uri]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    let out = run(&mut cmd);
    assert!(
        !out.contains("failed") && !out.contains("error"),
        "qemu-io reported: {out}"
    );
    out
}

/// Plain, FUA, write-zeroes, discard and flush at aligned and unaligned offsets.
fn qemu_io_patterns(transport: Transport) {
    if !testsupport::require_tool("qemu-io") {
        return;
    }
    let (export, server) = start(transport, 0);
    let commands: Vec<String> = [
        "write -P 0x11 0 1M",
        "write -f -P 0x22 1M 64k",
        "write -P 0x33 3000001 77777",
        "write -z 2M 128k",
        "write -P 0x44 4M 1M",
        "discard 4M 512k",
        "flush",
        "read -P 0x11 0 1M",
        "read -P 0x22 1M 64k",
        "read -P 0x33 3000001 77777",
        "read -P 0 2M 128k",
        "read -P 0 4M 512k",
        "read -P 0x44 4718592 512k",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    qemu_io(&server.uri, &commands);
    assert!(export.flushes.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    assert!(export.fua_writes.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}

#[test]
fn qemu_io_patterns_over_unix() {
    qemu_io_patterns(Transport::Unix);
}

#[test]
fn qemu_io_patterns_over_tcp() {
    qemu_io_patterns(Transport::Tcp);
}

/// Many asynchronous requests in flight against an export with random per-request delay:
/// replies complete out of order, and every pattern still verifies.
#[test]
fn qemu_io_concurrent_requests_complete_out_of_order() {
    if !testsupport::require_tool("qemu-io") {
        return;
    }
    let seed = seed();
    let mut rng = Rng(seed);
    let (_export, server) = start(Transport::Tcp, 3000);
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for i in 0..48u64 {
        let at = i * 256 * 1024 + rng.below(4096);
        let len = 512 + rng.below(200_000);
        let pattern = 1 + (i % 250);
        writes.push(format!("aio_write -P {pattern} {at} {len}"));
        reads.push(format!("aio_read -P {pattern} {at} {len}"));
    }
    let mut commands = writes;
    commands.push("aio_flush".into());
    commands.extend(reads);
    commands.push("aio_flush".into());
    let out = qemu_io(&server.uri, &commands);
    assert!(
        !out.contains("Pattern verification failed"),
        "seed {seed}: {out}"
    );
}

fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nbd-clients-{}-{name}", std::process::id()))
}

#[test]
fn nbdcopy_in_and_out_with_several_connections() {
    if !testsupport::require_tool("nbdcopy") {
        return;
    }
    let seed = seed();
    let (image, back) = (temp_file("image"), temp_file("back"));
    let mut data = vec![0u8; SIZE];
    Rng(seed).fill(&mut data);
    data[8 << 20..12 << 20].fill(0); // a zero run exercises block status and zeroing
    std::fs::write(&image, &data).unwrap();
    let (export, server) = start(Transport::Unix, 0);
    let image_arg = image.to_str().unwrap();
    run(Command::new("nbdcopy").args(["--connections=4", "--flush", image_arg, &server.uri]));
    assert!(
        *export.bytes.lock().unwrap() == data,
        "export differs after copy in (seed {seed})"
    );
    run(Command::new("nbdcopy").args(["--connections=4", &server.uri, back.to_str().unwrap()]));
    let copied = std::fs::read(&back).unwrap();
    let _ = std::fs::remove_file(&image);
    let _ = std::fs::remove_file(&back);
    assert!(copied == data, "copy out differs (seed {seed})");
}
