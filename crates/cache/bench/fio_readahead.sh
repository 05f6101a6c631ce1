#!/bin/sh
# Sequential 128 KiB reads at queue depth 1 through `raidkit serve` (fio's nbd engine) with
# no cache (--cache-size 0) and --read-ahead off, on and adaptive, over a RAID 5 of 4 members.
#
#   crates/cache/bench/fio_readahead.sh RAIDKIT_BIN [files|delay] [ARRAY_SIZE] [ROUNDS]
#
# files: 4 sparse files (page cache). delay: 4 nbdkit memory servers behind the delay filter
# (rdelay=1ms per read: a disk or network member). The array is filled once by fio, then
# read sequentially once per mode per round (modes interleaved); prints MB/s per pass.
set -eu
bin=$1
kind=${2:-files}
size=${3:-512M}
rounds=${4:-2}
dir=$(mktemp -d /tmp/raidkit-fio-ra.XXXXXX)
nbdkits=""
cleanup() {
    for pid in $nbdkits; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT

members=""
for i in 1 2 3 4; do
    if [ "$kind" = delay ]; then
        nbdkit --exit-with-parent -f -U "$dir/m$i.sock" --filter=delay memory 1G rdelay=1ms &
        nbdkits="$nbdkits $!"
        members="$members nbd+unix:///?socket=$dir/m$i.sock"
    else
        members="$members $dir/m$i"
    fi
done
sleep 1

# serve MODE [extra args...]: starts raidkit in the background, waits for its ready line.
serve() {
    ra_mode=$1
    shift
    rm -f "$dir/nbd.sock"
    "$bin" serve --unix "$dir/nbd.sock" --read-ahead "$ra_mode" "$@" $members >"$dir/out" 2>"$dir/err" &
    server=$!
    i=0
    until grep -q "serving" "$dir/out" 2>/dev/null; do
        i=$((i + 1))
        if [ $i -gt 300 ]; then cat "$dir/err"; exit 1; fi
        sleep 0.1
    done
}

stop() {
    kill -TERM "$server"
    wait "$server" || true
}

uri="nbd+unix:///?socket=$dir/nbd.sock"
serve off --create -l raid5 -s 1G --force
fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size="$size" \
    --output=/dev/null
stop

for round in $(seq 1 "$rounds"); do
    for mode in none off on adaptive; do
        if [ "$mode" = none ]; then serve off --cache-size 0; else serve "$mode"; fi
        mbps=$(fio --name=seq --ioengine=nbd --uri="$uri" --rw=read --bs=128k --iodepth=1 \
            --size="$size" --output-format=terse --terse-version=3 | awk -F';' '$1 == 3 {printf "%d", $7 * 0.001024 + 0.5}')
        stop
        echo "$kind round $round read-ahead $mode: $mbps MB/s"
    done
done
