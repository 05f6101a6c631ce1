#!/usr/bin/env bash
# Installs raidkit as a machine's storage service: the binary, the systemd unit, an example
# configuration, shell completions, the man page, and (for the machines that use an array through
# the Linux kernel's NBD client) a udev rule to copy there.
#
#   scripts/install.sh                 # into /usr/local (binary, completions, man page),
#                                      # /etc/systemd/system and /etc/raidkit
#   DESTDIR=/tmp/pkg scripts/install.sh  # staged under DESTDIR (packaging, tests)
#
# Environment: PREFIX (default /usr/local), DESTDIR (default empty), RAIDKIT_BIN (default
# target/release/raidkit, built with cargo if missing). An existing /etc/raidkit/raidkit.toml
# is never overwritten; the example goes next to it. Then: edit the configuration, and
# `systemctl daemon-reload && systemctl enable --now raidkit`.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
BIN=${RAIDKIT_BIN:-target/release/raidkit}
if [[ ! -x $BIN ]]; then
  cargo build --release -p raidkit
fi

install -d "$DESTDIR$PREFIX/bin" "$DESTDIR/etc/systemd/system" "$DESTDIR/etc/raidkit" \
  "$DESTDIR$PREFIX/share/man/man8" "$DESTDIR$PREFIX/share/bash-completion/completions" \
  "$DESTDIR$PREFIX/share/zsh/site-functions" "$DESTDIR$PREFIX/share/fish/vendor_completions.d" \
  "$DESTDIR$PREFIX/share/raidkit/udev"
install -m 0755 "$BIN" "$DESTDIR$PREFIX/bin/raidkit"
sed "s|/usr/local/bin/raidkit|$PREFIX/bin/raidkit|g" contrib/systemd/raidkit.service \
  >"$DESTDIR/etc/systemd/system/raidkit.service"
chmod 0644 "$DESTDIR/etc/systemd/system/raidkit.service"
install -m 0644 contrib/raidkit.toml.example "$DESTDIR/etc/raidkit/raidkit.toml.example"
# Not into /etc/udev/rules.d: it tunes the NBD *client*, usually another machine (README, "The
# Linux kernel client").
install -m 0644 contrib/udev/60-raidkit-nbd.rules "$DESTDIR$PREFIX/share/raidkit/udev/60-raidkit-nbd.rules"
"$BIN" man >"$DESTDIR$PREFIX/share/man/man8/raidkit.8"
"$BIN" completions bash >"$DESTDIR$PREFIX/share/bash-completion/completions/raidkit"
"$BIN" completions zsh >"$DESTDIR$PREFIX/share/zsh/site-functions/_raidkit"
"$BIN" completions fish >"$DESTDIR$PREFIX/share/fish/vendor_completions.d/raidkit.fish"
echo "installed raidkit under ${DESTDIR:-/}: $PREFIX/bin/raidkit, /etc/systemd/system/raidkit.service,"
echo "  /etc/raidkit/raidkit.toml.example, completions, raidkit(8) and, for NBD client machines,"
echo "  $PREFIX/share/raidkit/udev/60-raidkit-nbd.rules"
if [[ ! -e $DESTDIR/etc/raidkit/raidkit.toml ]]; then
  echo "next: write /etc/raidkit/raidkit.toml (raidkit examine --scan prints its [[array]] entries),"
  echo "  then: systemctl daemon-reload && systemctl enable --now raidkit"
fi
