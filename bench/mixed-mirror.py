#!/usr/bin/env python3
"""RAID 1 of a RAM member and an emulated disk (issue 17): 4 KiB random reads at queue depth 16
on `mem:` + `sim:hdd7200` legs, with the read balance as it is (reads follow the cheaper leg:
outstanding bytes x measured latency), with the disk leg marked --write-mostly, with the
balance off (--read-balance round-robin: the legs take turns by chunk, so half the reads wait
on the disk), and each leg alone as linear x1 for reference.

The variants alternate round by round in one run. Prints a Markdown table with the date,
commit and load average for docs/PERFORMANCE.md.

Usage: bench/mixed-mirror.py [--runtime 10] [--rounds 2] [--size 512M] [--model hdd7200]
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

from benchlib import REPO, Proc, fio, run_identity

JOB = ["--rw=randread", "--bs=4k", "--iodepth=16", "--randrepeat=0"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runtime", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--size", default="512M", help="bytes read over (members are 1G)")
    p.add_argument("--model", default="hdd7200")
    p.add_argument("--raidkit", default=os.environ.get(
        "RAIDKIT_BIN", str(REPO / "target" / "release" / "raidkit")))
    args = p.parse_args()
    disk = f"sim:{args.model}:1G"
    variants = [
        ("RAID 1 mem + disk, read balance", ["--level", "1", "mem:1G", disk]),
        ("RAID 1 mem + disk, disk --write-mostly",
         ["--level", "1", "--write-mostly", disk, "mem:1G", disk]),
        ("RAID 1 mem + disk, --read-balance round-robin",
         ["--level", "1", "--read-balance", "round-robin", "mem:1G", disk]),
        ("the disk alone (linear x1)", ["--level", "linear", disk]),
        ("the RAM member alone (linear x1)", ["--level", "linear", "mem:1G"]),
    ]
    date, commit = run_identity()
    load0 = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="raidkit-mixed-mirror-"))
    sock = str(work / "s.sock")
    runs = {label: [] for label, _ in variants}
    for _ in range(args.rounds):
        for label, serve_args in variants:
            # --no-used-map: a new array's used-regions map would answer every read of the
            # never-written range with zeros, reading no member at all.
            cmd = [args.raidkit, "serve", "--create", "--assume-clean", "--no-used-map",
                   "--name", "bench", "--unix", sock, "--cache-size", "0", *serve_args]
            server = Proc(cmd, sock, ready_line="raidkit: serving")
            try:
                r = fio(f"nbd+unix:///bench?socket={sock}", JOB, args.runtime, args.size,
                        [])["read"]
            finally:
                server.stop()
            row = (r["iops"], r["clat_ns"]["mean"] / 1e6,
                   r["clat_ns"]["percentile"]["99.000000"] / 1e6, os.getloadavg()[0])
            runs[label].append(row)
            print(f"  {label:<42} {row[0]:9.0f} IOPS  mean {row[1]:7.2f} ms  p99 {row[2]:7.2f} ms"
                  f"  load {row[3]:.1f}", file=sys.stderr)
    print(f"{date}, commit {commit}; load average at start {load0[0]:.2f} on "
          f"{os.cpu_count()} CPUs; fio 4 KiB random reads QD16 over {args.size}, {args.runtime} s "
          f"per run, {args.rounds} rounds alternating; members mem:1G and {disk}.\n")
    print("| array | IOPS (each round) | mean latency (ms) | p99 latency (ms) |")
    print("|---|---:|---:|---:|")
    for label, _ in variants:
        rows = runs[label]
        cell = lambda i, f: " / ".join(f.format(r[i]) for r in rows)  # noqa: E731
        print(f"| {label} | {cell(0, '{:,.0f}')} | {cell(1, '{:.2f}')} | {cell(2, '{:.2f}')} |")


if __name__ == "__main__":
    main()
