#!/usr/bin/env python3
"""What each choice costs: RAID level, chunk (stripe unit) size, read cache and journal, measured
with the same fio jobs on the same kind of members, against one member alone.

Members are either RAM (`--members ram`: `mem:` members; every figure is then CPU cost, since
nothing waits for a device) or emulated disks (`--members disk`, the default): each member is
its own `nbdkit memory` server serving one request at a time, behind nbdkit's delay filter
(`--member-latency-ms` per request) and rate filter (`--member-rate`), reached through raidkit's
NBD member client, so
that what a level does to the disks (parity reads, mirror writes, one request split over several
members) shows as it would on real ones. The baseline is `linear` over one member of the same
kind: "x single" is the array's figure over that member's.

Jobs (fio's nbd engine over a Unix socket, time-based, after a sequential prefill):
  seq-write   1 MiB sequential write, iodepth 16   (MB/s)
  seq-read    1 MiB sequential read,  iodepth 16   (MB/s)
  rand-read   4 KiB random read,      iodepth 32   (IOPS)
  rand-write  4 KiB random write,     iodepth 32   (IOPS)
  rand-64k    64 KiB random 70 % read / 30 % write, iodepth 16 (MB/s, read + write)

Tables:
  1. levels x chunk sizes (linear 1 member, RAID 1 over 2, RAID 0/10/5/6 over 4), cache off,
     no journal: the raw cost of each layout;
  2. RAID 5 over 4 with the default chunk: read cache off / on (64M, adaptive read-ahead), and
     no journal / write-through / write-back journal (a RAM file in /dev/shm, standing in for
     a fast durable device; --allow-volatile-journal: never do this with data). Before each job
     the write-back journal is left to drain (polled with `raidkit status`), so every job is
     measured on its own; the waits are printed.

Usage: bench/choices.py [--members disk|ram] [--runtime 5] [--size 256M] [--chunks 64K,128K,512K]
                        [--levels linear,1,0,10,5,6] [--jobs seq-write,...] [--tables 1,2]
                        [--member-rate 200M] [--member-latency-ms 1] [--raidkit-arg=ARG]
                        [--json OUT.json] [--plot DIR]
Results and the date and machine go in docs/PERFORMANCE.md ("What each choice costs").
`--json OUT` also writes the figures as a results file, `--plot DIR` one chart per table (SVG
and PNG: a group of bars per array, one bar per job, its length the figure over the single
member's; bench/plot.py, which re-plots a results file).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchlib import (MIB, REPO, RESULTS_FORMAT, Proc, check_plotting, parse_size, run_identity,
                      run_job, save_results)

JOBS = [
    ("seq-write", ["--rw=write", "--bs=1m", "--iodepth=16"], "write", "MB/s"),
    ("seq-read", ["--rw=read", "--bs=1m", "--iodepth=16"], "read", "MB/s"),
    ("rand-read", ["--rw=randread", "--bs=4k", "--iodepth=32"], "read", "IOPS"),
    ("rand-write", ["--rw=randwrite", "--bs=4k", "--iodepth=32"], "write", "IOPS"),
    ("rand-64k", ["--rw=randrw", "--rwmixread=70", "--bs=64k", "--iodepth=16"], "both", "MB/s"),
]

# level -> member count
LEVEL_MEMBERS = {"linear": 1, "1": 2, "0": 4, "10": 4, "5": 4, "6": 4}
DATA_MEMBERS = {"linear": 1, "1": 1, "0": 4, "10": 2, "5": 3, "6": 2}


class DiskMembers:
    """One rate- and latency-limited `nbdkit memory` server per member (emulated disks)."""

    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.procs = []

    def start(self, count, member_bytes):
        specs = []
        for i in range(count):
            sock = str(self.workdir / f"member{i}.sock")
            latency = f"{self.args.member_latency_ms}ms"
            # One request at a time (--threads 1), each paying the latency and then its bytes
            # at the rate: reads and writes share the device's time, as on a disk.
            cmd = ["nbdkit", "--foreground", "--threads", "1", "--unix", sock,
                   "--filter=delay", "--filter=rate",
                   "memory", str(member_bytes), f"rate={self.args.member_rate_bits}",
                   "burstiness=0.02", f"rdelay={latency}", f"wdelay={latency}"]
            self.procs.append(Proc(cmd, sock))
            specs.append(f"nbd+unix:///?socket={sock}")
        return specs

    def stop(self):
        for p in self.procs:
            p.stop()
        self.procs = []


def member_specs(args, workdir, level, chunk):
    """(member specs, extra serve args, cleanup) for one array."""
    count = LEVEL_MEMBERS[level]
    data = DATA_MEMBERS[level]
    member_bytes = args.size_bytes // data + 64 * MIB
    extra = [] if level == "linear" else ["--chunk", chunk]
    if args.members == "ram":
        return [f"mem:{member_bytes}"] * count, extra, lambda: None
    disks = DiskMembers(args, workdir)
    specs = disks.start(count, member_bytes)
    # nbdkit memory starts zeroed: consistent for every level, no initial sync needed.
    return specs, extra + ["--assume-clean"], disks.stop


def wait_applied(args, admin, label, timeout_s=300):
    """With a write-back journal, waits until what the previous job wrote is on the members,
    so each job is measured on its own (the wait is reported: it is what a burst costs)."""
    start = time.monotonic()
    while True:
        out = subprocess.run([args.raidkit, "status", "--json", "--admin", admin],
                             capture_output=True, text=True, timeout=60, check=True)
        unapplied = (json.loads(out.stdout).get("journal") or {}).get("unapplied_bytes")
        if not unapplied:
            break
        if time.monotonic() - start > timeout_s:
            raise RuntimeError(f"{label}: {unapplied} bytes still unapplied after {timeout_s} s")
        time.sleep(0.1)
    waited = time.monotonic() - start
    if waited >= 0.1:
        print(f"    {label:<28} waited {waited:.1f} s for the write-back journal to drain",
              file=sys.stderr)


def measure(args, workdir, level, chunk, serve_args, label):
    specs, extra, cleanup = member_specs(args, workdir, level, chunk)
    sock = str(workdir / "raidkit.sock")
    admin = str(workdir / "admin.sock")
    cmd = [args.raidkit, "serve", "--create", "--level", level, "--name", "bench",
           "--unix", sock, "--admin", admin, *extra, *serve_args, *args.raidkit_arg, *specs]
    results = {}
    server = None
    try:
        server = Proc(cmd, sock, ready_line="raidkit: serving")
        uri = f"nbd+unix:///bench?socket={sock}"
        prefill = ("prefill", ["--rw=write", "--bs=1m", "--iodepth=16"], "write", "MB/s")
        run_job(uri, prefill, 0, args.size)
        for job in [j for j in JOBS if j[0] in args.jobs]:
            wait_applied(args, admin, label)
            results[job[0]] = run_job(uri, job, args.runtime, args.size, server)[0]
            print(f"    {label:<28} {job[0]:<10} {results[job[0]]:12.1f} {job[3]}   "
                  f"load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    finally:
        rc = server.stop() if server else 0
        cleanup()
        for f in workdir.glob("*.img"):
            f.unlink()
    if rc != 0:
        raise RuntimeError(f"raidkit serve exited {rc}: {''.join(server.lines)}")
    return results


def fmt(value, unit):
    return f"{value:,.0f}" if unit == "IOPS" or value >= 100 else f"{value:,.1f}"


def print_table(title, rows, baseline, jobs):
    print(f"\n{title}\n")
    head = ["array"] + [f"{j[0]} ({j[3]})" for j in jobs] + [f"{j[0]} x single" for j in jobs]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for label, results in rows:
        cells = [label] + [fmt(results[j[0]], j[3]) for j in jobs]
        cells += [f"{results[j[0]] / baseline[j[0]]:.2f}" if baseline.get(j[0]) else "n/a"
                  for j in jobs]
        print("| " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", choices=["disk", "ram"], default="disk")
    parser.add_argument("--runtime", type=int, default=5, help="seconds per job (default 5)")
    parser.add_argument("--size", default="256M", help="working set (default 256M)")
    parser.add_argument("--chunks", default="64K,128K,512K")
    parser.add_argument("--levels", default=",".join(LEVEL_MEMBERS))
    parser.add_argument("--jobs", default=",".join(j[0] for j in JOBS))
    parser.add_argument("--tables", default="1,2")
    parser.add_argument("--member-rate", default="200M",
                        help="emulated disk bandwidth per direction, bytes/s (default 200M)")
    parser.add_argument("--member-latency-ms", type=int, default=1,
                        help="emulated disk latency per request, ms (default 1)")
    parser.add_argument("--dir", default="/var/tmp/raidkit-choices")
    parser.add_argument("--raidkit-arg", action="append", default=[], metavar="ARG",
                        help="extra argument for every raidkit serve (repeatable)")
    parser.add_argument("--raidkit", default=os.environ.get(
        "RAIDKIT_BIN", str(REPO / "target" / "release" / "raidkit")))
    parser.add_argument("--json", metavar="OUT", help="also write the figures to this results "
                        "file (bench/plot.py re-plots it)")
    parser.add_argument("--plot", metavar="DIR", help="write SVG and PNG charts (and the "
                        "results file, unless --json names one) into DIR")
    args = parser.parse_args()
    check_plotting(args.plot)
    args.size_bytes = parse_size(args.size)
    args.member_rate_bits = parse_size(args.member_rate) * 8
    args.jobs = [j for j in args.jobs.split(",") if j]
    levels = [lv for lv in args.levels.split(",") if lv]
    chunks = [c for c in args.chunks.split(",") if c]
    tables = [t for t in args.tables.split(",") if t]
    if any(j not in [job[0] for job in JOBS] for j in args.jobs):
        parser.error(f"unknown jobs in {args.jobs}")
    if any(lv not in LEVEL_MEMBERS for lv in levels):
        parser.error(f"levels must be among {list(LEVEL_MEMBERS)}")
    needed = ["fio"] + (["nbdkit"] if args.members == "disk" else [])
    for tool in needed:
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not installed (scripts/install-deps.sh installs it)")
    if not os.access(args.raidkit, os.X_OK):
        parser.error(f"{args.raidkit} not found: cargo build --release first")
    workdir = Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    jobs = [j for j in JOBS if j[0] in args.jobs]
    started, commit = run_identity()
    no_cache = ["--cache-size", "0"]

    print(f"== single member (baseline), members: {args.members}", file=sys.stderr)
    baseline = measure(args, workdir, "linear", "128K", no_cache, "linear x1")
    rows1, rows2 = [("linear x1 (baseline)", baseline)], []
    if "1" in tables:
        for level in [lv for lv in levels if lv != "linear"]:
            for chunk in (chunks if level != "1" else ["128K"]):
                label = f"raid{level} x{LEVEL_MEMBERS[level]}, chunk {chunk}"
                if level == "1":
                    label = f"raid1 x{LEVEL_MEMBERS[level]}"
                print(f"== {label}", file=sys.stderr)
                rows1.append((label, measure(args, workdir, level, chunk, no_cache, label)))
    if "2" in tables:
        journal = Path("/dev/shm") / "raidkit-choices-journal.img"
        variants = [
            ("cache off, no journal", no_cache),
            ("cache 64M (adaptive read-ahead)", []),
            ("cache off, journal write-through",
             no_cache + ["--journal", str(journal), "--journal-mode", "write-through",
                         "--allow-volatile-journal"]),
            ("cache off, journal write-back",
             no_cache + ["--journal", str(journal), "--journal-mode", "write-back",
                         "--allow-volatile-journal"]),
        ]
        for label, serve_args in variants:
            if journal.exists():
                journal.unlink()
            subprocess.run(["truncate", "-s", "256M", str(journal)], check=True)
            print(f"== raid5 x4: {label}", file=sys.stderr)
            rows2.append((f"raid5 x4, {label}",
                          measure(args, workdir, "5", "128K", serve_args, label)))
        journal.unlink()
    member_text = ("RAM (`mem:`)" if args.members == "ram" else
                   f"emulated disks (nbdkit memory, {args.member_rate} bytes/s per direction, "
                   f"{args.member_latency_ms} ms per request)")
    print(f"{started}; {os.cpu_count()} cores; members: {member_text}; working set {args.size}; "
          f"{args.runtime} s per job after a sequential prefill; fio nbd engine, Unix socket.")
    if rows1:
        print_table("Levels and chunk sizes (read cache off, no journal)", rows1, baseline, jobs)
    if rows2:
        print_table("RAID 5 x4, chunk 128K: read cache and journal", rows2, baseline, jobs)
    if args.json or args.plot:
        tables = [("levels", "levels and chunk sizes (read cache off, no journal)", rows1),
                  ("cache-journal", "RAID 5 x4, chunk 128K, read cache and journal",
                   rows1[:1] + rows2)]
        data = {
            "format": RESULTS_FORMAT,
            "bench": "choices",
            "date": started,
            "commit": commit,
            "title": "What each choice costs",
            "setup": (f"Members: {member_text.replace('`', '')}; {args.size} working set, "
                      f"{args.runtime} s per job after a sequential prefill; "
                      f"{os.cpu_count()} cores."),
            "raidkit_args": args.raidkit_arg,
            "jobs": [{"name": j[0], "unit": j[3]} for j in jobs],
            "baseline": baseline,
            "tables": [{"key": key, "title": title, "rows": [{"label": label, "figures": r}
                                                             for label, r in rows]}
                       for key, title, rows in tables if len(rows) > 1],
        }
        stem = f"choices-{started[:10]}-{started[11:13]}{started[14:16]}-{commit}"
        save_results(data, args.json, args.plot, stem)


if __name__ == "__main__":
    main()
