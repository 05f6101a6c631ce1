#!/usr/bin/env bash
# raidkit's fuzz targets (fuzz/, docs/FUZZING.md): AFL++ through cargo-afl, on the stable toolchain.
#
#   scripts/fuzz.sh build                build every target with AFL++'s instrumentation
#   scripts/fuzz.sh smoke [SECONDS]      build, then fuzz every target from its seed corpus for
#                                        SECONDS in all (default 40, split evenly); fails on any
#                                        crash or hang, on a seed that fails, or when the fuzzer
#                                        is missing (never a skip). scripts/test.sh runs this.
#   scripts/fuzz.sh run TARGET [EXECS]   a long run of one target (nice 19) until EXECS
#                                        executions (default 10000000) or FUZZ_UNTIL (a `date -d`
#                                        time) comes; resumes in fuzz/out/TARGET (AFL++ counts
#                                        EXECS over the resumed runs); with FUZZ_FRESH=1 the old
#                                        run moves to fuzz/out/TARGET.N and a new run starts from
#                                        its queue, so EXECS counts this code's run alone; prints
#                                        its stats
#   scripts/fuzz.sh stats [TARGET...]    executions, exec/s, coverage, crashes and hangs of the
#                                        runs in fuzz/out
#   scripts/fuzz.sh seeds                rewrite the seed corpora (fuzz/corpus) from the encoders
#   scripts/fuzz.sh repro TARGET FILE    run one input through a target outside the fuzzer
#   scripts/fuzz.sh time TARGET DIR [ROUNDS]  run every input of DIR through a target outside
#                                        the fuzzer (in one process, ROUNDS times): inputs a
#                                        second and the slowest inputs
#   scripts/fuzz.sh list                 the targets
#
# Needs cargo-afl (scripts/install-deps.sh installs it and builds AFL++). Build output goes to
# $CARGO_TARGET_DIR/afl (default target/afl): the instrumented build never mixes with the
# workspace's.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[[ -d $HOME/.cargo/bin ]] && export PATH=$HOME/.cargo/bin:$PATH

