#!/usr/bin/env bash
# The whole test suite (the README's test command; .ci/run calls exactly this).
#
#   1. install what is missing (Debian 12, as root): scripts/install-deps.sh
#   2. no import loops between the files of a crate: scripts/import-loops.py (pure Python, ~1 s)
#   3. cargo build --release
#   4. cargo test --workspace --release --no-fail-fast (every crate runs, failures are all listed)
#   5. fuzz smoke: scripts/fuzz.sh smoke builds the AFL++ targets (fuzz/) and runs each from its
#      seed corpus, under a minute in all; a crash, a hang or a missing fuzzer fails it
#   6. end-to-end tests: /usr/bin/python3 -m pytest tests/python against target/release/raidkit
#
# Environment:
#   RAIDKIT_SEED=N       replay the random choices of a failed run (printed by pytest)
#   RAIDKIT_SOAK=1       larger arrays and longer runs in the end-to-end tests
#   PYTEST_ARGS="..."    extra pytest arguments, e.g. "-k qemu -x"
#   CARGO_TARGET_DIR     honoured (the binary is taken from $CARGO_TARGET_DIR/release/raidkit)
#   SKIP_INSTALL=1       do not try to install packages
#   RAIDKIT_ALLOW_MISSING_TOOLS=1
#                        a test whose tool (nbdkit, qemu-io, ...) is missing is skipped instead
#                        of failed (crates/testsupport, tests/python/skips.py)
#   CI=true              any skip that is not environment-dependent (not root, no FUSE, ...)
#                        fails the run
#
# Exits non-zero if any step fails; pytest collecting no test at all counts as a failure.
# Every skip (Rust and pytest) is collected in $RAIDKIT_SKIP_LOG and listed in the summary.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[[ -d $HOME/.cargo/bin ]] && export PATH=$HOME/.cargo/bin:$PATH

# Free space the end-to-end tests need in $TMPDIR: a passed test's files are removed when it ends,
# and the whole suite peaked at 0.8 GiB (2026-11-25); 8 GiB leaves room for the soak sizes.
PYTEST_FREE_GIB=${PYTEST_FREE_GIB:-8}

declare -a NAMES=() RESULTS=() TIMES=()
failed=0

step() { # step NAME COMMAND...
  local name=$1
  shift
  echo
  echo "==> $name: $*"
  local t0=$SECONDS rc=0
  "$@" || rc=$?
  NAMES+=("$name")
  TIMES+=("$((SECONDS - t0))s")
  if ((rc == 0)); then
    RESULTS+=("ok")
  else
    RESULTS+=("FAILED (exit $rc)")
    failed=1
  fi
  return $rc
}

# Lists the skips the tests recorded; with CI=true, one not environment-dependent fails the run.
skip_summary() {
  [[ -s $RAIDKIT_SKIP_LOG ]] || { echo "    skipped: none"; return; }
  local total env
  total=$(wc -l <"$RAIDKIT_SKIP_LOG")
  env=$(grep -c '^environment' "$RAIDKIT_SKIP_LOG" || true)
  echo "    skipped: $total ($env environment-dependent)"
  awk -F'\t' '{ printf "      %-12s %s: %s\n", $1, $2, $3 }' "$RAIDKIT_SKIP_LOG"
  if [[ ${CI:-} == true ]] && ((total > env)); then
    echo "    CI=true: $((total - env)) skip(s) not environment-dependent: counted as a failure"
    failed=1
  fi
}

summary() {
  echo
  echo "==> summary"
  local i
  for i in "${!NAMES[@]}"; do
    printf '    %-28s %-18s %s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"
  done
  skip_summary
  if ((failed)); then
    echo "==> FAILED"
  else
    echo "==> all passed"
  fi
}

pytest_step() {
  local rc=0
  # The tests' arrays, members and logs live in one fresh directory that is removed afterwards
  # (pytest's default keeps the last three runs' directories: tens of GiB on a long-lived machine).
  PYTEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/raidkit-pytest.XXXXXX")
  local free_kib
  free_kib=$(df --output=avail -k "$PYTEST_TMP" | tail -1)
  if ((free_kib < PYTEST_FREE_GIB * 1024 * 1024)); then
    echo "only $((free_kib / 1024)) MiB free in $PYTEST_TMP; the end-to-end tests need" \
      "$PYTEST_FREE_GIB GiB: free space there or point TMPDIR at a larger filesystem" >&2
    return 1
  fi
  # shellcheck disable=SC2086
  RAIDKIT_BIN=$RAIDKIT_BIN /usr/bin/python3 -m pytest -q -p no:cacheprovider \
    --basetemp="$PYTEST_TMP" ${PYTEST_ARGS:-} tests/python || rc=$?
  if ((rc == 5)); then
    echo "pytest collected no tests: counted as a failure" >&2
  fi
  return $rc
}

RAIDKIT_SKIP_LOG=$(mktemp "${TMPDIR:-/tmp}/raidkit-skips.XXXXXX")
export RAIDKIT_SKIP_LOG
PYTEST_TMP=
trap 'rm -f "$RAIDKIT_SKIP_LOG"; [[ -n $PYTEST_TMP ]] && rm -rf "$PYTEST_TMP"' EXIT

if [[ ${SKIP_INSTALL:-0} != 1 ]]; then
  step "install dependencies" ./scripts/install-deps.sh || { summary; exit 1; }
  [[ -d $HOME/.cargo/bin ]] && export PATH=$HOME/.cargo/bin:$PATH
fi

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
RAIDKIT_BIN=$TARGET_DIR/release/raidkit

step "no import loops" /usr/bin/python3 scripts/import-loops.py

if step "cargo build --release" cargo build --release --workspace; then
  step "cargo test --release" cargo test --workspace --release --no-fail-fast
  step "fuzz smoke (AFL++)" ./scripts/fuzz.sh smoke
  step "end-to-end (pytest)" pytest_step
fi

summary
exit $failed
