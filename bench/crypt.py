#!/usr/bin/env python3
"""Encrypted vs plain RAM array over NBD (issue 14's measure), interleaved in one run.

Two `raidkit serve --create -l 0 -c 64K --cache-size 0 mem:SIZE mem:SIZE` servers on Unix
sockets, one with `--encrypt --key-file` (cheap KDF: start-up is not measured), both started
once; then for each round and each workload (1 MiB sequential write and read, QD 4; 4 KiB
random write and read, QD 16; fio's nbd engine, time-based) plain and encrypted run back to
back, the order alternating by round, so the load of a shared machine falls on both alike.
The read cache is off so every read is decrypted. Prints the medians per workload, the
encrypted/plain ratio, the server CPU per request, and the load average at the start and
after each round; then AES-256-XTS GB/s per core (the crate's example `xts_speed`, run from
$CARGO_TARGET_DIR/release/examples if built there, else by cargo; skip with --no-xts).
With --portable a third server, encrypted through the portable XTS path (RAIDKIT_CRYPT=portable:
a processor without VAES), joins the interleaving, with its own ratio column.

    bench/crypt.py [--rounds 3] [--runtime 5] [--size 512M] [--bin PATH] [--no-xts] [--portable]
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib
from benchlib import MIB

JOBS = [
    ("1M seq write QD4", ["--rw=write", "--bs=1M", "--iodepth=4"], "write", "MB/s"),
    ("1M seq read QD4", ["--rw=read", "--bs=1M", "--iodepth=4"], "read", "MB/s"),
    ("4K rand write QD16", ["--rw=randwrite", "--bs=4k", "--iodepth=16"], "write", "MB/s"),
    ("4K rand read QD16", ["--rw=randread", "--bs=4k", "--iodepth=16"], "read", "MB/s"),
]


def load():
    return os.getloadavg()[0]


def server(binary, tmp, name, size, encrypt, implementation=None):
    sock = str(tmp / f"{name}.sock")
    cmd = [binary, "serve", "--unix", sock, "--create", "-l", "0", "-c", "64K",
           "--cache-size", "0", "--name", name]
    if encrypt:
        key = tmp / "key"
        key.write_bytes(os.urandom(64))
        cmd += ["--encrypt", "--key-file", str(key), "--kdf-memory", "64K",
                "--kdf-iterations", "1"]
    cmd += [f"mem:{size}", f"mem:{size}"]
    env = {"RAIDKIT_CRYPT": implementation} if implementation else None
    proc = benchlib.Proc(cmd, sock, ready_line="raidkit: serving", env=env)
    if implementation and f"{implementation} implementation" not in "".join(proc.lines):
        proc.stop()
        raise RuntimeError(f"{name}: not served through the {implementation} implementation:\n"
                           + "".join(proc.lines))
    return proc, f"nbd+unix:///?socket={sock}"


def xts_speed(target):
    """The crate's own measure, its lines as it prints them: the example binary under
    `target` (CARGO_TARGET_DIR) if built, else built and run by cargo."""
    example = Path(target) / "release/examples/xts_speed"
    cmd = ([str(example), "2"] if example.exists() else
           ["cargo", "run", "--release", "-q", "-p", "crypt", "--example", "xts_speed", "2"])
    out = subprocess.run(cmd, cwd=benchlib.REPO, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"xts_speed failed:\n{out.stdout}{out.stderr}")
    return out.stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=5, help="seconds per fio run")
    ap.add_argument("--size", default="512M", help="each of the two RAM members")
    ap.add_argument("--bin", default=os.environ.get(
        "RAIDKIT_BIN", str(benchlib.REPO / "target/release/raidkit")))
    ap.add_argument("--no-xts", action="store_true", help="skip the AES-XTS per-core figure")
    ap.add_argument("--portable", action="store_true",
                    help="also an array encrypted through the portable path (RAIDKIT_CRYPT)")
    args = ap.parse_args()
    date, commit = benchlib.run_identity()
    print(f"# bench/crypt.py {date} commit {commit}, load average {load():.1f} at start")
    # fio's file size: the array less its metadata, rounded down to 1 MiB.
    fio_size = 2 * benchlib.parse_size(args.size) - 64 * MIB
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        servers = {"plain": server(args.bin, tmp, "plain", args.size, False),
                   "encrypted": server(args.bin, tmp, "enc", args.size, True)}
        if args.portable:
            servers["portable"] = server(args.bin, tmp, "portable", args.size, True, "portable")
        kinds = list(servers)
        figures = {(job[0], kind): [] for job in JOBS for kind in servers}
        cpu = {(job[0], kind): [] for job in JOBS for kind in servers}
        try:
            for r in range(args.rounds):
                order = kinds if r % 2 == 0 else kinds[::-1]
                for job in JOBS:
                    for kind in order:
                        proc, uri = servers[kind]
                        value, us = benchlib.run_job(uri, job, args.runtime, fio_size, proc)
                        figures[(job[0], kind)].append(value)
                        cpu[(job[0], kind)].append(us)
                print(f"# round {r + 1}/{args.rounds} done, load average {load():.1f}",
                      flush=True)
        finally:
            for proc, _ in servers.values():
                proc.stop()
    encrypted = kinds[1:]
    print("| workload | plain | " + " | ".join(f"{k} | ratio" for k in encrypted)
          + " | server CPU µs/request " + " / ".join(kinds) + " |")
    print("|---|---|" + "---|---|" * len(encrypted) + "---|")
    for job in JOBS:
        plain = benchlib.median(figures[(job[0], "plain")])
        cells = [f"{benchlib.median(figures[(job[0], k)]):.0f} MB/s | "
                 f"{benchlib.median(figures[(job[0], k)]) / plain:.2f}×" for k in encrypted]
        us = " / ".join(f"{benchlib.median(cpu[(job[0], k)]):.0f}" for k in kinds)
        print(f"| {job[0]} | {plain:.0f} MB/s | " + " | ".join(cells) + f" | {us} |")
    print(f"# load average {load():.1f} at the end")
    if not args.no_xts:
        print(f"# AES-256-XTS per core (crypt example xts_speed 2), load "
              f"{load():.1f}:")
        print(xts_speed(os.environ.get("CARGO_TARGET_DIR", benchlib.REPO / "target")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
