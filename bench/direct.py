#!/usr/bin/env python3
"""Direct I/O to members (issue 17): raidkit linear over one loop device with direct I/O on,
against fio with direct I/O on the same device and against qemu-nbd serving the device with
O_DIRECT (`--cache=none --aio=io_uring`: the same NBD path to fio, no RAID — what an NBD server
doing direct I/O gets here, so the NBD round trip's share of the gap shows); and what buffered and direct members do to the
machine's page cache and to raidkit's memory when 1 GiB is written through raidkit.

Needs root (losetup), fio, and a filesystem with O_DIRECT for the backing file (--dir, default
/var/tmp). Prints a Markdown table for docs/PERFORMANCE.md, with the load average.

    sudo python3 bench/direct.py [--size 2G] [--runtime 10] [--dir /var/tmp]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from pagecache import cached_bytes  # noqa: E402

MIB = benchlib.MIB
JOBS = [
    # name, fio args, direction, unit
    ("1 MiB seq write", ["--rw=write", "--bs=1M", "--iodepth=16"], "write", "MB/s"),
    ("1 MiB seq read", ["--rw=read", "--bs=1M", "--iodepth=16"], "read", "MB/s"),
    ("4 KiB rand write", ["--rw=randwrite", "--bs=4k", "--iodepth=32"], "write", "IOPS"),
    ("4 KiB rand read", ["--rw=randread", "--bs=4k", "--iodepth=32"], "read", "IOPS"),
]


def fio_device(dev, args, runtime, size):
    cmd = ["fio", "--name=bench", "--ioengine=libaio", "--direct=1", f"--filename={dev}",
           f"--size={size}", "--output-format=json", "--time_based", f"--runtime={runtime}",
           "--ramp_time=1", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         timeout=runtime * 3 + 600)
    return json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]


def figure(result, direction, unit):
    side = result[direction]
    return side["bw_bytes"] / 1e6 if unit == "MB/s" else side["iops"]


def meminfo_cached():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Cached:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no Cached: in /proc/meminfo")


def wipe_ends(dev, size):
    """Zeroes the first and last 8 MiB (where superblocks go), so that `--create` finds the
    device empty after fio wrote it."""
    for seek in (0, size // MIB - 8):
        subprocess.run(["dd", "if=/dev/zero", f"of={dev}", "bs=1M", "count=8", f"seek={seek}",
                        "oflag=direct", "status=none"], check=True)


def serve(dev, sock, extra):
    size = int(subprocess.run(["blockdev", "--getsize64", dev], capture_output=True, text=True,
                              check=True).stdout)
    wipe_ends(dev, size)
    cmd = [str(benchlib.REPO / os.environ.get("CARGO_TARGET_DIR", "target") / "release" / "raidkit")
           if not os.environ.get("RAIDKIT_BIN") else os.environ["RAIDKIT_BIN"],
           "serve", "--unix", sock, "--create", "--level", "linear", "--name", "bench",
           "--assume-clean", *extra, dev]
    return benchlib.Proc(cmd, sock, "raidkit: serving")


def serve_qemu_nbd(dev, sock):
    """The reference: qemu-nbd on the device itself, O_DIRECT and io_uring."""
    cmd = ["qemu-nbd", "--format=raw", "--persistent", "--shared=8", "--cache=none",
           "--aio=io_uring", f"--socket={sock}", dev]
    return benchlib.Proc(cmd, sock)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2G", help="backing file and device size")
    ap.add_argument("--runtime", type=int, default=10, help="seconds per fio job")
    ap.add_argument("--dir", default="/var/tmp", help="where the backing file goes")
    ap.add_argument("--written", default="1G", help="bytes written for the page-cache figures")
    args = ap.parse_args()
    size = benchlib.parse_size(args.size)
    written = benchlib.parse_size(args.written)
    date, commit = benchlib.run_identity()
    load = os.getloadavg()
    work = tempfile.mkdtemp(prefix="raidkit-direct-bench-", dir=args.dir)
    backing = Path(work) / "disk.img"
    subprocess.run(["fallocate", "-l", str(size), str(backing)], check=True)
    dev = subprocess.run(["losetup", "--direct-io=on", "-f", "--show", str(backing)],
                         capture_output=True, text=True, check=True).stdout.strip()
    sock = str(Path(work) / "s.sock")
    rows = []
    try:
        # Data area below raidkit's superblock area: fio writes the first half of the device.
        fio_size = size // 2
        for name, fargs, direction, unit in JOBS:
            fio_fig = figure(fio_device(dev, fargs, args.runtime, fio_size), direction, unit)
            srv = serve(dev, sock, ["--member-cache", "direct"])
            try:
                rk_fig, _ = benchlib.run_job(f"nbd+unix:///?socket={sock}",
                                             (name, fargs, direction, unit), args.runtime,
                                             fio_size, srv)
            finally:
                srv.stop()
            srv = serve_qemu_nbd(dev, sock)
            try:
                qemu_fig, _ = benchlib.run_job(f"nbd+unix:///?socket={sock}",
                                               (name, fargs, direction, unit), args.runtime,
                                               fio_size, srv)
            finally:
                srv.stop()
            rows.append((name, unit, fio_fig, rk_fig, qemu_fig))
            print(f"{name}: fio direct {fio_fig:.0f} {unit}, raidkit {rk_fig:.0f} {unit}, "
                  f"qemu-nbd {qemu_fig:.0f} {unit}", file=sys.stderr)

        memory = []
        for mode in ("buffered", "direct"):
            subprocess.run(["sync"], check=True)
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")
            cached0, dev0 = meminfo_cached(), cached_bytes(dev)
            srv = serve(dev, sock, ["--member-cache", mode])
            try:
                benchlib.fio(f"nbd+unix:///?socket={sock}", ["--rw=write", "--bs=1M",
                                                              "--iodepth=16"], 0, written, [])
                cached1, dev1 = meminfo_cached(), cached_bytes(dev)
                rss = srv.peak_rss_bytes()
            finally:
                srv.stop()
            memory.append((mode, (cached1 - cached0) / MIB, (dev1 - dev0) / MIB, rss / MIB))
            print(f"{mode}: Cached +{(cached1 - cached0) / MIB:.0f} MiB, device pages "
                  f"+{(dev1 - dev0) / MIB:.0f} MiB, raidkit peak RSS {rss / MIB:.0f} MiB",
                  file=sys.stderr)
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
        backing.unlink(missing_ok=True)
        os.rmdir(work)

    print(f"Run {date}, commit {commit}; load average at start {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} on {os.cpu_count()} CPUs; loop device over a {args.size} file on "
          f"{args.dir}, direct-io on; fio {args.runtime} s per job over the first half.\n")
    print("| job | fio direct on the device | raidkit linear (direct member) | ratio | "
          "qemu-nbd --cache=none (reference) | its ratio | raidkit / qemu-nbd |")
    print("|---|---|---|---|---|---|---|")
    for name, unit, fio_fig, rk_fig, qemu_fig in rows:
        print(f"| {name} | {fio_fig:,.0f} {unit} | {rk_fig:,.0f} {unit} | "
              f"{rk_fig / fio_fig:.2f}× | {qemu_fig:,.0f} {unit} | {qemu_fig / fio_fig:.2f}× | "
              f"{rk_fig / qemu_fig:.2f}× |")
    print(f"\n{written // MIB} MiB written through raidkit linear (1 MiB writes, depth 16):\n")
    print("| member cache | page cache growth (/proc/meminfo Cached) | "
          "the device's own pages (mincore) | raidkit peak RSS |")
    print("|---|---|---|---|")
    for mode, cached, devpages, rss in memory:
        print(f"| {mode} | {cached:+,.0f} MiB | {devpages:+,.0f} MiB | {rss:,.0f} MiB |")


if __name__ == "__main__":
    main()
