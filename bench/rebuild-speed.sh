#!/bin/sh
# Rebuild speed against the raw write speed of the member being rebuilt, and degraded against
# healthy sequential reads, on members limited like disks: each member is its own
# `nbdkit --filter=blocksize --filter=rate memory` server (RATE_MBIT megabits/s for reads and for writes, 256 KiB pieces), used
# through raidkit's NBD member client. RAID 5 over 4 and RAID 6 over 5 members; prints a
# markdown table (docs/PERFORMANCE.md, "Degraded reads and rebuild").
#
# Usage: bench/rebuild-speed.sh [RATE_MBIT (400)] [MEMBER_MIB (256)]
set -eu
cd "$(dirname "$0")/.."
command -v nbdkit >/dev/null || { echo "rebuild-speed.sh: nbdkit not found (apt-get install nbdkit)" >&2; exit 1; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo run --quiet --release -p volume --example rebuild_bench -- "${1:-400}" "${2:-256}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
