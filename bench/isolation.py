#!/usr/bin/env python3
"""Does one array's load starve another? Read latency of array A (4 KiB random reads, queue
depth 4) while array B takes a flood of 1 MiB sequential writes (queue depth 16), against the
same with B idle — both arrays served by one `raidkit daemon`, and, for comparison, by two
`raidkit serve` processes (the isolation separate processes give) and by two `nbdkit file`
processes over one file each (the reference: no RAID work at all, so what the machine itself
gives — fio's flood and the kernel's copying compete for the same cores).

With the daemon's QoS (`latency_target_us` on A, none on B: a row of its own, `--latency-target-us`),
B is throttled while A's requests miss the target; the row prints what B was held back. Another
row caps B with `max_bandwidth` (`--b-max-bandwidth`, default 512M): what an operator who knows
which array floods gets.

With `nice = 19` on B (`--b-nice`), the daemon runs B's request threads at that niceness: the
kernel's scheduler gives them a small share of a core that A's threads want (a row of its own;
the rows that change the clients, marked "diagnostic", are not something raidkit can do: they
nice B's fio client, or pin A's and B's fio clients to different CPUs, to show how much of A's
tail is the clients' own competition for the cores).

Both arrays are RAID 5 over four sparse files in --dir (the page cache below: the figures are
CPU and scheduling bound, which is where one array can take from another on a small machine).
Every selected row's servers are started first; then each round runs every row (idle, then
flooded), the order of the rows reversed every other round, so the machine's drift and the
other engineers' load fall on all rows alike. The load average is printed after every row.

Usage: bench/isolation.py [--runtime 10] [--rounds 3] [--size 256M] [--dir /var/tmp/raidkit-iso]
                          [--latency-target-us 50] [--b-max-bandwidth 512M] [--b-nice 19]
                          [--only LABEL-PART[,LABEL-PART...]]   (=LABEL: exactly that row)
Prints a markdown table (p50/p99 read latency of A, the flooded/idle ratio, B's write rate);
the figures go in docs/PERFORMANCE.md ("Isolation between arrays").
"""

import argparse
import os
import shutil
import subprocess
import time
from pathlib import Path

from benchlib import REPO, Proc, fio, median, parse_size

READ_A = ["--rw=randread", "--bs=4k", "--iodepth=4"]
FLOOD_B = ["--rw=write", "--bs=1m", "--iodepth=16"]


def raidkit_bin():
    return os.environ.get("RAIDKIT_BIN", str(REPO / "target" / "release" / "raidkit"))


def create(dir_, name, size):
    files = [str(dir_ / f"{name}{i}") for i in range(4)]
    subprocess.run([raidkit_bin(), "create", "--level", "5", "--name", name, "--size", size,
                    "--force", *files], check=True, capture_output=True)
    return files


def latency_us(job, percentile):
    return job["read"]["clat_ns"]["percentile"][percentile] / 1000


def measure(uri_a, uri_b, runtime, size, flood, a_prefix=(), b_prefix=()):
    """One measurement of A's read latency; B flooded meanwhile when `flood`. The prefixes run
    A's and B's fio under another command (the diagnostic rows: `nice`, `taskset`)."""
    flooder = None
    if flood:
        cmd = [*b_prefix, "fio", "--name=flood", "--ioengine=nbd", f"--uri={uri_b}", f"--size={size}",
               "--time_based", f"--runtime={runtime + 4}", "--output-format=json", *FLOOD_B]
        flooder = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
    job = fio(uri_a, READ_A, runtime, size, [], prefix=a_prefix)
    b_mbs = None
    if flooder:
        out, err = flooder.communicate(timeout=runtime + 120)
        if flooder.returncode != 0:
            raise RuntimeError(f"flood fio failed: {err[-2000:]}")
        import json
        b_mbs = json.loads(out[out.index("{"):])["jobs"][0]["write"]["bw_bytes"] / 1e6
    return latency_us(job, "50.000000"), latency_us(job, "99.000000"), b_mbs


