#!/usr/bin/env python3
"""Unequal and slow members (issue 17): two raidkit binaries (--before, --after), interleaved
round by round, on the same members, each figure with the load average at the time.

- mirror: RAID 1 of a RAM member (`mem:`) and an emulated disk (`nbdkit memory` behind the
  delay and rate filters, one request at a time: --disk-latency-ms, --disk-rate), 4 KiB random
  reads at queue depth 4 and 16 (fio's nbd engine): IOPS and the client's p99.
- slow: RAID 1 of two and RAID 5 of four emulated disks, one of them 20x slower
  (--slow-factor), 4 KiB random reads at queue depth 16 after --settle seconds (the slow-member
  verdict takes three 1 s windows): IOPS and the client's p99.

The read cache is off (--cache-size 0) so every read reaches the members. Prints one line per
run and a table of after/before ratios (medians over the rounds).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import MIB, Proc  # noqa: E402


def disk(workdir, name, size, latency_ms, rate):
    sock = str(workdir / f"{name}.sock")
    cmd = ["nbdkit", "--foreground", "--threads", "1", "--unix", sock,
           "--filter=delay", "--filter=rate", "memory", str(size), f"rate={rate}",
           "burstiness=0.02", f"rdelay={latency_ms}ms", f"wdelay={latency_ms}ms"]
    return Proc(cmd, sock), f"nbd+unix:///?socket={sock}"


def fio(uri, qd, runtime, ramp, size):
    cmd = ["fio", "--name=bench", "--ioengine=nbd", f"--uri={uri}", f"--size={size}",
           "--rw=randread", "--bs=4k", f"--iodepth={qd}", "--time_based",
           f"--runtime={runtime}", f"--ramp_time={ramp}", "--randseed=1717",
           "--output-format=json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=runtime + ramp + 300)
    if out.returncode != 0:
        raise RuntimeError(f"fio failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")
    job = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]["read"]
    p99_us = job["clat_ns"]["percentile"]["99.000000"] / 1e3
    return job["iops"], p99_us


def run(binary, workdir, level, specs, qds, args, settle):
    sock = str(workdir / "raidkit.sock")
    cmd = [binary, "serve", "--create", "--level", level, "--name", "bench", "--unix", sock,
           "--cache-size", "0", "--assume-clean", *specs]
    server = Proc(cmd, sock, ready_line="raidkit: serving")
    try:
        uri = f"nbd+unix:///bench?socket={sock}"
        return {qd: fio(uri, qd, args.runtime, settle, args.size) for qd in qds}
    finally:
        server.stop()


def scenario(args, name, level, make_members, qds, settle):
    """Runs `before` and `after` alternately, args.rounds times each; returns
    {binary: {qd: [(iops, p99, load)]}}."""
    results = {"before": {qd: [] for qd in qds}, "after": {qd: [] for qd in qds}}
    for rnd in range(args.rounds):
        order = ("before", "after") if rnd % 2 == 0 else ("after", "before")
        for which in order:
            binary = getattr(args, which)
            with tempfile.TemporaryDirectory(prefix="slowlegs") as tmp:
                workdir = Path(tmp)
                procs, specs = make_members(workdir)
                try:
                    got = run(binary, workdir, level, specs, qds, args, settle)
                finally:
                    for p in procs:
                        p.stop()
            load = os.getloadavg()[0]
            for qd, (iops, p99) in got.items():
                results[which][qd].append((iops, p99, load))
                print(f"  {name:<22} {which:<6} round {rnd} QD {qd:>2}: {iops:9.0f} IOPS  "
                      f"p99 {p99 / 1e3:8.2f} ms  load {load:.1f}", file=sys.stderr)
    return results


def table(name, results):
    print(f"\n{name}")
    print(f"{'QD':>4} {'IOPS before':>12} {'IOPS after':>11} {'ratio':>6} "
          f"{'p99 before ms':>14} {'p99 after ms':>13} {'ratio':>6} {'load':>10}")
    for qd in results["before"]:
        b, a = results["before"][qd], results["after"][qd]
        med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
        loads = [r[2] for r in b + a]
        print(f"{qd:>4} {med(b, 0):12.0f} {med(a, 0):11.0f} {med(a, 0) / med(b, 0):6.2f} "
              f"{med(b, 1) / 1e3:14.2f} {med(a, 1) / 1e3:13.2f} {med(a, 1) / med(b, 1):6.2f} "
              f"{min(loads):4.1f}-{max(loads):4.1f}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="raidkit binary without the change")
    p.add_argument("--after", required=True, help="raidkit binary with the change")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--runtime", type=int, default=8, help="seconds per fio job")
    p.add_argument("--size", default="64M", help="bytes each job reads over")
    p.add_argument("--disk-latency-ms", type=int, default=1)
    p.add_argument("--disk-rate", default="200M", help="emulated disk bytes/s (nbdkit rate)")
    p.add_argument("--slow-factor", type=int, default=20)
    p.add_argument("--settle", type=int, default=6,
                   help="seconds of load before measuring the slow-member runs")
    p.add_argument("--only", choices=["mirror", "slow"], help="one scenario")
    args = p.parse_args()
    member = 128 * MIB
    rate = args.disk_rate
    lat = args.disk_latency_ms

    def ram_and_disk(workdir):
        proc, uri = disk(workdir, "disk", member, lat, rate)
        return [proc], [f"mem:{member}", uri]

    def with_slow(count):
        def make(workdir):
            procs, specs = [], []
            for i in range(count):
                ms = lat * (args.slow_factor if i == count - 1 else 1)
                proc, uri = disk(workdir, f"d{i}", member, ms, rate)
                procs.append(proc)
                specs.append(uri)
            return procs, specs
        return make

    print(f"slow-legs: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"before {args.before}, after {args.after}, {args.rounds} rounds, "
          f"{args.runtime} s per job", file=sys.stderr)
    if args.only in (None, "mirror"):
        r = scenario(args, "raid1 mem+disk", "1", ram_and_disk, (4, 16), 1)
        table(f"RAID 1 of mem: and an emulated disk ({lat} ms, {rate}/s), 4 KiB random reads", r)
    if args.only in (None, "slow"):
        for level, count in (("1", 2), ("5", 4)):
            r = scenario(args, f"raid{level} one {args.slow_factor}x", level, with_slow(count),
                         (16,), args.settle)
            table(f"RAID {level} of {count} emulated disks ({lat} ms), the last "
                  f"{args.slow_factor}x slower ({lat * args.slow_factor} ms), 4 KiB random reads",
                  r)


if __name__ == "__main__":
    main()
