"""raidkit as a systemd service: the unit verifies, the install script stages everything, and
the daemon tells systemd when it is ready, pings the watchdog and says when it stops.

- ``test_the_unit_verifies``: ``systemd-analyze verify`` accepts contrib/systemd/raidkit.service
  (its ExecStart pointed at the built binary) and refuses a broken copy.
- ``test_install_stages_binary_unit_config_completions_and_man_page``: scripts/install.sh with
  DESTDIR; the example configuration passes ``--check-config``.
- ``test_the_daemon_notifies_systemd``: READY=1 with a STATUS once the arrays are served,
  WATCHDOG=1 at half the watchdog interval, STOPPING=1 on SIGTERM.
"""

import os
import socket
import subprocess
import time

import pytest

from conftest import RAIDKIT_BIN, REPO, SERVER_KIND, require_tools, run
from test_daemon import Daemon, create, raidkit

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit", reason="raidkit only")

UNIT = REPO / "contrib" / "systemd" / "raidkit.service"


def verify(unit):
    return subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                          capture_output=True, text=True, timeout=60)


def test_the_unit_verifies(tmp_path):
    require_tools("systemd-analyze")
    text = UNIT.read_text()
    assert "Type=notify" in text and "WatchdogSec=" in text and "ExecReload=" in text
    unit = tmp_path / "raidkit.service"
    unit.write_text(text.replace("/usr/local/bin/raidkit", RAIDKIT_BIN))
    proc = verify(unit)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = tmp_path / "broken" / "raidkit.service"
    broken.parent.mkdir()
    broken.write_text(unit.read_text().replace(RAIDKIT_BIN, "/nonexistent/raidkit"))
    assert verify(broken).returncode != 0


def test_install_stages_binary_unit_config_completions_and_man_page(tmp_path):
    env = dict(os.environ, DESTDIR=str(tmp_path), PREFIX="/usr", RAIDKIT_BIN=RAIDKIT_BIN)
    run([str(REPO / "scripts" / "install.sh")], env=env)
    binary = tmp_path / "usr/bin/raidkit"
    assert os.access(binary, os.X_OK)
    unit = (tmp_path / "etc/systemd/system/raidkit.service").read_text()
    assert "ExecStart=/usr/bin/raidkit daemon --config /etc/raidkit/raidkit.toml" in unit, unit
    man = (tmp_path / "usr/share/man/man8/raidkit.8").read_text()
    assert man.splitlines()[2].startswith(".TH raidkit 8"), man[:200]
    assert "daemon" in man
    for path, needle in (("usr/share/bash-completion/completions/raidkit", "daemon"),
                         ("usr/share/zsh/site-functions/_raidkit", "#compdef raidkit"),
                         ("usr/share/fish/vendor_completions.d/raidkit.fish", "check-config")):
        assert needle in (tmp_path / path).read_text(), path
    rule = (tmp_path / "usr/share/raidkit/udev/60-raidkit-nbd.rules").read_text()
    assert 'KERNEL=="nbd[0-9]*"' in rule and 'ATTR{queue/max_sectors_kb}="4096"' in rule, rule
    example = tmp_path / "etc/raidkit/raidkit.toml.example"
    out = run([str(binary), "daemon", "--check-config", "--config", str(example)]).stdout
    assert "no problem found" in out, out


def test_the_daemon_notifies_systemd(tmp_path):
    create(tmp_path, "1", "home", 2)
    config = tmp_path / "raidkit.toml"
    config.write_text(f'[daemon]\nunix = "{tmp_path}/nbd.sock"\nadmin = "{tmp_path}/a.sock"\n\n'
                      + raidkit("examine", "--scan", f"{tmp_path}/*").stdout)
    notify = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    sock.settimeout(10)
    # A 2 s watchdog: pinged every second while the monitor polled within that second (it
    # polls every 200 ms). At 400 ms the check window equalled one poll period and a loaded
    # machine missed every ping of the first second now and then.
    env = dict(os.environ, NOTIFY_SOCKET=str(notify), WATCHDOG_USEC="2000000")
    daemon = Daemon(config, 1, env=env)
    try:
        ready = sock.recv(4096).decode()
        assert ready.splitlines() == ["READY=1", "STATUS=serving 1 of 1 arrays"], ready
        started = time.monotonic()
        assert sock.recv(4096).decode().splitlines() == ["WATCHDOG=1"]
        assert time.monotonic() - started < 2.0
    finally:
        log = daemon.stop()
        daemon.kill()
    messages = []
    sock.settimeout(1)
    try:
        while True:
            messages.append(sock.recv(4096).decode())
    except socket.timeout:
        pass
    assert ["STOPPING=1"] in [m.splitlines() for m in messages], (messages, log)
