#!/usr/bin/env bash
# The whole test suite (the README's test command; .ci/run calls exactly this).
#
#   1. install what is missing (Debian 12, as root): scripts/install-deps.sh
#   2. cargo build --release
#   3. cargo test --workspace --release --no-fail-fast (every crate runs, failures are all listed)
#   4. end-to-end tests: /usr/bin/python3 -m pytest tests/python against target/release/raidkit
#
# Environment:
#   RAIDKIT_SEED=N       replay the random choices of a failed run (printed by pytest)
#   RAIDKIT_SOAK=1       larger arrays and longer runs in the end-to-end tests
#   PYTEST_ARGS="..."    extra pytest arguments, e.g. "-k qemu -x"
#   CARGO_TARGET_DIR     honoured (the binary is taken from $CARGO_TARGET_DIR/release/raidkit)
#   SKIP_INSTALL=1       do not try to install packages
#
# Exits non-zero if any step fails; pytest collecting no test at all counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
[[ -d $HOME/.cargo/bin ]] && export PATH=$HOME/.cargo/bin:$PATH

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

summary() {
  echo
  echo "==> summary"
  local i
  for i in "${!NAMES[@]}"; do
    printf '    %-28s %-18s %s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"
  done
  if ((failed)); then
    echo "==> FAILED"
  else
    echo "==> all passed"
  fi
}

pytest_step() {
  local rc=0
  # shellcheck disable=SC2086
  RAIDKIT_BIN=$RAIDKIT_BIN /usr/bin/python3 -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} \
    tests/python || rc=$?
  if ((rc == 5)); then
    echo "pytest collected no tests: counted as a failure" >&2
  fi
  return $rc
}

if [[ ${SKIP_INSTALL:-0} != 1 ]]; then
  step "install dependencies" ./scripts/install-deps.sh || { summary; exit 1; }
  [[ -d $HOME/.cargo/bin ]] && export PATH=$HOME/.cargo/bin:$PATH
fi

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
RAIDKIT_BIN=$TARGET_DIR/release/raidkit

if step "cargo build --release" cargo build --release --workspace; then
  step "cargo test --release" cargo test --workspace --release --no-fail-fast
  step "end-to-end (pytest)" pytest_step
fi

summary
exit $failed