def daemon_setup(dir_, size, latency_target_us=None, b_max_bandwidth=None, b_nice=None):
    a, b = create(dir_, "a", size), create(dir_, "b", size)
    sock = dir_ / "nbd.sock"
    config = dir_ / "raidkit.toml"
    members = lambda files: "[" + ", ".join(f'"{f}"' for f in files) + "]"
    target = f"latency_target_us = {latency_target_us}\n" if latency_target_us else ""
    cap = f'max_bandwidth = "{b_max_bandwidth}"\n' if b_max_bandwidth else ""
    cap += f"nice = {b_nice}\n" if b_nice is not None else ""
    config.write_text(f'[daemon]\nunix = "{sock}"\nadmin = "{dir_}/admin.sock"\n\n'
                      f'[[array]]\nname = "a"\nmembers = {members(a)}\n{target}\n'
                      f'[[array]]\nname = "b"\nmembers = {members(b)}\n{cap}')
    proc = Proc([raidkit_bin(), "daemon", "--config", str(config)], str(sock),
                ready_line='serving "b"')
    uri = lambda name: f"nbd+unix:///{name}?socket={sock}"
    return [proc], uri("a"), uri("b")


def qos_of(dir_, name):
    """The daemon's QoS section of array `name` (None without a daemon)."""
    admin = dir_ / "admin.sock"
    if not admin.exists():
        return None
    out = subprocess.run([raidkit_bin(), "status", "--admin", str(admin), "--array", name,
                          "--json"], check=True, capture_output=True, text=True).stdout
    import json
    return json.loads(out)["qos"]


def separate_setup(dir_, size):
    a, b = create(dir_, "a", size), create(dir_, "b", size)
    procs, uris = [], []
    for name, files in (("a", a), ("b", b)):
        sock = dir_ / f"{name}.sock"
        procs.append(Proc([raidkit_bin(), "serve", "--unix", str(sock), *files], str(sock),
                          ready_line="raidkit: serving"))
        uris.append(f"nbd+unix:///{name}?socket={sock}")
    return procs, uris[0], uris[1]


