#!/usr/bin/env bash
# Journal benchmark (issue 5): 4 KiB random writes at queue depth 1, each followed by a flush
# (fio --fsync=1 → NBD FLUSH), against `raidkit serve` of a RAID 5 of 4 files on disk:
# no journal vs a write-through vs a write-back journal on a RAM-backed file (/dev/shm), standing
# in for a fast durable device (--allow-volatile-journal: a power cut would empty it; never do
# this with data).
# Prints one line per configuration: IOPS and mean/p50/p99 completion latency of the writes
# plus the mean flush latency (the client waits for both).
#
# Usage: bench/journal-latency.sh [RAIDKIT_BINARY] [SECONDS]
#   DIR=/var/tmp/... to put the member files elsewhere (default: a temp dir under /var/tmp).
set -euo pipefail
BIN=${1:-target/release/raidkit}
SECS=${2:-15}
DIR=${DIR:-$(mktemp -d /var/tmp/raidkit-journal-bench.XXXXXX)}
SHM=$(mktemp -d /dev/shm/raidkit-journal-bench.XXXXXX)
PID=
cleanup() {
    [[ -n "$PID" ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
    rm -rf "$DIR" "$SHM"
}
trap cleanup EXIT

run() {
    local name=$1 mode=$2
    rm -f "$DIR"/m* "$SHM"/journal "$DIR"/sock
    local jargs=()
    [[ "$mode" != none ]] && jargs=(--journal "$SHM/journal" --journal-size 256M --journal-mode "$mode" --allow-volatile-journal)
    "$BIN" create -l 5 -c 64K -s 1G "${jargs[@]}" "$DIR"/m0 "$DIR"/m1 "$DIR"/m2 "$DIR"/m3 >/dev/null
    local sargs=()
    [[ "$mode" != none ]] && sargs=(--journal "$SHM/journal" --allow-volatile-journal)
    "$BIN" serve --unix "$DIR/sock" "${sargs[@]}" "$DIR"/m0 "$DIR"/m1 "$DIR"/m2 "$DIR"/m3 \
        >"$DIR/serve.out" 2>"$DIR/serve.err" &
    PID=$!
    for _ in $(seq 100); do [[ -S "$DIR/sock" ]] && break; sleep 0.1; done
    fio --name="$name" --ioengine=nbd --uri="nbd+unix:///?socket=$DIR/sock" \
        --rw=randwrite --bs=4k --iodepth=1 --fsync=1 --size=1G --time_based \
        --runtime="$SECS" --randseed=42 --output-format=json >"$DIR/$name.json"
    kill "$PID"; wait "$PID" || true; PID=
    python3 - "$DIR/$name.json" "$name" <<'PY'
import json, sys
text = open(sys.argv[1]).read()  # fio's nbd engine prints a line before the JSON
job = json.loads(text[text.index("{"):])["jobs"][0]
w = job["write"]; s = job.get("sync", {})
clat = w["clat_ns"]; pct = clat.get("percentile", {})
sync_mean = s.get("lat_ns", {}).get("mean", 0) / 1000
print(f"{sys.argv[2]:14s} iops {w['iops']:8.0f}  write mean {clat['mean']/1000:7.1f} us"
      f"  p50 {pct.get('50.000000', 0)/1000:7.1f} us  p99 {pct.get('99.000000', 0)/1000:8.1f} us"
      f"  flush mean {sync_mean:7.1f} us  write+flush {clat['mean']/1000 + sync_mean:7.1f} us")
PY
}

run no-journal none
run write-through write-through
run write-back write-back