TARGETS=(nbd_handshake nbd_requests member_replies codec_replies superblock bitmap journal config)
BASE_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $BASE_TARGET_DIR == /* ]] || BASE_TARGET_DIR=$ROOT/$BASE_TARGET_DIR
AFL_TARGET_DIR=$BASE_TARGET_DIR/afl
BIN=$AFL_TARGET_DIR/release

# afl-fuzz settings for a shared machine: no CPU binding (the cores are shared), no CPU governor
# check, no terminal UI, and crashes are found by the exit signal even when core dumps go to a
# pipe (systemd-coredump).
export AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1 AFL_NO_UI=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
export AFL_FAST_CAL=1

die() {
  echo "fuzz.sh: $*" >&2
  exit 1
}

require_afl() {
  command -v cargo >/dev/null 2>&1 || die "cargo is missing: run scripts/install-deps.sh"
  cargo afl --version >/dev/null 2>&1 ||
    die "cargo-afl is missing: run scripts/install-deps.sh (cargo install cargo-afl)"
  local help
  help=$(cargo afl fuzz -h 2>&1 || true) # afl-fuzz -h exits 1
  [[ $help == *afl-fuzz* ]] ||
    die "AFL++ is not built for this toolchain: run scripts/install-deps.sh (cargo afl config --build)"
}

is_target() {
  local t
  for t in "${TARGETS[@]}"; do [[ $t == "$1" ]] && return 0; done
  return 1
}

build() {
  require_afl
  (cd fuzz && CARGO_TARGET_DIR=$AFL_TARGET_DIR cargo afl build --release --features afl --bins)
}

# stat FILE KEY: one value of an afl-fuzz fuzzer_stats file.
stat() {
  awk -F' *: *' -v k="$2" '$1 == k { print $2 }' "$1"
}

# Files afl-fuzz saved in DIR (its README aside).
findings() {
  find "$1" -type f ! -name README.txt 2>/dev/null
}

smoke() {
  local total=${1:-40}
  local each=$((total / ${#TARGETS[@]}))
  ((each >= 2)) || die "smoke: $total s is too short for ${#TARGETS[@]} targets"
  build
  local out failed=0 t0=$SECONDS
  out=$(mktemp -d "${TMPDIR:-/tmp}/raidkit-fuzz-smoke.XXXXXX")
  trap 'rm -rf "$out"' RETURN
  for t in "${TARGETS[@]}"; do
    local rc=0 log=$out/$t.log
    # -t: a generous per-input timeout (the machine is shared); -V: seconds of fuzzing.
    cargo afl fuzz -V "$each" -t 10000 -i "fuzz/corpus/$t" -o "$out/$t" "$BIN/$t" >"$log" 2>&1 || rc=$?
    local stats=$out/$t/default/fuzzer_stats
    if ((rc != 0)) || [[ ! -f $stats ]]; then
      echo "FAILED $t: afl-fuzz exited $rc; its last lines:"
      tail -n 15 "$log" | sed 's/^/    /'
      failed=1
      continue
    fi
    local crashes hangs
    crashes=$(findings "$out/$t/default/crashes" | wc -l)
    hangs=$(findings "$out/$t/default/hangs" | wc -l)
    printf '%-15s %9s execs %8s exec/s  coverage %-7s crashes %s  hangs %s\n' "$t" \
      "$(stat "$stats" execs_done)" "$(stat "$stats" execs_per_sec)" \
      "$(stat "$stats" bitmap_cvg)" "$crashes" "$hangs"
    if ((crashes + hangs > 0)); then
      failed=1
      local keep=$ROOT/fuzz/out/smoke-findings/$t
      mkdir -p "$keep"
      findings "$out/$t/default/crashes" | xargs -r cp -t "$keep"
      findings "$out/$t/default/hangs" | xargs -r cp -t "$keep"
      echo "FAILED $t: inputs kept in $keep; replay one with: scripts/fuzz.sh repro $t FILE"
    fi
  done
  echo "fuzz smoke: ${#TARGETS[@]} targets in $((SECONDS - t0)) s"
  return $failed
}

run() {
  local t=$1 execs=${2:-10000000}
  is_target "$t" || die "unknown target $t (scripts/fuzz.sh list)"
  require_afl
  [[ -x $BIN/$t ]] || build
  local out=$ROOT/fuzz/out/$t input=fuzz/corpus/$t
  if [[ ${FUZZ_FRESH:-0} == 1 && -d $out/default/queue ]]; then
    # A new run from the earlier run's queue: its execution count starts at zero.
    local n=1
    while [[ -e $out.$n ]]; do n=$((n + 1)); done
    mv "$out" "$out.$n"
    input=$out.$n/default/queue
  elif [[ -f $out/default/fuzzer_stats ]]; then
    input=- # an earlier run's queue is resumed
  fi
  local until=()
  if [[ -n ${FUZZ_UNTIL:-} ]]; then
    local secs=$(($(date -d "$FUZZ_UNTIL" +%s) - $(date +%s)))
    ((secs > 0)) || die "FUZZ_UNTIL $FUZZ_UNTIL has passed"
    until=(-V "$secs")
  fi
  mkdir -p "$ROOT/fuzz/out"
  nice -n 19 cargo afl fuzz -E "$execs" "${until[@]}" -t 10000 -i "$input" -o "$out" "$BIN/$t" \
    >"$ROOT/fuzz/out/$t.log" 2>&1
  stats "$t"
}

stats() {
  local ts=("$@")
  ((${#ts[@]})) || ts=("${TARGETS[@]}")
  printf '%-15s %12s %8s %9s %11s %7s %7s %6s %s\n' target execs exec/s coverage edges corpus crashes hangs "run time"
  for t in "${ts[@]}"; do
    local s=$ROOT/fuzz/out/$t/default/fuzzer_stats
    [[ -f $s ]] || { printf '%-15s (no run)\n' "$t"; continue; }
    local secs=$(($(stat "$s" last_update) - $(stat "$s" start_time)))
    printf '%-15s %12s %8s %9s %11s %7s %7s %6s %dh%02dm (%s)\n' "$t" "$(stat "$s" execs_done)" \
      "$(awk "BEGIN { printf \"%d\", $(stat "$s" execs_done) / ($secs > 0 ? $secs : 1) }")" \
      "$(stat "$s" bitmap_cvg)" "$(stat "$s" edges_found)/$(stat "$s" total_edges)" \
      "$(stat "$s" corpus_count)" "$(stat "$s" saved_crashes)" \
      "$(stat "$s" saved_hangs)" $((secs / 3600)) $((secs % 3600 / 60)) \
      "$(date -u -d "@$(stat "$s" start_time)" '+%F %H:%M UTC')"
  done
}

case ${1:-} in
  build) build ;;
  smoke) smoke "${2:-40}" ;;
  run) [[ $# -ge 2 ]] || die "usage: scripts/fuzz.sh run TARGET [EXECS]"; run "$2" "${3:-}" ;;
  stats) shift; stats "$@" ;;
  seeds) (cd fuzz && CARGO_TARGET_DIR=$BASE_TARGET_DIR/fuzz cargo run --release --bin make-seeds -- corpus) ;;
  repro)
    [[ $# -eq 3 ]] || die "usage: scripts/fuzz.sh repro TARGET FILE"
    is_target "$2" || die "unknown target $2"
    [[ -x $BIN/$2 ]] || build
    "$BIN/$2" <"$3"
    ;;
  time)
    [[ $# -eq 3 || $# -eq 4 ]] || die "usage: scripts/fuzz.sh time TARGET DIR [ROUNDS]"
    is_target "$2" || die "unknown target $2"
    (cd fuzz && CARGO_TARGET_DIR=$BASE_TARGET_DIR/fuzz cargo build --release --bin time-inputs)
    "$BASE_TARGET_DIR/fuzz/release/time-inputs" "$2" "$3" ${4:+"$4"}
    ;;
  list) printf '%s\n' "${TARGETS[@]}" ;;
  *) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