def nbdkit_setup(dir_, size):
    procs, uris = [], []
    for name in ("a", "b"):
        image = dir_ / f"{name}.img"
        with open(image, "wb") as f:
            f.truncate(parse_size(size))
        sock = dir_ / f"{name}.sock"
        procs.append(Proc(["nbdkit", "--foreground", "--exit-with-parent", "--unix", str(sock),
                           "file", str(image)], str(sock)))
        uris.append(f"nbd+unix:///?socket={sock}")
    return procs, uris[0], uris[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="256M")
    parser.add_argument("--dir", default="/var/tmp/raidkit-iso")
    parser.add_argument("--latency-target-us", type=int, default=50,
                        help="A's latency_target_us in the QoS row (the server's time per "
                             "request, from admission to reply)")
    parser.add_argument("--b-max-bandwidth", default="512M",
                        help="B's max_bandwidth in the capped row (the operator's cap on the "
                             "flooding array)")
    parser.add_argument("--b-nice", type=int, default=19,
                        help="B's nice in the niced rows (its request threads' niceness)")
    parser.add_argument("--only", help="run only the rows whose label contains one of these "
                                       "comma-separated parts (=LABEL: that whole label)")
    args = parser.parse_args()
    target, nice = args.latency_target_us, args.b_nice
    b_client_niced = ["nice", "-n", "19"]
    # (label, setup, A's fio prefix, B's fio prefix)
    setups = (("one raidkit daemon", daemon_setup, (), ()),
              (f"one raidkit daemon, A latency_target_us = {target}",
               lambda d, s: daemon_setup(d, s, target), (), ()),
              (f"one raidkit daemon, B max_bandwidth = {args.b_max_bandwidth}",
               lambda d, s: daemon_setup(d, s, b_max_bandwidth=args.b_max_bandwidth), (), ()),
              (f"one raidkit daemon, B nice = {nice}",
               lambda d, s: daemon_setup(d, s, b_nice=nice), (), ()),
              ("one raidkit daemon, B's fio client at nice 19 (diagnostic)", daemon_setup, (),
               b_client_niced),
              (f"one raidkit daemon, B nice = {nice} and B's fio client at nice 19 (diagnostic)",
               lambda d, s: daemon_setup(d, s, b_nice=nice), (), b_client_niced),
              ("one raidkit daemon, A's fio client on CPU 0, B's on CPU 1 (diagnostic)",
               daemon_setup, ["taskset", "-c", "0"], ["taskset", "-c", "1"]),
              ("two raidkit serve processes", separate_setup, (), ()),
              ("two nbdkit file processes (reference)", nbdkit_setup, (), ()))
    wanted = args.only.split(",") if args.only else None
    # A part starting with "=" names a whole label ("=one raidkit daemon": that row alone).
    setups = [s for s in setups if wanted is None
              or any(s[0] == w[1:] if w.startswith("=") else w in s[0] for w in wanted)]
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} CPUs", flush=True)
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    running = []  # (label, dir, procs, uri_a, uri_b, a_prefix, b_prefix)
    try:
        for i, (label, setup, a_prefix, b_prefix) in enumerate(setups):
            dir_ = root / f"row{i}"
            dir_.mkdir(parents=True)
            procs, uri_a, uri_b = setup(dir_, args.size)
            running.append((label, dir_, procs, uri_a, uri_b, a_prefix, b_prefix))
            # A's data must be on its members for the reads to do real work.
            fio(uri_a, ["--rw=write", "--bs=1m", "--iodepth=16"], 0, args.size, [])
        results = {label: ([], []) for label, *_ in running}
        for r in range(args.rounds):
            order = running if r % 2 == 0 else running[::-1]
            for label, dir_, procs, uri_a, uri_b, a_prefix, b_prefix in order:
                idle, flooded = results[label]
                idle.append(measure(uri_a, uri_b, args.runtime, args.size, False,
                                    a_prefix, b_prefix))
                flooded.append(measure(uri_a, uri_b, args.runtime, args.size, True,
                                       a_prefix, b_prefix))
                print(f"  round {r + 1}, {label}: idle p99 {idle[-1][1]:.0f} us, "
                      f"flooded p99 {flooded[-1][1]:.0f} us "
                      f"({flooded[-1][1] / idle[-1][1]:.2f}x), B {flooded[-1][2]:.0f} MB/s, "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
        rows = []
        for label, dir_, *_ in running:
            qos_b = qos_of(dir_, "b")
            if qos_b and qos_b.get("throttle_level") is not None:
                qos_a = qos_of(dir_, "a")
                print(f"  {label}: B held back {qos_b['throttled_requests']} requests, "
                      f"{qos_b['throttled_us'] / 1e6:.1f} s, throttled further "
                      f"{qos_b['scale_downs']} times; A missed {qos_a['windows_missed']} "
                      f"windows", flush=True)
            idle, flooded = results[label]
            rows.append((label, median(i[0] for i in idle), median(i[1] for i in idle),
                         median(f[0] for f in flooded), median(f[1] for f in flooded),
                         median(f[2] for f in flooded)))
    finally:
        for _, _, procs, *_ in running:
            for p in procs:
                p.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print("| served by | A p50 idle (us) | A p99 idle (us) | A p50 B flooding (us) | "
          "A p99 B flooding (us) | p99 flooded / idle | B write (MB/s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, p50i, p99i, p50f, p99f, b in rows:
        print(f"| {label} | {p50i:.0f} | {p99i:.0f} | {p50f:.0f} | {p99f:.0f} | "
              f"{p99f / p99i:.2f} | {b:.0f} |")


if __name__ == "__main__":
    main()
