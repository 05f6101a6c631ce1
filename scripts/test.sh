#!/usr/bin/env bash
# The whole test suite: installs what it needs (Debian 12, root), then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --release
