"""``raidkit daemon``: the arrays of a configuration file served by one process, as a machine's
storage service.

- ``test_three_arrays_served_with_alerts``: RAID 1, 5 and 6 on files, their entries written by
  ``examine --scan``; one listener lists the three exports with their sizes, qemu-io writes and
  reads each; a member failed through the admin socket (``--array``) calls the alert program
  with ``Fail ARRAY MEMBER`` within a second, then ``DegradedArray``; ``status`` without
  ``--array`` shows every array (an mdstat-style block each; ``--json`` all statuses); a spare
  added rebuilds (``status --watch`` follows it to the end; ``RebuildStarted``,
  ``SpareActive``, ``RebuildFinished``); SIGTERM closes every array clean.
- ``test_a_bad_configuration_starts_nothing``: ``--check-config`` and a start both print every
  problem with its line and key and exit non-zero; no socket appears.
- ``test_reload_adds_changes_and_removes_arrays_under_load``: RAID 1, 5 and 6 served, fio
  writing and verifying on the first two; ``raidkit reload`` of a file that adds a RAID 0,
  changes RAID 5's speed_max and drops the RAID 6: the new array is listed and usable, the
  speed limit shows in status, the RAID 6's export is gone, its client disconnected and its
  members closed clean (it serves again with its data); fio saw no error. A file with a
  problem changes nothing (the line and key are printed, exit 1); a change that needs a
  restart is reported, by SIGHUP too.
- ``test_a_taken_over_array_stops_alone``: another host forces its way onto one array's NBD
  members; the daemon stops serving that array (``TakenOver`` raised, nothing more written to
  it) and keeps serving the other.
- ``test_an_array_that_cannot_start_leaves_the_others_serving``: one array's member is gone and
  another's device names point at a different array (its ``uuid`` refuses them); the third is
  served, and the daemon says why the others are not. No alert target: the daemon says no alert
  will reach anyone.
- ``test_monitor_test_sends_a_test_message_for_every_array``: ``raidkit monitor --test`` makes
  the daemon raise ``TestMessage`` for each array: the alert program is called with
  ``TestMessage ARRAY`` for both; against ``serve`` (no alerts) it is refused.
- ``test_spares_missing_is_raised_for_a_listed_spare_that_cannot_be_opened``: a listed spare
  that is gone is left out (the array starts) and ``SparesMissing`` is raised at start.
  (``JournalPressure`` is tested on the monitor's pure function, service tests/monitor.rs.)
- ``test_a_spare_moves_within_its_spare_group``: two RAID 1 arrays of one spare group, only B
  with a spare; a member of A fails → B's spare moves to A (``MoveSpare``), A rebuilds to
  healthy with its data, B keeps serving (``SparesMissing``); after a restart A assembles the
  moved spare from its superblock and B starts without it.
- ``test_a_spare_too_small_is_not_moved``: the group's only spare is smaller than the degraded
  array's members: nothing moves, ``SparesMissing`` says why, once.
- ``test_a_read_only_array_neither_lends_nor_borrows``: a read-only array's spare stays with it
  when another array of its group is degraded (it writes no superblock); its status is served,
  its actions refused (the daemon used to panic at its start).
"""

import json
import signal
import subprocess
import time

import pytest

from conftest import RAIDKIT_BIN, SERVER_KIND, require_tools, run

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit", reason="raidkit only")

START_TIMEOUT_S = 30
ALERT_WAIT_S = 1.0


def raidkit(*args, check=True, timeout=120):
    return run([RAIDKIT_BIN, *map(str, args)], check=check, timeout=timeout)


def create(tmp_path, level, name, count, *extra):
    files = [tmp_path / f"{name}{i}" for i in range(count)]
    raidkit("create", "--level", level, "--name", name, "--size", "16M", *extra, *files)
    return files


