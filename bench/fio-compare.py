#!/usr/bin/env python3
"""Compare `raidkit serve` with nbdkit and qemu-nbd on the same backing, using the same fio jobs.

Jobs (fio's nbd engine over a Unix socket; each time-based, --runtime seconds after a 1 s ramp, on
a working set prefilled sequentially):
  seq-write  1 MiB sequential write, iodepth 16      (MB/s)
  seq-read   1 MiB sequential read,  iodepth 16      (MB/s)
  rand-read  4 KiB random read,      iodepth 32      (IOPS)
  rand-write 4 KiB random write,     iodepth 32      (IOPS)

Configurations (raidkit vs the references):
  linear-file   single-member linear on a file   vs nbdkit file / qemu-nbd on one file
  linear-ram    single-member linear on mem:     vs nbdkit memory / qemu-nbd on a /dev/shm file
  raid0-ram4    RAID 0 over 4 mem: members       vs nbdkit memory / qemu-nbd on a /dev/shm file
  raid5-file4   RAID 5 over 4 files              vs nbdkit file / qemu-nbd on a single file
                (the goal there is 1 MiB sequential read; all jobs are measured)

All servers are up at once and each job runs --rounds times in turn on every server (nbdkit,
qemu-nbd, raidkit, nbdkit, ...), so load from elsewhere falls on all alike; the tables give the
median of the rounds. File-backed writes depend on when the kernel writes back dirty pages, which
moves a single figure by up to 2x: use several rounds.

Prints markdown tables (medians, raidkit/reference ratios, server CPU time per request, peak
server memory = VmHWM) ready to paste into docs/PERFORMANCE.md. `--json OUT` also writes the
figures as a results file, `--plot DIR` grouped bar charts (SVG and PNG, one panel per job, one
bar per server, ratios annotated; bench/plot.py, which re-plots a results file).

CPU per request: the server's utime+stime (/proc/PID/stat, all its threads, dead ones included)
over the whole fio run (ramp included) divided by the requests of that run (fio's total_ios, scaled
by (ramp + runtime) / runtime for the ramp). On 2 shared cores this decides throughput, and
unlike MB/s or IOPS it is barely moved by load from other processes.

Usage: bench/fio-compare.py [--runtime 10] [--rounds 3] [--size 1G] [--dir /var/tmp/raidkit-bench]
                            [--raidkit target/release/raidkit] [--configs linear-file,raid0-ram4]
                            [--jobs rand-read,seq-write] [--references nbdkit,qemu-nbd]
                            [--raidkit-arg=--cache-size=0] [--baseline OLD/raidkit]
                            [--json OUT.json] [--plot DIR]

--numjobs N runs each fio job as N fio jobs, each with its own NBD connection (fio's nbd engine
opens one per job), figures summed (group_reporting): multi-connection scaling against the
references'. Two nbdcopy jobs copy the working set over nbdcopy's default 4 connections (64
requests of 256 KiB in flight): nbdcopy-read (the export to null:) and nbdcopy-write (a file of
random bytes in /dev/shm to the export); MB/s from the wall time, CPU per 256 KiB request.

--baseline OLD/raidkit adds an earlier raidkit build as one more reference ("baseline"), on
the same configuration and members of its own: a change's before/after in one run.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchlib import (MIB, REPO, RESULTS_FORMAT, Proc, check_plotting, median, parse_size,
                      run_identity, run_job, save_results)

JOBS = [
    ("seq-write", ["--rw=write", "--bs=1m", "--iodepth=16"], "write", "MB/s"),
    ("seq-read", ["--rw=read", "--bs=1m", "--iodepth=16"], "read", "MB/s"),
    ("rand-read", ["--rw=randread", "--bs=4k", "--iodepth=32"], "read", "IOPS"),
    ("rand-write", ["--rw=randwrite", "--bs=4k", "--iodepth=32"], "write", "IOPS"),
]
NBDCOPY_JOBS = [
    ("nbdcopy-read", [], "read", "MB/s"),
    ("nbdcopy-write", [], "write", "MB/s"),
]
NBDCOPY_REQUEST = 256 << 10
JOB_DESCRIPTIONS = {
    "nbdcopy-read": "nbdcopy of the working set to null:, 4 connections",
    "nbdcopy-write": "nbdcopy of random bytes to the export, 4 connections",
    "seq-write": "1 MiB sequential writes, queue depth 16",
    "seq-read": "1 MiB sequential reads, queue depth 16",
    "rand-read": "4 KiB random reads, queue depth 32",
    "rand-write": "4 KiB random writes, queue depth 32",
}

# name -> (raidkit level, member specs kind, member count, reference kind)
CONFIGS = {
    "linear-file": ("linear", "file", 1, "file"),
    "linear-ram": ("linear", "mem", 1, "memory"),
    "raid0-ram4": ("0", "mem", 4, "memory"),
    "raid5-file4": ("5", "file", 4, "file"),
}


def start_raidkit(args, config, workdir, sock, binary=None, name="raidkit"):
    level, kind, count, _ = CONFIGS[config]
    per_member = args.size_bytes if level == "linear" else args.size_bytes // (count - (level == "5"))
    # A little more than the working set, for the superblock area.
    per_member += 64 * MIB
    if kind == "mem":
        members = [f"mem:{per_member}"] * count
    else:
        members = [str(workdir / f"{config}-{name}-member{i}.img") for i in range(count)]
        for m in members:
            if os.path.exists(m):
                os.unlink(m)
    cmd = [binary or args.raidkit, "serve", "--create", "--level", level, "--size", str(per_member),
           "--name", config, "--unix", sock, *args.raidkit_arg, *members]
    return Proc(cmd, sock, ready_line="raidkit: serving"), f"nbd+unix:///{config}?socket={sock}"


def reference_image(args, config, workdir, name):
    """A fresh sparse image of the working set (+64 MiB) for a reference server: in the work
    directory for file configurations, in /dev/shm (RAM) for the others."""
    kind = CONFIGS[config][3]
    folder = workdir if kind == "file" else Path("/dev/shm")
    image = folder / f"raidkit-bench-{config}-{name}.img"
    if image.exists():
        image.unlink()
    with open(image, "wb") as f:
        f.truncate(args.size_bytes + 64 * MIB)
    return image


def start_nbdkit(args, config, workdir, sock):
    kind = CONFIGS[config][3]
    if kind == "memory":
        plugin = ["memory", str(args.size_bytes + 64 * MIB)]
    else:
        plugin = ["file", str(reference_image(args, config, workdir, "nbdkit"))]
    cmd = ["nbdkit", "--foreground", "--unix", sock, *plugin]
    return Proc(cmd, sock), f"nbd+unix:///?socket={sock}"


def start_qemu_nbd(args, config, workdir, sock):
    image = reference_image(args, config, workdir, "qemu-nbd")
    # Page cache on (as nbdkit file and raidkit's file members), thread pool I/O, and enough
    # shared clients for fio plus the prefill.
    cmd = ["qemu-nbd", "--format=raw", "--persistent", "--shared=8", "--cache=writeback",
           "--aio=threads", f"--socket={sock}", str(image)]
    return Proc(cmd, sock), f"nbd+unix:///?socket={sock}"


def start_baseline(args, config, workdir, sock):
    """An earlier raidkit build (--baseline) on the same configuration: before/after figures
    of a change, measured in one run."""
    return start_raidkit(args, config, workdir, sock, binary=args.baseline, name="baseline")


ALL_JOBS = JOBS + NBDCOPY_JOBS

STARTERS = {"nbdkit": start_nbdkit, "qemu-nbd": start_qemu_nbd, "baseline": start_baseline}


def nbdcopy_source(args):
    """A file of random bytes, the working set's size, in /dev/shm (zeroes would go as zero
    requests), made once per run."""
    src = Path("/dev/shm") / "raidkit-bench-nbdcopy-source.img"
    if not src.exists() or src.stat().st_size != args.size_bytes:
        with open(src, "wb") as f, open("/dev/urandom", "rb") as r:
            left = args.size_bytes
            while left:
                n = min(left, 8 * MIB)
                f.write(r.read(n))
                left -= n
    return src


def run_nbdcopy(args, uri, job, proc):
    """One nbdcopy job: (MB/s, server CPU µs per 256 KiB request)."""
    name = job[0]
    if name == "nbdcopy-read":
        cmd = ["nbdcopy", uri, "null:"]
    else:
        cmd = ["nbdcopy", str(nbdcopy_source(args)), uri]
    cpu0 = proc.cpu_seconds()
    start = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    took = time.monotonic() - start
    cpu1 = proc.cpu_seconds()
    # Reads copy the whole export; writes the source file.
    moved = args.size_bytes
    if name == "nbdcopy-read":
        moved = int(subprocess.run(["nbdinfo", "--size", uri], check=True, capture_output=True,
                                   text=True).stdout)
    cpu = None
    if cpu0 is not None and cpu1 is not None:
        cpu = (cpu1 - cpu0) * 1e6 / (moved / NBDCOPY_REQUEST)
    return moved / took / 1e6, cpu


def measure(args, config, workdir, have_raidkit):
    """Every server up at once; each job runs round by round on each server in turn, so that
    load from elsewhere falls on all alike. Returns ({job: {server: (figure, cpu)}}, peaks)."""
    print(f"== {config}", file=sys.stderr)
    servers = {}
    try:
        for name in args.references:
            servers[name] = STARTERS[name](args, config, workdir, str(workdir / f"{name}.sock"))
        if have_raidkit:
            servers["raidkit"] = start_raidkit(args, config, workdir,
                                               str(workdir / "raidkit.sock"))
        prefill = ("prefill", ["--rw=write", "--bs=1m", "--iodepth=16"], "write", "MB/s")
        for _, uri in servers.values():
            run_job(uri, prefill, 0, args.size)
        results = {}
        for job in [j for j in ALL_JOBS if j[0] in args.jobs]:
            runs = {name: [] for name in servers}
            for _ in range(args.rounds):
                for name, (proc, uri) in servers.items():
                    if job[0].startswith("nbdcopy-"):
                        runs[name].append(run_nbdcopy(args, uri, job, proc))
                        continue
                    many = job
                    if args.numjobs > 1:
                        many = (job[0], [*job[1], f"--numjobs={args.numjobs}",
                                         "--group_reporting"], *job[2:])
                    runs[name].append(run_job(uri, many, args.runtime, args.size, proc))
            results[job[0]] = {name: (median(f for f, _ in r), median(c for _, c in r))
                               for name, r in runs.items()}
            line = "   ".join(f"{name} {fig:12.1f} ({cpu or 0:6.1f} us/req)"
                              for name, (fig, cpu) in results[job[0]].items())
            print(f"    {job[0]:<10} {line} {job[3]}   load {os.getloadavg()[0]:.1f}",
                  file=sys.stderr)
        peaks = {name: proc.peak_rss_bytes() for name, (proc, _) in servers.items()}
    finally:
        codes = {name: proc.stop() for name, (proc, _) in servers.items()}
        for f in Path("/dev/shm").glob(f"raidkit-bench-{config}-*.img"):
            f.unlink()
    for name in ("raidkit", "baseline"):
        if codes.get(name, 0) != 0:
            raise RuntimeError(f"{name} serve exited {codes[name]} after SIGTERM: "
                               f"{''.join(servers[name][0].lines)}")
    return results, peaks


def fmt(value, unit):
    return f"{value:,.0f}"


def us(value):
    return f"{value:,.1f}" if value is not None else "n/a"


def print_tables(rows, peaks, args):
    refs = args.references
    print(f"fio nbd engine over a Unix socket, {args.numjobs} connection(s) per fio job; "
          f"working set {args.size}; {args.runtime} s per job "
          f"(+1 s ramp) after a sequential prefill; median of {args.rounds} rounds, each job "
          "run in turn on every server, all servers up. CPU = server CPU time (user+system, all "
          "threads) per request, in microseconds.\n")
    head = ["configuration", "job", "unit", "raidkit", *refs,
            *[f"ratio vs {r}" for r in refs], "CPU µs/req raidkit", *[f"CPU {r}" for r in refs]]
    print("| " + " | ".join(head) + " |")
    print("|---|---|---|" + "---:|" * (len(head) - 3))
    for config, job, unit, result in rows:
        ours, ours_cpu = result.get("raidkit", (None, None))
        cells = [config, job, unit, fmt(ours, unit) if ours is not None else "n/a"]
        cells += [fmt(result[r][0], unit) for r in refs]
        cells += [f"{ours / result[r][0]:.2f}" if ours is not None and result[r][0] else "n/a"
                  for r in refs]
        cells += [us(ours_cpu)] + [us(result[r][1]) for r in refs]
        print("| " + " | ".join(cells) + " |")
    print("\n| configuration | " + " | ".join(f"{n} peak RSS (VmHWM)"
                                               for n in ["raidkit", *refs]) + " |")
    print("|---|" + "---:|" * (len(refs) + 1))
    for config, by_server in peaks.items():
        mib = lambda b: f"{b / MIB:,.0f} MiB" if b else "n/a"  # noqa: E731
        print(f"| {config} | " + " | ".join(mib(by_server.get(n))
                                             for n in ["raidkit", *refs]) + " |")


def results_file(rows, peaks, args, servers, date, commit):
    """The run as a results file (bench/plot.py's input)."""
    return {
        "format": RESULTS_FORMAT,
        "bench": "fio-compare",
        "date": date,
        "commit": commit,
        "title": "raidkit serve against " + " and ".join(r for r in servers if r != "raidkit"),
        "setup": (f"fio nbd engine over a Unix socket, {args.size} working set, {args.runtime} s "
                  f"per job after a 1 s ramp, median of {args.rounds} round(s); "
                  f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end."),
        "raidkit_args": args.raidkit_arg,
        "job_descriptions": {j: d for j, d in JOB_DESCRIPTIONS.items() if j in args.jobs},
        "servers": servers,
        "results": [{"config": config, "job": job, "unit": unit,
                     "figures": {name: fig for name, (fig, _) in result.items()},
                     "cpu_us": {name: cpu for name, (_, cpu) in result.items()}}
                    for config, job, unit, result in rows],
        "peak_rss_mib": {config: {name: round(b / MIB) if b else None
                                  for name, b in by_server.items()}
                         for config, by_server in peaks.items()},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", type=int, default=10, help="seconds per job (default 10)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each job per server; the median is reported (default 3)")
    parser.add_argument("--references", default="nbdkit,qemu-nbd",
                        help="reference servers, comma-separated (default nbdkit,qemu-nbd)")
    parser.add_argument("--size", default="1G", help="working set per configuration (default 1G)")
    parser.add_argument("--dir", default="/var/tmp/raidkit-bench", help="backing files go here")
    parser.add_argument("--raidkit", default=os.environ.get(
        "RAIDKIT_BIN", str(REPO / "target" / "release" / "raidkit")))
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset")
    parser.add_argument("--jobs", default=",".join(j[0] for j in JOBS),
                        help="comma-separated subset of the jobs (also nbdcopy-read, "
                        "nbdcopy-write)")
    parser.add_argument("--numjobs", type=int, default=1,
                        help="fio jobs (each its own NBD connection) per fio run (default 1)")
    parser.add_argument("--raidkit-arg", action="append", default=[], metavar="ARG",
                        help="extra argument for raidkit serve (repeatable), e.g. "
                        "--raidkit-arg=--cache-size=0")
    parser.add_argument("--baseline", metavar="RAIDKIT",
                        help="an earlier raidkit binary, measured as one more reference "
                        "(\"baseline\"): the ratio column then compares the two builds")
    parser.add_argument("--json", metavar="OUT", help="also write the figures to this results "
                        "file (bench/plot.py re-plots it)")
    parser.add_argument("--plot", metavar="DIR", help="write SVG and PNG charts (and the "
                        "results file, unless --json names one) into DIR")
    args = parser.parse_args()
    check_plotting(args.plot)
    args.size_bytes = parse_size(args.size)
    configs = [c for c in args.configs.split(",") if c]
    args.jobs = [j for j in args.jobs.split(",") if j]
    if any(j not in [job[0] for job in ALL_JOBS] for j in args.jobs):
        parser.error(f"unknown jobs in {args.jobs}; known: {[job[0] for job in ALL_JOBS]}")
    if args.numjobs < 1:
        parser.error("--numjobs must be at least 1")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configurations: {unknown}; known: {list(CONFIGS)}")
    args.references = [r for r in args.references.split(",") if r]
    if args.baseline:
        if not os.access(args.baseline, os.X_OK):
            parser.error(f"--baseline {args.baseline} is not an executable")
        args.references.append("baseline")
    if any(r not in STARTERS for r in args.references) or args.rounds < 1:
        parser.error(f"references must be among {list(STARTERS)}; rounds at least 1")
    nbdcopy = ["nbdcopy", "nbdinfo"] * any(j.startswith("nbdcopy-") for j in args.jobs)
    for tool in ("fio", *nbdcopy, *[r for r in args.references if r != "baseline"]):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not installed (scripts/install-deps.sh installs it)")
    have_raidkit = os.access(args.raidkit, os.X_OK)
    if not have_raidkit:
        print(f"warning: {args.raidkit} not found; measuring the reference only", file=sys.stderr)
    workdir = Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    date, commit = run_identity()

    rows, peaks = [], {}
    for config in configs:
        results, peaks[config] = measure(args, config, workdir, have_raidkit)
        for job, _, _, unit in [j for j in ALL_JOBS if j[0] in args.jobs]:
            rows.append((config, job, unit, results[job]))
        for f in workdir.glob(f"{config}-*.img"):
            f.unlink()
        for f in workdir.glob(f"raidkit-bench-{config}-*.img"):
            f.unlink()
    (Path("/dev/shm") / "raidkit-bench-nbdcopy-source.img").unlink(missing_ok=True)
    print_tables(rows, peaks, args)
    if args.json or args.plot:
        servers = ["raidkit"] * have_raidkit + args.references
        data = results_file(rows, peaks, args, servers, date, commit)
        stem = f"fio-compare-{date[:10]}-{date[11:13]}{date[14:16]}-{commit}"
        save_results(data, args.json, args.plot, stem)


if __name__ == "__main__":
    main()
