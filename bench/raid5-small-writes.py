#!/usr/bin/env python3
"""Small random writes on RAID 5: 4 KiB random writes at queue depth 32 on a RAID 5 of 4
emulated disks (`sim:` disk models, real time: the figures do not depend on CPU load) with no
journal, a write-through journal and a write-back journal, against one such disk alone, on a
working set the write-back journal can hold and on one larger, in one run.

The write-back journal is a file in /dev/shm (`--journal-bytes`, default 512M: its buffer is
min(64 MiB, ring/8) = 64 MiB; --allow-volatile-journal, for benchmarks only), standing in for a
fast durable device. A write-back job is measured after a warm-up of the same job
(`--warmup`, unmeasured, on the same server), so the buffer is full when it starts and the
figure is the steady state, the rate at which the buffer drains to the disks, not the first
seconds' burst into the journal. Every array is new (members are zeroed RAM behind the model).
Members have their write cache off (`--disk-options`): with it on, one disk takes a small
working set whole into its 64 MiB cache.

Usage: bench/raid5-small-writes.py [--model hdd7200] [--member-size 1G] [--disk-options cache=off]
                                   [--runtime 20]
                                   [--warmup 15] [--sets 32M,256M,2G] [--chunk 128K]
                                   [--journal-bytes 512M] [--json OUT.json]
                                   [--variants disk,none,wt,wb] [--baseline OLD/raidkit]
                                   [--rounds 1]

--baseline OLD/raidkit runs every variant with an earlier build too, alternating (old, new,
old, new... for --rounds rounds): a change's before and after in one run; the rows of the old
build are marked "(baseline)".
Results and the date, commit and load average go in docs/PERFORMANCE.md ("Small RAID 5 writes
with the write-back journal").
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchlib import REPO, Proc, fio, parse_size, run_identity

JOB = ["--rw=randwrite", "--bs=4k", "--iodepth=32", "--randrepeat=0"]


def serve(args, workdir, level, members, serve_args, binary):
    sock = str(workdir / "raidkit.sock")
    admin = str(workdir / "admin.sock")
    extra = [] if level == "linear" else ["--chunk", args.chunk]
    spec = f"sim:{args.model}:{args.member_size}"
    if args.disk_options:
        spec += f":{args.disk_options}"
    cmd = [binary, "serve", "--create", "--level", level, "--name", "bench",
           "--unix", sock, "--admin", admin, "--cache-size", "0", "--assume-clean",
           *extra, *serve_args, *[spec] * members]
    return Proc(cmd, sock, ready_line="raidkit: serving"), f"nbd+unix:///bench?socket={sock}"


def one(args, workdir, label, level, members, serve_args, working_set, warmup, binary):
    """IOPS, mean and p99 completion latency (ms) of the job on a new array."""
    server, uri = serve(args, workdir, level, members, serve_args, binary)
    try:
        if warmup:
            fio(uri, JOB, warmup, working_set, [])
        load = os.getloadavg()[0]
        result = fio(uri, JOB, args.runtime, working_set, [])["write"]
    finally:
        stopped = time.monotonic()
        rc = server.stop()
        drain = time.monotonic() - stopped
    if rc != 0:
        raise RuntimeError(f"{label}: raidkit serve exited {rc}: {''.join(server.lines)}")
    row = {
        "iops": result["iops"],
        "mean_ms": result["clat_ns"]["mean"] / 1e6,
        "p99_ms": result["clat_ns"]["percentile"]["99.000000"] / 1e6,
        "load": load,
        "stop_s": drain,
    }
    print(f"  {label:<36} {working_set:>6}  {row['iops']:8.0f} IOPS  mean {row['mean_ms']:7.1f} ms"
          f"  p99 {row['p99_ms']:8.1f} ms  load {load:.1f}  stop {drain:.1f} s", file=sys.stderr)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="hdd7200",
                        help="disk model of every member (sim:MODEL:SIZE; default hdd7200)")
    parser.add_argument("--member-size", default="1G")
    parser.add_argument("--disk-options", default="cache=off",
                        help="the model's options (default cache=off: the disk's write cache "
                             "would take a small working set whole and defer it to the flush "
                             "at stop, so one disk would be measured at its cache's speed; "
                             "RAID controllers turn it off)")
    parser.add_argument("--runtime", type=int, default=20, help="seconds measured per job")
    parser.add_argument("--warmup", type=int, default=15,
                        help="seconds of the same job before a write-back measurement")
    parser.add_argument("--sets", default="32M,256M,2G",
                        help="working sets: one the write-back buffer holds, one the journal "
                             "holds, one larger than the journal")
    parser.add_argument("--chunk", default="128K")
    parser.add_argument("--journal-bytes", default="512M")
    parser.add_argument("--dir", default="/var/tmp/raidkit-small-writes")
    parser.add_argument("--raidkit", default=os.environ.get(
        "RAIDKIT_BIN", str(REPO / "target" / "release" / "raidkit")))
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON here")
    parser.add_argument("--variants", default="disk,none,wt,wb",
                        help="which arrays: disk (one disk), none, wt, wb (RAID 5 with no, a "
                             "write-through, a write-back journal)")
    parser.add_argument("--baseline", metavar="RAIDKIT",
                        help="an earlier raidkit build, run alternately with --raidkit")
    parser.add_argument("--rounds", type=int, default=1,
                        help="times each variant runs (per build); rows give the median")
    args = parser.parse_args()
    if shutil.which("fio") is None:
        parser.error("fio is not installed (scripts/install-deps.sh installs it)")
    if not os.access(args.raidkit, os.X_OK):
        parser.error(f"{args.raidkit} not found: cargo build --release first")
    sets = [s for s in args.sets.split(",") if s]
    workdir = Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    journal = Path("/dev/shm") / f"{workdir.name}-journal.img"
    started, commit = run_identity()
    keys = {"disk": ("one disk (linear x1)", "linear", 1, None, 0),
            "none": ("raid5 x4, no journal", "5", 4, None, 0),
            "wt": ("raid5 x4, write-through journal", "5", 4, "write-through", 0),
            "wb": ("raid5 x4, write-back journal", "5", 4, "write-back", args.warmup)}
    chosen = [k for k in args.variants.split(",") if k]
    unknown = [k for k in chosen if k not in keys]
    if unknown:
        parser.error(f"unknown variants {unknown}: choose from {','.join(keys)}")
    builds = [("", args.raidkit)]
    if args.baseline:
        builds = [(" (baseline)", args.baseline), ("", args.raidkit)]
    variants = []
    for k in chosen:
        label, *rest = keys[k]
        for tag, binary in builds:
            variants.append((label + tag, *rest, binary))
    rows = {}
    runs = {}
    for working_set in sets:
        for _ in range(args.rounds):
            for label, level, members, mode, warmup, binary in variants:
                serve_args = []
                if mode:
                    if journal.exists():
                        journal.unlink()
                    subprocess.run(["truncate", "-s", args.journal_bytes, str(journal)],
                                   check=True)
                    serve_args = ["--journal", str(journal), "--journal-mode", mode,
                                  "--allow-volatile-journal"]
                runs.setdefault((label, working_set), []).append(
                    one(args, workdir, label, level, members, serve_args, working_set, warmup,
                        binary))
    for key, results in runs.items():
        rows[key] = {f: sorted(r[f] for r in results)[len(results) // 2] for f in results[0]}
    if journal.exists():
        journal.unlink()
    print(f"{started}, commit {commit}; {os.cpu_count()} cores; members sim:{args.model}:"
          f"{args.member_size}:{args.disk_options}; chunk {args.chunk}; 4 KiB random writes, QD32, "
          f"{args.runtime} s (write-back after {args.warmup} s of warm-up); journal "
          f"{args.journal_bytes} in /dev/shm (write-back buffer min(64 MiB, ring/8)).\n")
    print("| array | working set | IOPS | x one disk | mean latency (ms) | p99 latency (ms) "
          "| load average |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for working_set in sets:
        disk = rows.get((keys["disk"][0], working_set))
        base = disk["iops"] if disk else float("nan")
        for label, *_ in variants:
            r = rows[(label, working_set)]
            print(f"| {label} | {working_set} | {r['iops']:,.0f} | {r['iops'] / base:.2f} | "
                  f"{r['mean_ms']:.1f} | {r['p99_ms']:.1f} | {r['load']:.1f} |")
    if args.json:
        data = {"date": started, "commit": commit, "model": args.model,
                "rows": [{"array": label, "working_set": ws, **r}
                         for (label, ws), r in rows.items()]}
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