class Daemon:
    """``raidkit daemon --config PATH``, started and waited for (one "serving" line per array)."""

    def __init__(self, config, arrays, env=None):
        self.log = config.parent / "daemon.log"
        self.proc = subprocess.Popen([RAIDKIT_BIN, "daemon", "--config", str(config)],
                                     stdout=subprocess.PIPE, stderr=open(self.log, "w"),
                                     text=True, env=env)
        self.serving = {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(self.serving) < arrays:
            line = self.proc.stdout.readline()
            assert line, f"the daemon ended: {self.proc.wait()}\n{self.log.read_text()}"
            assert time.monotonic() < deadline, self.log.read_text()
            if line.startswith("raidkit: serving "):
                name = line.split('"')[1]
                self.serving[name] = line.rsplit(" at ", 1)[1].strip()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        assert code == 0, f"exit {code}\n{self.log.read_text()}"
        return self.log.read_text()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def qemu_io(uri, *commands):
    args = ["qemu-io", "-f", "raw"]
    for c in commands:
        args += ["-c", c]
    out = run(args + [uri], timeout=60).stdout
    assert "Pattern verification failed" not in out, out


def wait_for_line(path, needle, since, bound_s):
    """Waits until ``path`` has a line containing ``needle``; returns the seconds it took."""
    while True:
        text = path.read_text() if path.exists() else ""
        if needle in text:
            return time.monotonic() - since
        assert time.monotonic() - since < bound_s + 5, f"{needle!r} not in {text!r}"
        time.sleep(0.02)


def alert_program(tmp_path):
    """An alert program that appends its arguments to alerts.log; returns (program, log)."""
    alerts = tmp_path / "alerts.log"
    program = tmp_path / "alert.sh"
    program.write_text(f'#!/bin/sh\necho "$@" >> {alerts}\n')
    program.chmod(0o755)
    return program, alerts


def alerted_config(tmp_path, program, arrays, admin=None):
    """Writes tmp_path/raidkit.toml: the daemon on nbd.sock and ``admin`` (default a.sock), the
    alert ``program``, then ``arrays`` (the arrays' configuration text); returns its path."""
    config = tmp_path / "raidkit.toml"
    config.write_text(f'[daemon]\nunix = "{tmp_path / "nbd.sock"}"\n'
                      f'admin = "{admin or tmp_path / "a.sock"}"\n\n'
                      f'[alerts]\nprogram = "{program}"\n\n{arrays}')
    return config


def test_three_arrays_served_with_alerts(tmp_path):
    require_tools("qemu-io", "nbdinfo")
    create(tmp_path, "1", "home", 2)
    media = create(tmp_path, "5", "media", 4)
    create(tmp_path, "6", "backup", 4)
    scanned = raidkit("examine", "--scan", f"{tmp_path}/*").stdout
    socket, admin = tmp_path / "nbd.sock", tmp_path / "admin.sock"
    program, alerts = alert_program(tmp_path)
    config = alerted_config(tmp_path, program, scanned, admin)
    daemon = Daemon(config, 3)
    try:
        assert sorted(daemon.serving) == ["backup", "home", "media"]
        listed = json.loads(run(["nbdinfo", "--list", "--json",
                                 f"nbd+unix:///?socket={socket}"]).stdout)
        sizes = {e["export-name"]: e["export-size"] for e in listed["exports"]}
        assert sizes == {"home": 15 << 20, "media": 45 << 20, "backup": 30 << 20}, sizes
        for name, uri in daemon.serving.items():
            qemu_io(uri, f"write -P 0x{len(name):02x} 0 1M", "flush")
        for name, uri in daemon.serving.items():
            qemu_io(uri, f"read -P 0x{len(name):02x} 0 1M")

        since = time.monotonic()
        raidkit("fail", "--admin", admin, "--array", "media", media[1])
        took = wait_for_line(alerts, f"Fail media {media[1]}", since, ALERT_WAIT_S)
        assert took <= ALERT_WAIT_S, f"the alert program ran {took:.2f} s after the failure"
        wait_for_line(alerts, "DegradedArray media", since, ALERT_WAIT_S)
        status = json.loads(raidkit("status", "--admin", admin, "--array", "media",
                                    "--json").stdout)
        assert status["health"] == "degraded", status
        # Without --array: every array, an mdstat-style block each, or all of them in JSON.
        text = raidkit("status", "--admin", admin).stdout
        blocks = {b.split(" : ")[0]: b for b in text.split("\n\n")}
        assert sorted(blocks) == ["backup", "home", "media"], text
        assert blocks["media"].startswith("media : degraded raid5 "), text
        assert f"{media[1]}[1](F)" in blocks["media"] and "[4/3] [U_UU]" in blocks["media"], text
        assert "[2/2] [UU]" in blocks["home"] and "[4/4] [UUUU]" in blocks["backup"], text
        every = json.loads(raidkit("status", "--admin", admin, "--json").stdout)["arrays"]
        assert sorted(every) == ["backup", "home", "media"], every
        assert every["media"]["health"] == "degraded" and every["media"]["level"] == "raid5"
        assert every["home"]["level"] == "raid1" and every["backup"]["level"] == "raid6"

        spare = tmp_path / "spare"
        with open(spare, "wb") as f:
            f.truncate(16 << 20)
        since = time.monotonic()
        raidkit("add", "--admin", admin, "--array", "media", f"{spare}")
        # --watch follows every array's background work until none is left, then shows all.
        watched = raidkit("status", "--admin", admin, "--watch", timeout=300).stdout
        final = watched.rsplit("backup : ", 1)[1]
        assert "[4/4] [UUUU]" in final.split("media : ")[1], watched
        assert f"{spare}[1]" in final, watched
        for event in ("RebuildStarted media", f"SpareActive media {spare}",
                      "RebuildFinished media"):
            wait_for_line(alerts, event, since, 10)
        qemu_io(daemon.serving["media"], "read -P 0x05 0 1M")
    finally:
        if daemon.proc.poll() is None:
            log = daemon.stop()
        else:
            log = daemon.log.read_text()
        daemon.kill()
    for name in ("home", "media", "backup"):
        assert f'array "{name}" closed cleanly' in log, log
    states = json.loads(raidkit("examine", "--json", *media[:1]).stdout)
    assert states[0]["state"] == "clean" and states[0]["owner"] is None, states


def test_a_bad_configuration_starts_nothing(tmp_path):
    create(tmp_path, "1", "home", 2)
    admin = tmp_path / "admin.sock"
    config = tmp_path / "raidkit.toml"
    config.write_text(f'[daemon]\nadmin = "{admin}"\nunix = "{tmp_path}/nbd.sock"\n\n'
                      f'[[array]]\nname = "home"\nmembers = ["{tmp_path}/home0", "{tmp_path}/home0"]\n'
                      'buffer_memory = "1M"\n')
    for args in (["--check-config"], []):
        proc = raidkit("daemon", "--config", config, *args, check=False)
        assert proc.returncode != 0, proc
        assert f"{config}:7: key `members`: \"{tmp_path}/home0\" is also in" in proc.stderr, \
            proc.stderr
        assert f"{config}:8: key `buffer_memory`: is below 64M" in proc.stderr, proc.stderr
        assert "2 problem(s) in the configuration: nothing was started" in proc.stderr
    assert not admin.exists() and not (tmp_path / "nbd.sock").exists()
    good = tmp_path / "good.toml"
    good.write_text(raidkit("examine", "--scan", f"{tmp_path}/home0", f"{tmp_path}/home1").stdout)
    out = raidkit("daemon", "--config", good, "--check-config").stdout
    assert out == f"{good}: 1 array(s), no problem found\n", out


def test_an_array_that_cannot_start_leaves_the_others_serving(tmp_path):
    require_tools("qemu-io")
    create(tmp_path, "1", "home", 2)
    gone = create(tmp_path, "1", "gone", 2)
    create(tmp_path, "1", "other", 2)
    entries = raidkit("examine", "--scan", f"{tmp_path}/*").stdout
    gone[0].unlink()
    gone[1].unlink()
    # "other"'s entry now names the devices of "home": its uuid refuses them.
    home_entry = raidkit("examine", "--scan", f"{tmp_path}/home0", f"{tmp_path}/home1").stdout
    home_members = next(line for line in home_entry.splitlines() if line.startswith("members"))
    lines = entries.splitlines()
    in_other = False
    for i, line in enumerate(lines):
        if line.startswith("name = "):
            in_other = line == 'name = "other"'
        if in_other and line.startswith("members"):
            lines[i] = home_members.replace("home0", "home0-link").replace("home1", "home1-link")
    (tmp_path / "home0-link").symlink_to(tmp_path / "home0")
    (tmp_path / "home1-link").symlink_to(tmp_path / "home1")
    config = tmp_path / "raidkit.toml"
    # The links are the same devices as home's: the configuration check catches that first.
    config.write_text(f'[daemon]\nunix = "{tmp_path}/nbd.sock"\nadmin = "{tmp_path}/a.sock"\n\n'
                      + "\n".join(lines) + "\n")
    proc = raidkit("daemon", "--config", config, "--check-config", check=False)
    assert proc.returncode != 0 and "is also in array \"home\"'s members" in proc.stderr, \
        proc.stderr
    # Pointed at copies of home's member files instead, the uuid refuses them at start.
    for i in range(2):
        (tmp_path / f"home{i}-link").unlink()
        (tmp_path / f"home{i}-link").write_bytes((tmp_path / f"home{i}").read_bytes())
    daemon = Daemon(config, 1)
    try:
        assert list(daemon.serving) == ["home"]
        qemu_io(daemon.serving["home"], "write -P 0x11 0 64k", "read -P 0x11 0 64k")
    finally:
        log = daemon.stop()
        daemon.kill()
    assert 'array "gone" not started' in log, log
    assert 'array "other" not started' in log and "belongs to array \"home\"" in log, log
    assert "no alert will reach anyone" in log, log


def test_signals_are_handled_from_the_first_array_announced(tmp_path):
    """SIGHUP right after the first array is announced (others still starting) reloads the
    unchanged file once serving begins, changing nothing; SIGTERM then stops every array cleanly. (The handlers were installed only
    once every array was started: a signal in between killed the daemon.)"""
    for name in ("a", "b", "c"):
        create(tmp_path, "1", name, 2)
    config = tmp_path / "raidkit.toml"
    config.write_text(f'[daemon]\nunix = "{tmp_path}/nbd.sock"\nadmin = "{tmp_path}/s.sock"\n\n'
                      + raidkit("examine", "--scan", f"{tmp_path}/*").stdout)
    daemon = Daemon(config, 1)
    try:
        daemon.proc.send_signal(signal.SIGHUP)
        # Acted on once serving begins: the file is read again, nothing in it changed.
        wait_for_line(daemon.log, f"reload of {config} done: 0 change(s), 3 array(s) unchanged",
                      time.monotonic(), 30)
        assert daemon.proc.poll() is None, daemon.log.read_text()
    finally:
        log = daemon.stop()
        daemon.kill()
    for name in ("a", "b", "c"):
        assert f'array "{name}" closed cleanly' in log, log


def test_a_remote_member_that_cannot_be_reached_raises_device_disappeared(tmp_path):
    """A remote (NBD) member whose server is down at start is left out: the array starts
    degraded and the alert program hears DeviceDisappeared for that member and DegradedArray."""
    require_tools("nbdkit")
    from test_faults import Nbdkit

    remote = Nbdkit(tmp_path, "remote")
    remote.start()
    local = tmp_path / "local"
    with open(local, "wb") as f:
        f.truncate(remote.image.stat().st_size)
    try:
        raidkit("create", "--level", "1", "--name", "home", local, remote.uri)
    finally:
        remote.kill()
    program, alerts = alert_program(tmp_path)
    config = alerted_config(
        tmp_path, program, f'[[array]]\nname = "home"\nmembers = ["{local}", "{remote.uri}"]\n')
    daemon = Daemon(config, 1)
    try:
        since = time.monotonic()
        wait_for_line(alerts, f"DeviceDisappeared home {remote.uri}", since, ALERT_WAIT_S)
        wait_for_line(alerts, "DegradedArray home", since, ALERT_WAIT_S)
    finally:
        log = daemon.stop()
        daemon.kill()
    assert "ALERT: DeviceDisappeared on array \"home\"" in log, log


def test_monitor_test_sends_a_test_message_for_every_array(tmp_path):
    """``raidkit monitor --test``: the daemon raises TestMessage for every array it serves; the
    alert program is called with ``TestMessage ARRAY`` for each. ``serve`` raises no alerts: the
    command is refused and says so."""
    home = create(tmp_path, "1", "home", 2)
    create(tmp_path, "1", "media", 2)
    program, alerts = alert_program(tmp_path)
    admin = tmp_path / "admin.sock"
    config = alerted_config(tmp_path, program, raidkit("examine", "--scan", f"{tmp_path}/*").stdout,
                            admin)
    daemon = Daemon(config, 2)
    try:
        since = time.monotonic()
        out = raidkit("monitor", "--test", "--admin", admin).stdout
        assert out == ('TestMessage sent for array "home"\nTestMessage sent for array "media"\n'
                       "to: program (and the daemon's log)\n"), out
        for name in ("home", "media"):
            wait_for_line(alerts, f"TestMessage {name}\n", since, ALERT_WAIT_S)
    finally:
        log = daemon.stop()
        daemon.kill()
    assert 'event: TestMessage on array "media"' in log, log
    assert alerts.read_text().count("TestMessage") == 2, alerts.read_text()

    served = subprocess.Popen([RAIDKIT_BIN, "serve", "--unix", str(tmp_path / "s.sock"),
                               "--admin", str(admin), *map(str, home)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert served.stdout.readline().startswith("raidkit: serving "), served.poll()
        refused = raidkit("monitor", "--test", "--admin", admin, check=False)
        assert refused.returncode != 0, refused
        assert "no test alert was sent" in refused.stderr, refused.stderr
        assert "raises no alerts" in refused.stderr, refused.stderr
    finally:
        served.send_signal(signal.SIGTERM)
        assert served.wait(timeout=60) == 0


def test_spares_missing_is_raised_for_a_listed_spare_that_cannot_be_opened(tmp_path):
    """A spare the configuration lists that cannot be opened is left out: the array starts and
    the alert program hears ``SparesMissing``. (JournalPressure is tested on the monitor's pure
    function, service tests/monitor.rs: a burst that fills a write-back ring cannot be forced
    here — with file members the appliers kept up with five 48 MiB bursts in one suite run.)"""
    members = [tmp_path / f"home{i}" for i in range(3)]
    raidkit("create", "--level", "5", "--chunk", "16K", "--name", "home", "--size", "32M",
            *members)
    program, alerts = alert_program(tmp_path)
    gone = tmp_path / "gone-spare"
    config = alerted_config(tmp_path, program,
                            f'[[array]]\nname = "home"\nmembers = {json.dumps(list(map(str, members)))}\n'
                            f'spares = ["{gone}"]\n')
    daemon = Daemon(config, 1)
    try:
        since = time.monotonic()
        wait_for_line(alerts, "SparesMissing home\n", since, ALERT_WAIT_S)
    finally:
        log = daemon.stop()
        daemon.kill()
    assert f"spare {gone} left out: it cannot be opened" in log, log
    assert "SparesMissing on array \"home\": 0 spare(s) present, the configuration lists 1" in log


def nbd_list(socket):
    listed = json.loads(run(["nbdinfo", "--list", "--json", f"nbd+unix:///?socket={socket}"]).stdout)
    return sorted(e["export-name"] for e in listed["exports"])


def fio_load(uri, name, cwd):
    """fio writing (4 KiB - 1 MiB, QD 16) then verifying 8 MiB at 2 MiB/s: about 5 s of load."""
    return subprocess.Popen(
        ["fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}", "--rw=randwrite",
         "--bssplit=4k/40:16k/20:64k/20:256k/10:1m/10", "--iodepth=16", "--size=8M",
         "--rate=2m", "--randseed=1212", "--verify=crc32c", "--verify_state_save=0",
         "--end_fsync=1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)


def test_reload_adds_changes_and_removes_arrays_under_load(tmp_path):
    require_tools("fio", "nbdinfo", "qemu-io")
    import nbd

    create(tmp_path, "1", "home", 2)
    create(tmp_path, "5", "media", 4)
    backup = create(tmp_path, "6", "backup", 4)
    create(tmp_path, "0", "extra", 2)
    socket, admin = tmp_path / "nbd.sock", tmp_path / "admin.sock"
    scan = {name: raidkit("examine", "--scan", f"{tmp_path}/{name}[0-9]").stdout
            for name in ("home", "media", "backup", "extra")}
    head = f'[daemon]\nunix = "{socket}"\nadmin = "{admin}"\n\n'
    config = tmp_path / "raidkit.toml"
    config.write_text(head + scan["home"] + "\n" + scan["media"] + "\n" + scan["backup"])
    daemon = Daemon(config, 3)
    loads = []
    try:
        assert nbd_list(socket) == ["backup", "home", "media"]
        # A client of the array to be removed, with data written and flushed.
        client = nbd.NBD()
        client.connect_uri(daemon.serving["backup"])
        client.pwrite(b"\xb6" * 65536, 1 << 20)
        client.flush()
        loads = [(name, fio_load(daemon.serving[name], name, tmp_path))
                 for name in ("home", "media")]
        time.sleep(1)

        changed = scan["media"].replace('name = "media"\n', 'name = "media"\nspeed_max = "7M"\n')
        assert changed != scan["media"]
        config.write_text(head + scan["home"] + "\n" + changed + "\n" + scan["extra"])
        out = raidkit("reload", "--admin", admin).stdout
        assert 'array "backup": removed: no longer in the file: drained and closed cleanly\n' \
            in out, out
        assert 'array "media": changed: speed_max applied\n' in out, out
        assert 'array "extra": added: assembled and served\n' in out, out
        assert out.endswith(f"{config} reloaded: 3 change(s), 1 array(s) unchanged\n"), out
        assert all(proc.poll() is None for _, proc in loads), "the load ended before the reload"

        assert nbd_list(socket) == ["extra", "home", "media"]
        extra_uri = f"nbd+unix:///extra?socket={socket}"
        info = json.loads(run(["nbdinfo", "--json", extra_uri]).stdout)
        assert info["exports"][0]["export-size"] == 30 << 20, info
        qemu_io(extra_uri, "write -P 0x0e 0 1M", "flush", "read -P 0x0e 0 1M")
        status = json.loads(raidkit("status", "--admin", admin, "--array", "media",
                                    "--json").stdout)
        assert status["speed_limits"]["max_bytes_per_sec"] == 7 << 20, status["speed_limits"]
        # The removed array's client was disconnected after its requests were answered.
        with pytest.raises(nbd.Error):
            client.pread(4096, 0)
        # Its members were closed clean and let go: examine says so, and it serves again.
        states = json.loads(raidkit("examine", "--json", *backup).stdout)
        assert all(s["state"] == "clean" and s["owner"] is None for s in states), states
        again = subprocess.Popen([RAIDKIT_BIN, "serve", "--unix", str(tmp_path / "b.sock"),
                                  *map(str, backup)],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert again.stdout.readline().startswith("raidkit: serving "), again.poll()
            qemu_io(f"nbd+unix:///?socket={tmp_path / 'b.sock'}", "read -P 0xb6 1M 64k")
        finally:
            again.send_signal(signal.SIGTERM)
            assert again.wait(timeout=60) == 0

        for name, proc in loads:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0 and "err= 0" in out, f"{name}: {out[-3000:]}"
            assert "verify:" not in out, f"{name}: {out[-3000:]}"
        loads = []

        # A file with a problem changes nothing and says where.
        good = config.read_text()
        config.write_text(good.replace('speed_max = "7M"\n', 'speed_max = "7M"\nspeed_mux = 1\n'))
        line = config.read_text().splitlines().index("speed_mux = 1") + 1
        refused = raidkit("reload", "--admin", admin, check=False)
        assert refused.returncode != 0, refused
        assert f"{config}:{line}: key `speed_mux`" in refused.stderr, refused.stderr
        assert "nothing changed" in refused.stderr, refused.stderr
        assert nbd_list(socket) == ["extra", "home", "media"]
        qemu_io(daemon.serving["home"], "read 0 64k")

        # By SIGHUP: a change the running array cannot take is reported, the array untouched.
        config.write_text(good.replace('name = "home"\n', 'name = "home"\ncache_size = "8M"\n'))
        since = time.monotonic()
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for_line(daemon.log, f"reload of {config} done: 1 change(s), 2 array(s) unchanged",
                      since, 30)
        log = daemon.log.read_text()
        assert 'warning: array "home": restart needed: cache_size changed' in log, log
        assert nbd_list(socket) == ["extra", "home", "media"]
    finally:
        for _, proc in loads:
            proc.kill()
            proc.wait()
        log = daemon.stop() if daemon.proc.poll() is None else daemon.log.read_text()
        daemon.kill()
    for name in ("home", "media", "extra", "backup"):
        assert f'array "{name}" closed cleanly' in log, log


def group_config(tmp_path, program, lender, borrower, members_of, spare, extra=""):
    """A configuration of two arrays in the spare group "shelf": ``borrower`` with no spare,
    ``lender`` with ``spare`` (and ``extra`` lines); returns (config, admin socket)."""
    admin = tmp_path / "admin.sock"
    config = alerted_config(
        tmp_path, program,
        f'[[array]]\nname = "{borrower}"\nmembers = {json.dumps(list(map(str, members_of[borrower])))}\n'
        'spare_group = "shelf"\n\n'
        f'[[array]]\nname = "{lender}"\nmembers = {json.dumps(list(map(str, members_of[lender])))}\n'
        f'spares = ["{spare}"]\nspare_group = "shelf"\n{extra}', admin)
    return config, admin


def test_a_spare_moves_within_its_spare_group(tmp_path):
    """mdadm's spare groups: arrays "a" and "b" share the group "shelf"; only "b" has a spare.
    A member of "a" fails: "b"'s spare is taken out of "b" (its superblock erased) and added to
    "a", which rebuilds onto it. The alert program hears MoveSpare (naming the spare, and "b"
    in the details), RebuildStarted, SpareActive and RebuildFinished for "a", SparesMissing for
    "b"; "a"'s data reads back; "b" keeps serving. After a restart with the same file, "a"
    assembles the spare it got (found by its superblock among the group's devices) and "b"
    starts without it."""
    require_tools("qemu-io")
    a = create(tmp_path, "1", "a", 2)
    b = create(tmp_path, "1", "b", 2)
    spare = tmp_path / "b-spare"
    with open(spare, "wb") as f:
        f.truncate(16 << 20)
    program, alerts = alert_program(tmp_path)
    program.write_text(f'#!/bin/sh\necho "$@ from=$RAIDKIT_FROM_ARRAY" >> {alerts}\n')
    config, admin = group_config(tmp_path, program, "b", "a",
                                 {"a": a, "b": b}, spare)
    daemon = Daemon(config, 2)
    try:
        qemu_io(daemon.serving["a"], "write -P 0xa1 0 15M", "flush")
        qemu_io(daemon.serving["b"], "write -P 0xb2 0 1M", "flush")
        since = time.monotonic()
        raidkit("fail", "--admin", admin, "--array", "a", a[1])
        wait_for_line(alerts, f"Fail a {a[1]}", since, ALERT_WAIT_S)
        wait_for_line(alerts, f"MoveSpare a {spare} from=b\n", since, 2)
        for event in ("RebuildStarted a", f"SpareActive a {spare}", "RebuildFinished a",
                      "SparesMissing b"):
            wait_for_line(alerts, event, since, 30)
        raidkit("status", "--admin", admin, "--watch", timeout=120)
        statuses = json.loads(raidkit("status", "--admin", admin, "--json").stdout)["arrays"]
        got = statuses["a"]
        assert got["health"] in ("active", "clean"), got
        holders = {m["name"]: m["state"] for m in got["members"] if m["role"] is not None}
        assert holders == {str(a[0]): "active", str(spare): "active"}, got["members"]
        assert not [m for m in statuses["b"]["members"] if m["role"] is None], statuses["b"]
        text = raidkit("status", "--admin", admin).stdout
        assert f"{spare}[1]" in text.split("b : ")[0] and "[2/2] [UU]" in text, text
        qemu_io(daemon.serving["a"], "read -P 0xa1 0 15M")
        qemu_io(daemon.serving["b"], "read -P 0xb2 0 1M", "write -P 0xb3 1M 1M",
                "read -P 0xb3 1M 1M")
    finally:
        log = daemon.stop()
        daemon.kill()
    assert 'MoveSpare on array "a", member ' + str(spare) in log, log
    assert 'spare moved from array "b" (spare group "shelf") to array "a"' in log, log
    assert alerts.read_text().count("MoveSpare") == 1, alerts.read_text()

    # The configuration still lists the spare under "b": "a" finds it by its superblock.
    (tmp_path / "daemon.log").unlink()
    since = time.monotonic()
    daemon = Daemon(config, 2)
    try:
        wait_for_line(alerts, "SparesMissing b", since, ALERT_WAIT_S)
        statuses = json.loads(raidkit("status", "--admin", admin, "--json").stdout)["arrays"]
        assert statuses["a"]["health"] == "clean", statuses["a"]
        assert {m["name"] for m in statuses["a"]["members"]} == {str(a[0]), str(spare)}
        assert statuses["b"]["health"] == "clean" and len(statuses["b"]["members"]) == 2
        qemu_io(daemon.serving["a"], "read -P 0xa1 0 15M")
    finally:
        log = daemon.stop()
        daemon.kill()
    assert f"{spare} is assembled as a member: it carries this array's superblock" in log, log
    assert f"spare {spare} left out" in log, log
    assert "DegradedArray" not in log, log


def test_a_spare_too_small_is_not_moved(tmp_path):
    """Array "big" (members of 32 MiB) and "b" (16 MiB, with a 16 MiB spare) share a spare group.
    A member of "big" fails: "b"'s spare is too small to rebuild it, so it stays with "b" and
    "big" raises SparesMissing once, saying no spare of the group is large enough."""
    big = [tmp_path / f"big{i}" for i in range(2)]
    raidkit("create", "--level", "1", "--name", "big", "--size", "32M", *big)
    b = create(tmp_path, "1", "b", 2)
    spare = tmp_path / "b-spare"
    with open(spare, "wb") as f:
        f.truncate(16 << 20)
    program, alerts = alert_program(tmp_path)
    config, admin = group_config(tmp_path, program, "b", "big",
                                 {"big": big, "b": b}, spare)
    daemon = Daemon(config, 2)
    try:
        since = time.monotonic()
        raidkit("fail", "--admin", admin, "--array", "big", big[1])
        wait_for_line(alerts, "SparesMissing big", since, 2)
        time.sleep(1)  # five more polls: said once, and nothing moves
        statuses = json.loads(raidkit("status", "--admin", admin, "--json").stdout)["arrays"]
        assert statuses["big"]["health"] == "degraded", statuses["big"]
        kept = [m for m in statuses["b"]["members"] if m["role"] is None]
        assert [(m["name"], m["state"]) for m in kept] == [(str(spare), "spare")], kept
    finally:
        log = daemon.stop()
        daemon.kill()
    assert "MoveSpare" not in alerts.read_text(), alerts.read_text()
    assert alerts.read_text().count("SparesMissing big") == 1, alerts.read_text()
    assert 'no spare of spare group "shelf" is large enough for it' in log, log
    assert f"the largest spare ({spare} of array \"b\")" in log, log


def test_a_read_only_array_neither_lends_nor_borrows(tmp_path):
    """A read-only array writes nothing, not even a superblock: its spare is never taken for a
    degraded array of its group (the move failed on its read-only handles and alerted). Its
    status is served and actions are refused (the daemon panicked at the start of a read-only
    array: its admin control asserted a writable array)."""
    a = create(tmp_path, "1", "a", 2)
    ro = [tmp_path / f"ro{i}" for i in range(2)]
    spare = tmp_path / "ro-spare"
    raidkit("create", "--level", "1", "--name", "ro", "--size", "16M", "--spare", spare, *ro)
    program, alerts = alert_program(tmp_path)
    config, admin = group_config(tmp_path, program, "ro", "a",
                                 {"a": a, "ro": ro}, spare, extra="read_only = true\n")
    daemon = Daemon(config, 2)
    try:
        since = time.monotonic()
        raidkit("fail", "--admin", admin, "--array", "a", a[1])
        wait_for_line(alerts, "DegradedArray a", since, ALERT_WAIT_S)
        time.sleep(1)  # five polls of the monitor
        statuses = json.loads(raidkit("status", "--admin", admin, "--json").stdout)["arrays"]
        assert statuses["a"]["health"] == "degraded", statuses["a"]
        kept = [m["name"] for m in statuses["ro"]["members"] if m["role"] is None]
        assert kept == [str(spare)], statuses["ro"]["members"]
        # Its status is served; an action is refused, and says why.
        refused = raidkit("fail", "--admin", admin, "--array", "ro", ro[0], check=False)
        assert refused.returncode != 0 and "is served read-only" in refused.stderr, refused
    finally:
        log = daemon.stop()
        daemon.kill()
    assert "MoveSpare" not in log and "could not be moved" not in log, log
    assert "SparesMissing a" not in alerts.read_text(), alerts.read_text()


def test_a_taken_over_array_stops_alone(tmp_path):
    """Another host takes one array over (``serve --force-owner`` from another pid namespace, on
    the same NBD members): at its next lease renewal the daemon stops serving that array only —
    its export leaves the list, the alert program hears ``TakenOver``, nothing more is written
    to its members (not even at the daemon's stop) — and keeps serving the other, then stops
    cleanly. (The whole daemon used to exit 3.)"""
    require_tools("nbdkit", "qemu-io", "nbdinfo")
    from test_faults import Nbdkit
    from test_owner import RENEW_INTERVAL_S, OtherHost, serve_cmd

    nbdkits = [Nbdkit(tmp_path, f"t{i}") for i in range(2)]
    raidkit("create", "--level", "1", "--name", "taken", *[m.image for m in nbdkits])
    for m in nbdkits:
        m.start()
    uris = [m.uri for m in nbdkits]
    create(tmp_path, "1", "home", 2)
    program, alerts = alert_program(tmp_path)
    socket = tmp_path / "nbd.sock"
    config = alerted_config(tmp_path, program,
                            raidkit("examine", "--scan", f"{tmp_path}/home[0-9]").stdout
                            + f'\n[[array]]\nname = "taken"\nmembers = {json.dumps(uris)}\n')
    daemon = Daemon(config, 2)
    second = None
    try:
        qemu_io(daemon.serving["taken"], "write -P 0x71 0 64k", "flush")
        second = OtherHost(serve_cmd(tmp_path, "b", uris, "--force-owner"))
        second.serving()
        since = time.monotonic()
        wait_for_line(alerts, "TakenOver taken\n", since, RENEW_INTERVAL_S + 5)
        while nbd_list(socket) != ["home"]:
            assert time.monotonic() - since < RENEW_INTERVAL_S + 10, nbd_list(socket)
            time.sleep(0.1)
        assert daemon.proc.poll() is None, daemon.log.read_text()
        qemu_io(daemon.serving["home"], "write -P 0x21 0 64k", "read -P 0x21 0 64k")
        images = [str(m.image) for m in nbdkits]
        owners = [s["owner"] for s in json.loads(raidkit("examine", "--json", *images).stdout)]
        assert all(o is not None and o["pid"] != daemon.proc.pid for o in owners), owners
        second.stop()
        second = None
        after_second = json.loads(raidkit("examine", "--json", *images).stdout)
        assert all(s["state"] == "clean" and s["owner"] is None for s in after_second)
    finally:
        if second is not None:
            second.kill()
        log = daemon.stop() if daemon.proc.poll() is None else daemon.log.read_text()
        daemon.kill()
    assert 'array "home" closed cleanly' in log, log
    assert 'array "taken" no longer served: another process took it over' in log, log
    assert 'array "taken" closed cleanly' not in log, log
    assert json.loads(raidkit("examine", "--json", *images).stdout) == after_second, \
        "the daemon wrote to the taken array's members after it lost it"


def test_json_log_lines(tmp_path):
    """``[daemon] log_format = "json"``: every line the daemon logs is one JSON object with time,
    level, array, event and message — the alerter's events with their name and array, the
    reload's lines with ``reload``, an array's close with its array."""
    create(tmp_path, "1", "home", 2)
    admin = tmp_path / "admin.sock"
    config = tmp_path / "raidkit.toml"
    head = f'[daemon]\nunix = "{tmp_path}/nbd.sock"\nadmin = "{admin}"\nlog_format = "json"\n\n'
    entry = raidkit("examine", "--scan", f"{tmp_path}/home[0-9]").stdout
    config.write_text(head + entry)
    daemon = Daemon(config, 1)
    try:
        config.write_text(head + entry.replace('name = "home"\n', 'name = "home"\ncache_size = "8M"\n'))
        raidkit("reload", "--admin", admin)
    finally:
        log = daemon.stop()
        daemon.kill()
    lines = [json.loads(line) for line in log.splitlines()]
    assert lines and all(set(line) == {"time", "level", "array", "event", "message"}
                         for line in lines), log
    assert all(line["time"].endswith("Z") and line["level"] in
               ("info", "warning", "error", "critical") for line in lines), log
    assert {"level": "info", "array": "home", "event": "NewArray"}.items() <= \
        next(line for line in lines if line["event"] == "NewArray").items(), log
    restart = next(line for line in lines if "restart needed" in line["message"])
    assert (restart["level"], restart["array"], restart["event"]) == \
        ("warning", "home", "reload"), restart
    assert any(line["array"] == "home" and line["message"] == 'array "home" closed cleanly'
               for line in lines), log
