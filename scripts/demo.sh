#!/usr/bin/env bash
# The README's first command: a 4-member RAID 5 on sparse files in ./demo, served over NBD.
#
#   ./scripts/demo.sh            create (first run) or reuse (later runs) ./demo/member{0..3}.img
#                                and serve them on TCP 127.0.0.1:10809 (or, with DEMO_UNIX=1,
#                                on the Unix socket ./demo/nbd.sock);
#                                Ctrl-C stops the server cleanly (flush, array marked clean).
#
# Environment: DEMO_DIR (./demo), DEMO_LEVEL (5), DEMO_MEMBERS (4), DEMO_SIZE (1G per member,
# sparse), DEMO_LISTEN (127.0.0.1:10809), DEMO_UNIX=1 (serve on ./demo/nbd.sock instead of TCP),
# SKIP_INSTALL=1 (do not install Debian packages).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${DEMO_DIR:-$ROOT/demo}
LEVEL=${DEMO_LEVEL:-5}
COUNT=${DEMO_MEMBERS:-4}
SIZE=${DEMO_SIZE:-1G}
LISTEN=${DEMO_LISTEN:-127.0.0.1:10809}
HOST=${LISTEN%:*}
PORT=${LISTEN##*:}
[[ -d $HOME/.cargo/bin ]] && export PATH=$HOME/.cargo/bin:$PATH

if [[ ${SKIP_INSTALL:-0} != 1 ]]; then
  ./scripts/install-deps.sh
  [[ -d $HOME/.cargo/bin ]] && export PATH=$HOME/.cargo/bin:$PATH
fi
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
BIN=$TARGET_DIR/release/raidkit
echo "demo: building raidkit (release)"
if ! cargo build --release -p raidkit; then
  [[ -x $BIN ]] || { echo "demo: the build failed and there is no $BIN" >&2; exit 1; }
  echo "demo: WARNING: the build failed; using the existing $BIN" >&2
fi

mkdir -p "$DIR"
SOCK=$DIR/nbd.sock
if [[ ${DEMO_UNIX:-0} == 1 ]]; then
  rm -f "$SOCK" # a stale socket from a killed run; raidkit will not bind over it
  LISTEN_ARGS=(--unix "$SOCK")
  URI="nbd+unix:///demo?socket=$SOCK"
else
  LISTEN_ARGS=(--listen "$LISTEN")
  URI="nbd://$HOST:$PORT/demo"
fi
MEMBERS=()
existing=0
for ((i = 0; i < COUNT; i++)); do
  MEMBERS+=("$DIR/member$i.img")
  [[ -e $DIR/member$i.img ]] && existing=$((existing + 1))
done

if ((existing == COUNT)); then
  echo "demo: reusing the array in $DIR"
  "$BIN" examine "${MEMBERS[@]}" || true
  ARGS=(serve "${LISTEN_ARGS[@]}" "${MEMBERS[@]}")
elif ((existing == 0)); then
  echo "demo: creating a RAID $LEVEL of $COUNT sparse $SIZE files in $DIR"
  ARGS=(serve --create --level "$LEVEL" --size "$SIZE" --name demo
        "${LISTEN_ARGS[@]}" "${MEMBERS[@]}")
else
  echo "demo: only $existing of $COUNT member files exist in $DIR;" \
       "remove $DIR to start again" >&2
  exit 1
fi

LOG=$DIR/serve.log
: >"$LOG"
"$BIN" "${ARGS[@]}" >"$LOG" &
PID=$!
trap 'echo; echo "demo: stopping raidkit (SIGTERM)"; kill -TERM $PID 2>/dev/null || true' INT TERM

for ((t = 0; t < 600; t++)); do
  grep -q "raidkit: serving" "$LOG" && break
  if ! kill -0 $PID 2>/dev/null; then
    cat "$LOG"
    echo "demo: raidkit serve exited before serving (see the messages above)" >&2
    exit 1
  fi
  sleep 0.1
done
cat "$LOG"

cat <<EOT

The array is served at
    $URI
(export name "demo"; the default export name "" works too). In another terminal:

  # what the server advertises
  nbdinfo $URI

  # QEMU: inspect it, or give it to a VM as a disk
  qemu-img info $URI
  qemu-system-x86_64 -m 2G -drive file=$URI,format=raw,if=virtio ...

  # a filesystem through FUSE and a loop device (root)
  mkdir -p $DIR/fuse $DIR/mnt
  nbdfuse $DIR/fuse/disk $URI &
  mkfs.ext4 $DIR/fuse/disk            # first time only
  mount -o loop $DIR/fuse/disk $DIR/mnt
  ...                                  # use $DIR/mnt
  umount $DIR/mnt && fusermount3 -u $DIR/fuse

  # the Linux kernel's NBD client (apt-get install nbd-client; root; TCP shown,
  # for a Unix socket: nbd-client -unix $SOCK /dev/nbd0 -N demo)
  modprobe nbd && nbd-client $HOST $PORT /dev/nbd0 -N demo
  ...                                  # /dev/nbd0 is the array
  nbd-client -d /dev/nbd0

  # a quick benchmark
  fio --name=demo --ioengine=nbd --uri=$URI --rw=randrw --bs=4k --iodepth=32 --runtime=10 --time_based

Ctrl-C stops the server cleanly; run ./scripts/demo.sh again to serve the same array.
EOT

tail -n +1 -f "$LOG" --pid=$PID 2>/dev/null | grep -v "raidkit: serving" &
rc=0
wait $PID || rc=$?
if ((rc > 128)); then # interrupted wait: the trap ran; wait for the server itself
  rc=0
  wait $PID || rc=$?
fi
echo "demo: raidkit exited with status $rc"
exit $rc
