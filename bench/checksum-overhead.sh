#!/usr/bin/env bash
# Block checksums' overhead (issue 15): the same array with and without `create --checksum`,
# measured in one run, interleaved (plain, checksummed, plain, checksummed, ...), over NBD with
# fio's nbd engine on a Unix socket, the read cache off (every read is checked):
# 4 KiB random write and read at QD 16, 1 MiB sequential write and read at QD 4.
#
#   bench/checksum-overhead.sh [LEVEL] [ROUNDS]    (default: 5 2)
#
# Members are files in /dev/shm (RAM-backed, so the array's own CPU cost shows, not a disk's),
# 3 x 512 MiB. Prints one line per run and the median per workload, with the load average.
set -euo pipefail
LEVEL=${1:-5}
ROUNDS=${2:-2}
BIN=${RAIDKIT_BIN:-target/release/raidkit}
DIR=$(mktemp -d /dev/shm/rk-sum.XXXXXX)
trap 'kill $SERVE 2>/dev/null || true; rm -rf "$DIR"' EXIT
SERVE=
RUNTIME=${RUNTIME:-5}

serve() { # $1: with checksums (1) or not (0)
    rm -f "$DIR"/m* "$DIR"/sock
    local extra=()
    [ "$1" = 1 ] && extra=(--checksum crc32c)
    "$BIN" create -l "$LEVEL" -c 64K -s 512M -n bench "${extra[@]}" "$DIR"/m0 "$DIR"/m1 "$DIR"/m2 >/dev/null
    "$BIN" serve --unix "$DIR/sock" --cache-size 0 "$DIR"/m0 "$DIR"/m1 "$DIR"/m2 >"$DIR/serve.out" 2>"$DIR/serve.err" &
    SERVE=$!
    for _ in $(seq 100); do [ -S "$DIR/sock" ] && break; sleep 0.1; done
    # Fill the array so reads read written blocks.
    fio --name=fill --ioengine=nbd --uri="nbd+unix:///?socket=$DIR/sock" --rw=write --bs=1M \
        --iodepth=4 --size=768M >/dev/null 2>&1
}

stop() { kill "$SERVE"; wait "$SERVE" || true; SERVE=; }

job() { # name rw bs qd -> MB/s
    fio --name="$1" --ioengine=nbd --uri="nbd+unix:///?socket=$DIR/sock" --rw="$2" --bs="$3" \
        --iodepth="$4" --size=768M --time_based --runtime="$RUNTIME" --randseed=42 \
        --output-format=json | sed -n "/^{/,\$p" | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
print(round((j["read"]["bw_bytes"] + j["write"]["bw_bytes"]) / 1e6, 1))'
}

declare -A RES
WORKLOADS=("randwrite 4k 16" "randread 4k 16" "write 1M 4" "read 1M 4")
for round in $(seq "$ROUNDS"); do
    for sum in 0 1; do
        serve $sum
        for w in "${WORKLOADS[@]}"; do
            set -- $w
            mbs=$(job "$1-$2" "$1" "$2" "$3")
            RES["$1 $2 $sum"]+="$mbs "
            echo "round $round checksum=$sum $1 $2 QD$3: $mbs MB/s (load $(cut -d' ' -f1-3 /proc/loadavg))"
        done
        stop
    done
done
echo "medians (RAID $LEVEL of 3 x 512 MiB /dev/shm files, --cache-size 0):"
for w in "${WORKLOADS[@]}"; do
    set -- $w
    python3 - "$1 $2" "${RES["$1 $2 0"]}" "${RES["$1 $2 1"]}" <<'PY'
import statistics, sys
name, plain, summed = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
p = statistics.median(map(float, plain)); s = statistics.median(map(float, summed))
print(f"  {name}: plain {p:.1f} MB/s, checksums {s:.1f} MB/s, ratio {s / p:.2f}x")
PY
done
echo "load average at the end: $(cat /proc/loadavg)"
