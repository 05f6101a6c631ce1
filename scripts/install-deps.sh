#!/usr/bin/env bash
# Install what raidkit's build, tests, demo and benchmark need on Debian 12, only when missing
# (so reruns are quick and offline). Run as root; without root it only reports what is missing.
#
#   Debian packages: fio qemu-utils libnbd-bin nbdkit python3-libnbd e2fsprogs fuse3
#                    python3-pytest mount (losetup), gcc (linker for cargo),
#                    systemd (systemd-analyze verify of the unit), prometheus (promtool check metrics),
#                    chromium chromium-driver python3-selenium (the dashboard in a browser),
#                    prometheus-node-exporter (reads the mdstat file in test_mdstat.py),
#                    python3-matplotlib (bench/plot.py's charts; test_bench_plot.py),
#                    gnutls-bin (certtool: the certificates of test_tls.py),
#                    make (cargo-afl's build of AFL++),
#                    fonts-dejavu-core (the text of `raidkit bench --plot`; test_bench.py)
#   Rust toolchain:  rustup (stable), only when cargo is missing or older than rust-version.
#   cargo-afl:       the fuzz targets' AFL++ (scripts/fuzz.sh, docs/FUZZING.md); installing it
#                    builds AFL++ for the installed toolchain.
set -euo pipefail

# probe -> Debian package. A probe is a command name, or "py:MODULE" for /usr/bin/python3.
PROBES=(
  "fio:fio"
  "qemu-io:qemu-utils"
  "qemu-img:qemu-utils"
  "nbdinfo:libnbd-bin"
  "nbdcopy:libnbd-bin"
  "nbdfuse:libnbd-bin"
  "nbdkit:nbdkit"
  "py:nbd:python3-libnbd"
  "py:pytest:python3-pytest"
  "mkfs.ext4:e2fsprogs"
  "e2fsck:e2fsprogs"
  "fusermount3:fuse3"
  "losetup:mount"
  "cc:gcc"
  "systemd-analyze:systemd"
  "chromium:chromium"
  "chromedriver:chromium-driver"
  "py:selenium:python3-selenium"
  "promtool:prometheus"
  "prometheus-node-exporter:prometheus-node-exporter"
  "py:matplotlib:python3-matplotlib"
  "certtool:gnutls-bin"
  "make:make"
  "file:/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf:fonts-dejavu-core"
)

have() {
  local probe=$1
  if [[ $probe == py:* ]]; then
    [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c "import ${probe#py:}" 2>/dev/null
  elif [[ $probe == file:* ]]; then
    [[ -e ${probe#file:} ]]
  else
    command -v "$probe" >/dev/null 2>&1 || [[ -x /usr/sbin/$probe || -x /sbin/$probe ]]
  fi
}

missing=()
for entry in "${PROBES[@]}"; do
  pkg=${entry##*:}
  probe=${entry%:*}
  if ! have "$probe"; then
    [[ " ${missing[*]-} " == *" $pkg "* ]] || missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  echo "install-deps: missing Debian packages: ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: not root; install them with: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

# Rust: the workspace needs a recent stable toolchain (Debian 12's rustc is far too old).
if ! command -v cargo >/dev/null 2>&1 && [[ -x $HOME/.cargo/bin/cargo ]]; then
  export PATH=$HOME/.cargo/bin:$PATH
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: cargo missing; installing the stable Rust toolchain with rustup"
  command -v curl >/dev/null 2>&1 || apt-get install -y -q --no-install-recommends curl ca-certificates
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  echo "install-deps: Rust installed in \$HOME/.cargo/bin (add it to PATH)"
fi

# cargo-afl: AFL++ for Rust on the stable toolchain (the fuzz targets in fuzz/). Its install
# builds AFL++; a toolchain update needs AFL++ built again for the new rustc.
CARGO_AFL_VERSION=0.18.2
if command -v cargo >/dev/null 2>&1; then
  if ! cargo afl --version 2>/dev/null | grep -q "cargo-afl $CARGO_AFL_VERSION"; then
    echo "install-deps: installing cargo-afl $CARGO_AFL_VERSION (builds AFL++)"
    cargo install cargo-afl --version "$CARGO_AFL_VERSION" --locked
  fi
  afl_help=$(cargo afl fuzz -h 2>&1 || true) # afl-fuzz -h exits 1
  if [[ $afl_help != *afl-fuzz* ]]; then
    echo "install-deps: building AFL++ for this toolchain (cargo afl config --build)"
    cargo afl config --build --force
  fi
  echo "install-deps: cargo-afl present"
fi
