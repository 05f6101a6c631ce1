#!/usr/bin/env python3
"""I/O amplification per level and pattern, measured from raidkit's own counters (issue 13).

For each level (RAID 1 x2, RAID 10 x4, RAID 5 x4, RAID 6 x4; 64 KiB chunks; RAM members, read
cache off), with no journal and with a write-back journal (a RAM file, --allow-volatile-journal),
fio writes a fixed amount with each pattern (4 KiB random, 64 KiB random, 1 MiB sequential; the
nbd engine, iodepth 16). GET /v1/stats is read before and after (after the write-back journal
has drained, so its applies are counted); the table gives, per client write, the member reads
and writes (operations; adjacent ones of a member merge into one) and the member bytes read and
written per client byte written. Journal writes are not member I/O (docs/PERFORMANCE.md
"Journal traffic per client byte" has them).

Usage: bench/amplification.py [--raidkit target/release/raidkit] [--dir /var/tmp/raidkit-amp]
Prints a markdown table.
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from benchlib import MIB, REPO, Proc, fio

LEVELS = [("1", 2), ("10", 4), ("5", 4), ("6", 4)]
PATTERNS = [
    ("4 KiB random write", ["--rw=randwrite", "--bs=4k", "--iodepth=16"], 64 * MIB),
    ("64 KiB random write", ["--rw=randwrite", "--bs=64k", "--iodepth=16"], 256 * MIB),
    ("1 MiB sequential write", ["--rw=write", "--bs=1m", "--iodepth=16"], 256 * MIB),
]
ARRAY_BYTES = 512 * MIB


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("raidkit")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def get(admin, path):
    conn = UnixHTTP(admin)
    conn.request("GET", path)
    reply = conn.getresponse()
    body = json.loads(reply.read())
    assert reply.status == 200, body
    return body


def drained(admin, timeout_s=300):
    start = time.monotonic()
    while True:
        journal = get(admin, "/v1/status").get("journal")
        if not journal or not journal.get("unapplied_bytes"):
            return
        if time.monotonic() - start > timeout_s:
            raise RuntimeError("the write-back journal did not drain")
        time.sleep(0.1)


def totals(stats):
    members = stats["members"]
    return {
        "client_writes": stats["client"]["write"]["ops"],
        "client_bytes": stats["client"]["write"]["bytes"],
        "reads": sum(m["read"]["ops"] for m in members),
        "writes": sum(m["write"]["ops"] for m in members),
        "read_bytes": sum(m["read"]["bytes"] for m in members),
        "write_bytes": sum(m["write"]["bytes"] for m in members),
    }


def measure(args, workdir, level, count, journal):
    sock, admin = str(workdir / "nbd.sock"), str(workdir / "admin.sock")
    data = 1 if level == "1" else {"10": 2, "5": 3, "6": 2}[level]
    member = ARRAY_BYTES // data + 64 * MIB
    extra = []
    if journal:
        path = workdir / "journal.img"
        if path.exists():
            path.unlink()
        subprocess.run(["truncate", "-s", "256M", str(path)], check=True)
        extra = ["--journal", str(path), "--journal-mode", "write-back", "--allow-volatile-journal"]
    if os.path.exists(admin):
        os.unlink(admin)
    cmd = [args.raidkit, "serve", "--create", "--level", level, "--chunk", "64K", "--size",
           str(member), "--name", "amp", "--unix", sock, "--admin", admin, "--cache-size", "0",
           *extra, *[f"mem:{member}"] * count]
    server = Proc(cmd, sock, ready_line="raidkit: serving")
    rows = {}
    try:
        uri = f"nbd+unix:///amp?socket={sock}"
        for name, fio_args, amount in PATTERNS:
            before = totals(get(admin, "/v1/stats"))
            fio(uri, fio_args, 0, f"{ARRAY_BYTES}", [f"--io_size={amount}"])
            drained(admin)
            after = totals(get(admin, "/v1/stats"))
            d = {k: after[k] - before[k] for k in after}
            rows[name] = d
            print(f"  raid{level} x{count} {'write-back' if journal else 'no journal'} {name}: {d}",
                  file=sys.stderr)
    finally:
        server.stop()
    return rows


# What md does for the same pattern, from its documented algorithm (drivers/md/raid1.c, raid10.c,
# raid5.c handle_stripe_dirtying: read-modify-write or reconstruct-write, whichever pre-reads
# fewer 4 KiB pages, ties to reconstruct-write; stripe cache pages of 4 KiB), for the same member
# counts and a 64 KiB chunk, without a journal; per client write, in member reads + writes of
# 4 KiB pages (md issues one bio per page and the block layer merges adjacent ones, so its
# operation counts are not comparable: bytes are).
MD = {
    ("1", "4 KiB random write"): "0 + 2 × 4 KiB",
    ("10", "4 KiB random write"): "0 + 2 × 4 KiB",
    ("5", "4 KiB random write"): "2 × 4 KiB (rcw: the 2 other data; rmw also 2) + 2 × 4 KiB",
    ("6", "4 KiB random write"): "1 × 4 KiB (rcw: the other data) + 3 × 4 KiB",
    ("1", "64 KiB random write"): "0 + 2 × 64 KiB",
    ("10", "64 KiB random write"): "0 + 2 × 64 KiB",
    ("5", "64 KiB random write"): "2 × 64 KiB + 2 × 64 KiB",
    ("6", "64 KiB random write"): "1 × 64 KiB + 3 × 64 KiB",
    ("1", "1 MiB sequential write"): "0 + 2 × 1 MiB",
    ("10", "1 MiB sequential write"): "0 + 2 × 1 MiB",
    ("5", "1 MiB sequential write"): "≈ 0 (full stripes in the stripe cache) + 4/3 × 1 MiB",
    ("6", "1 MiB sequential write"): "≈ 0 (full stripes) + 2 × 1 MiB",
}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--raidkit", default=os.environ.get(
        "RAIDKIT_BIN", str(REPO / "target" / "release" / "raidkit")))
    parser.add_argument("--dir", default="/var/tmp/raidkit-amp")
    args = parser.parse_args()
    workdir = Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    print("| level | journal | pattern | member reads / client write | member writes / client "
          "write | bytes read / client byte | bytes written / client byte | md (documented "
          "algorithm, no journal): reads + writes per client write |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for level, count in LEVELS:
        for journal in (False, True):
            rows = measure(args, workdir, level, count, journal)
            for name, _, _ in PATTERNS:
                d = rows[name]
                w, b = d["client_writes"], d["client_bytes"]
                print(f"| RAID {level} ×{count} | {'write-back' if journal else 'none'} | {name} | "
                      f"{d['reads'] / w:.2f} | {d['writes'] / w:.2f} | {d['read_bytes'] / b:.2f} | "
                      f"{d['write_bytes'] / b:.2f} | {MD[(level, name)] if not journal else ''} |",
                      flush=True)


if __name__ == "__main__":
    main()
