#!/usr/bin/env python3
"""Rebuild time of a 10 %-full array against a full one (issue 15, the used-regions map).

A RAID 5 of four file members in /dev/shm (RAM: the figure is raidkit's work, not a disk's),
served by `raidkit serve` with an admin socket; a share of the array is written through NBD
(python libnbd, 4 MiB requests) as extents of 48 MiB at random 48 MiB-aligned places (8 used-map
regions of 6 MiB each: files a filesystem allocates contiguously; scattered small writes mark
more regions used), a member is failed, a blank spare is added and `raidkit add --wait` is
timed with the speed limit out of the way. Cases:

- `map 10 %`: the default array (used-regions map), 10 % written;
- `map 100 %`: the same array, every byte written (the map marks everything used);
- `no map 10 %`: `create --no-used-map`, 10 % written (what raidkit did before: a full copy).

Each case runs ROUNDS times (interleaved); the medians and their ratios are printed as a
markdown table with the load average (docs/PERFORMANCE.md "Rebuild of a partly used array").

Usage: bench/rebuild-used.py [--member-mib 512] [--rounds 3] [--bin target/release/raidkit]
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import nbd

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
CASES = [("map 10 %", True, 0.10), ("map 100 %", True, 1.0), ("no map 10 %", False, 0.10)]


def load():
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def one(binary, root, member_mib, with_map, share, seed):
    d = Path(tempfile.mkdtemp(dir=root))
    try:
        members = [d / f"m{i}.img" for i in range(4)]
        spare = d / "spare.img"
        flags = [] if with_map else ["--no-used-map"]
        run([binary, "create", "-l", "5", "-s", f"{member_mib}M", "-n", "bench", *flags,
             *map(str, members)])
        sock, admin = d / "nbd.sock", d / "admin.sock"
        proc = subprocess.Popen([binary, "serve", "--unix", str(sock), "--admin", str(admin),
                                 "--speed-max", "100G", "--speed-min", "100G",
                                 *map(str, members)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert "serving" in proc.stdout.readline()
        try:
            h = nbd.NBD()
            h.connect_uri(f"nbd+unix:///?socket={sock}")
            size = h.get_size()
            extent, piece = 48 * MIB, 4 * MIB
            slots = list(range(size // extent))
            random.Random(seed).shuffle(slots)
            buf = os.urandom(piece)
            for s in sorted(slots[:round(len(slots) * share)]):
                for at in range(s * extent, (s + 1) * extent, piece):
                    h.pwrite(buf, at)
            if share >= 1.0:  # every byte, the tail past the last whole extent too
                for at in range(size // extent * extent, size, piece):
                    h.pwrite(buf[:min(piece, size - at)], at)
            h.flush()
            h.shutdown()
            cli = [binary, "--admin", str(admin)]
            before = json.loads(run([*cli[:1], "status", "--json", *cli[1:]]).stdout)
            used = (before.get("used_map") or {}).get("used_bytes", size)
            run([binary, "fail", str(members[1]), "--admin", str(admin)])
            spare.write_bytes(b"")
            os.truncate(spare, members[0].stat().st_size)
            started = time.monotonic()
            run([binary, "add", str(spare), "--wait", "--admin", str(admin)], timeout=3600)
            took = time.monotonic() - started
            status = json.loads(run([*cli[:1], "status", "--json", *cli[1:]]).stdout)
            states = [m["state"] for m in status["members"][:4]]
            assert states == ["active"] * 4, status
            return took, size, used
        finally:
            proc.terminate()
            proc.wait(timeout=120)
    finally:
        shutil.rmtree(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--member-mib", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bin", default=str(REPO / "target/release/raidkit"))
    ap.add_argument("--dir", default="/dev/shm")
    args = ap.parse_args()
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores; "
          f"load average: {load()}")
    times = {name: [] for name, _, _ in CASES}
    size = 0
    for r in range(args.rounds):
        for name, with_map, share in CASES:
            took, size, used = one(args.bin, args.dir, args.member_mib, with_map, share, seed=r)
            times[name].append(took)
            print(f"  round {r} {name}: {took:.2f} s, used {used // MIB} MiB of {size // MIB} "
                  f"(load {load()})", flush=True)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"\nRAID 5 of 4 x {args.member_mib} MiB RAM-file members ({size // MIB} MiB array), "
          f"medians of {args.rounds}:\n")
    print("| case | rebuild s | vs map 100 % | vs no map |")
    print("|---|---|---|---|")
    for name, _, _ in CASES:
        print(f"| {name} | {med[name]:.2f} | {med[name] / med['map 100 %']:.2f} | "
              f"{med[name] / med['no map 10 %']:.2f} |")
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    main()
