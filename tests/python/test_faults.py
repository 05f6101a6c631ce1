"""Failing members under a running client (issue 4, "How it is proven").

The array's members are NBD exports of nbdkit's ``file`` plugin (``nbd+unix:///?socket=…``)
over sparse files, behind the error filter (read or write errors switched on in the middle of
a run by creating a file) and, for stalls, the delay filter (writes slower than
``--io-timeout``). The array is created on the backing files (``raidkit create``), then
served from the NBD URIs with an admin socket.

- ``test_member_fails_under_fio``: for RAID 1, 5, 10 (one member) and RAID 6 (two members),
  and each fault (read errors, write errors, a stall of every write, a pause of every request
  mid-run, nbdkit killed): a fio job with
  ``verify=crc32c`` runs while the fault starts; it must finish with no error and verify clean,
  no request waiting much longer than ``--io-timeout`` (fio's largest completion latency);
  ``raidkit status --json`` must show the member faulty within the configured bounds (read
  errors over ``--read-errors-max``, a timeout counted, the fault seen within
  ``--io-timeout`` + slack); after ``raidkit add --wait`` of a spare (an nbdkit URI the server
  opens) every role is active, a fio ``verify_only`` pass and a ``scrub`` (zero mismatches)
  succeed.
- ``test_member_missing_at_start``: the same, with the member's server gone before
  ``raidkit serve`` starts (it starts degraded).
- ``test_restart_resumes_rebuild``: a throttled rebuild, SIGTERM, restart: the reported
  rebuild offset is at or past the one saved in the new member's superblock (not zero), then
  the rebuild finishes and the data verifies.
- ``test_spare_at_start_takes_over``: ``serve --spare`` writes a spare superblock; when a
  member is failed the rebuild onto the spare starts by itself; after a restart (the spare
  given again) the array is whole.
- ``test_restart_resumes_replace``: a replace stopped by SIGTERM or kill -9 resumes as a replace
  after the restart (old member ``replacing`` and in sync, never degraded), then the new member
  holds the role; fio verify and scrub clean.
- ``test_replace_under_fio``: ``replace --wait`` while a fio verify job runs: status never
  shows the array degraded; verify clean.
- ``test_scrub_finds_and_repairs_corruption``: bytes overwritten in one member file's data area
  (offset from ``raidkit examine --json``) are found by ``scrub`` at that member and offset;
  ``scrub --repair`` fixes them; a second scrub finds none and fio verifies.
- ``test_rebuild_throttle``: with ``speed-limit --max X``, the measured rebuild rate stays
  within X + 10 %.
- ``test_returning_member_is_rebuilt``: a member whose server died and came back is stale:
  ``remove`` then ``add`` of the same URI rebuilds it.
- ``test_writes_during_initial_sync_survive_member_failure``: RAID 5 of 4 and RAID 6 of 5 over
  NBD members full of random data (an initial sync, throttled to 256 KiB/s); fio writes 24 MiB
  of 4-64 KiB blocks while the sync has barely started, one (RAID 6: two) members are failed,
  and ``verify_only`` must pass from the degraded array (issue 10 item 1).
- ``test_local_member_stuck_in_kernel``: RAID 1, 5 (one) and RAID 6 (two) *file* members that
  really block in the kernel (FUSE files, ``nbdfuse`` over ``nbdkit memory`` behind the pause
  filter), paused under fio with ``serve --local-io-deadline``: no client request waits much
  past one timeout, the members are faulty, ``status`` counts the abandoned and still-stuck
  calls, the log names them, the degraded array verifies, and SIGTERM closes the array at once
  although the calls are still stuck (issue 10 item 4).
"""

import json
import random
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import skips

from conftest import (RAIDKIT_BIN, SEED, SERVER_KIND, START_TIMEOUT_S, STOP_TIMEOUT_S,
                      require_tools, rng_for, run, tracking)

# Fault handling and the admin API are raidkit's own: nothing to compare a reference server on.
pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit",
                                reason=skips.env_reason("raidkit-only (RAIDKIT_TEST_SERVER is not raidkit)"))

MIB = 1024 * 1024
MEMBER_BYTES = 32 * MIB
CHUNK = "64K"
IO_TIMEOUT_S = 2
READ_ERRORS_MAX = 5
FIO_BYTES = 16 * MIB
# Fault seen by status within the timeout plus this (scheduling on a loaded 2-core machine).
DETECT_SLACK_S = 10

# level -> (members, members to fail)
LEVELS = {"1": (2, 1), "5": (3, 1), "10": (4, 1), "6": (4, 2)}
# stall: the delay filter makes every write slower than --io-timeout (the first write after
# start, the dirty mark, meets it); paused: the pause filter stops all requests mid-run.
FAULTS = ("read-errors", "write-errors", "stall", "paused", "killed")
# Longest client request allowed while members stall: one timeout, plus a quarter-timeout grace
# for each further stalled member met in turn (they share the request's deadline; before they
# did, RAID 6 with two paused members measured 4.4 s, one timeout per stalled member), plus
# scheduling slack.
CLIENT_WAIT_SLACK_S = 1.5
# The same for local members stuck in the kernel, where fio's own scheduling is the only noise.
STUCK_WAIT_SLACK_S = 0.3


class Nbdkit:
    """One member: nbdkit's file plugin over a sparse file, behind the error filter (switched
    on by creating a file) and optionally the delay filter (slow writes)."""

    def __init__(self, workdir, name, size=MEMBER_BYTES):
        self.dir = Path(workdir)
        self.image = self.dir / f"{name}.img"
        self.sock = self.dir / f"{name}.sock"
        self.read_flag = self.dir / f"{name}.read-errors"
        self.write_flag = self.dir / f"{name}.write-errors"
        self.pause_sock = self.dir / f"{name}.pause"
        self.proc = None
        # (server certificate directory, client certificate directory) once use_tls is called.
        self.tls = None
        # 127.0.0.1:PORT instead of the Unix socket, once use_tls is given one.
        self.tcp_port = None
        if not self.image.exists():
            with open(self.image, "wb") as f:
                f.truncate(size)

    def use_tls(self, server_certs, client_certs, verify_peer=False, tcp_port=None):
        """From the next start on: TLS required (nbdkit --tls=require with the certificates in
        ``server_certs``, nbdkit's layout; ``verify_peer``: clients need a certificate), and
        ``uri`` is the nbds+unix URI whose ``tls-certificates`` is ``client_certs``; with
        ``tcp_port``, nbdkit listens on 127.0.0.1:PORT instead and ``uri`` is
        ``nbds://127.0.0.1:PORT/?tls-certificates=…``."""
        self.tls = (server_certs, client_certs, verify_peer)
        self.tcp_port = tcp_port
        return self

    @property
    def uri(self):
        if self.tls and self.tcp_port:
            return f"nbds://127.0.0.1:{self.tcp_port}/?tls-certificates={self.tls[1]}"
        if self.tls:
            return f"nbds+unix:///?socket={self.sock}&tls-certificates={self.tls[1]}"
        return f"nbd+unix:///?socket={self.sock}"

    def _listening(self):
        if self.tcp_port:
            try:
                socket.create_connection(("127.0.0.1", self.tcp_port), timeout=1).close()
                return True
            except OSError:
                return False
        return self.sock.exists()

    def start(self, write_delay_s=None, pause=False):
        assert self.proc is None
        for p in (self.sock, self.pause_sock):
            if p.exists():
                p.unlink()
        cmd = ["nbdkit", "--foreground", "--exit-with-parent"]
        if self.tcp_port:
            cmd += ["--ipaddr", "127.0.0.1", "--port", str(self.tcp_port)]
        else:
            cmd += ["-U", str(self.sock)]
        if self.tls:
            cmd += ["--tls=require", f"--tls-certificates={self.tls[0]}"]
            if self.tls[2]:
                cmd.append("--tls-verify-peer")
        cmd.append("--filter=error")
        if write_delay_s:
            cmd.append("--filter=delay")
        if pause:
            cmd.append("--filter=pause")
        cmd += ["file", str(self.image),
                "error-pread-rate=100%", f"error-pread-file={self.read_flag}",
                "error-pwrite-rate=100%", f"error-pwrite-file={self.write_flag}",
                "error-zero-rate=100%", f"error-zero-file={self.write_flag}",
                "error-trim-rate=100%", f"error-trim-file={self.write_flag}"]
        if pause:
            cmd.append(f"pause-control={self.pause_sock}")
        if write_delay_s:
            cmd += [f"delay-write={write_delay_s}", f"delay-zero={write_delay_s}",
                    f"delay-trim={write_delay_s}"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self._listening():
            assert self.proc.poll() is None, f"nbdkit exited: {cmd}"
            assert time.monotonic() < deadline, f"nbdkit not listening: {cmd}"
            time.sleep(0.02)
        return self

    def pause(self):
        """Stops serving requests (they wait until killed)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(10)
            c.connect(str(self.pause_sock))
            c.sendall(b"p")
            assert c.recv(1) == b"P", "nbdkit pause filter did not pause"

    def kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


class Array:
    """``raidkit serve`` of the members' URIs with an admin socket; clients on the Unix socket
    ``uri`` names, or on ``listen`` (HOST:PORT) instead."""

    def __init__(self, workdir, name, members, extra=(), listen=None):
        self.dir = Path(workdir)
        self.name = name
        self.members = members
        self.extra = list(extra)
        self.listen = listen
        self.sock = self.dir / "nbd.sock"
        self.admin_sock = self.dir / "admin.sock"
        self.proc = None
        self.starts = 0

    @property
    def uri(self):
        return f"nbd+unix:///{self.name}?socket={self.sock}"

    def start(self, members=None):
        assert self.proc is None
        self.starts += 1
        for p in (self.sock, self.admin_sock):
            if p.exists():
                p.unlink()
        listener = ["--listen", self.listen] if self.listen else ["--unix", str(self.sock)]
        cmd = [RAIDKIT_BIN, "serve", *listener, "--admin", str(self.admin_sock),
               "--io-timeout", str(IO_TIMEOUT_S), "--read-errors-max", str(READ_ERRORS_MAX),
               *self.extra, *(members or self.members)]
        log = open(self.dir / f"serve-{self.starts}.log", "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                     stdin=subprocess.DEVNULL)
        log.close()
        line = self._first_line(self.proc)
        if "raidkit: serving" not in line:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            pytest.fail(f"serve did not start: {cmd}\n{line}\n{self.logs()}")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        return self

    @staticmethod
    def _first_line(proc):
        result = []
        reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        return result[0] if result else ""

    def logs(self):
        return "".join(f"\n--- {p.name}\n{p.read_text()[-4000:]}"
                       for p in sorted(self.dir.glob("serve-*.log")))

    def stop(self):
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None
        assert rc == 0, f"serve exited {rc} after SIGTERM{self.logs()}"
        assert not self.admin_sock.exists(), "admin socket left behind"

    def cli(self, *args, timeout=300):
        return run([RAIDKIT_BIN, *args, "--admin", str(self.admin_sock)], timeout=timeout)

    def status(self):
        return json.loads(self.cli("status", "--json").stdout)

    def role_states(self):
        return [m["state"] for m in self.status()["members"] if m["role"] is not None
                and m["state"] != "replacement_target"]

    def cleanup(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def fio_cmd(uri, size, *extra):
    return ["fio", "--name=faults", "--ioengine=nbd", f"--uri={uri}", "--rw=randwrite",
            "--bssplit=4k/40:16k/20:64k/20:256k/10:1m/10", "--iodepth=16",
            f"--size={size}", f"--randseed={SEED}", "--verify=crc32c",
            "--verify_state_save=0", "--end_fsync=1", *extra]


def check_fio(proc_or_out, what):
    out = proc_or_out if isinstance(proc_or_out, str) else proc_or_out.stdout
    assert "err= 0" in out, f"{what}: fio reported an error\n{out[-3000:]}"
    assert "verify:" not in out, f"{what}: fio verify failed\n{out[-3000:]}"


def max_completion_s(fio_out):
    """The longest completion latency fio reports (all directions), in seconds."""
    scale = {"nsec": 1e-9, "usec": 1e-6, "msec": 1e-3, "sec": 1.0}
    suffix = {"": 1, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6}
    found = re.findall(r"\bclat \((\w+)\): min=\s*[\d.]+[kKmM]?, max=\s*([\d.]+)([kKmM]?)", fio_out)
    assert found, f"no clat line in fio output\n{fio_out[-3000:]}"
    return max(float(v) * suffix[s] * scale[u] for u, v, s in found)


def fio_verify(array, cwd):
    proc = run(fio_cmd(array.uri, FIO_BYTES, "--verify_only"), timeout=300, cwd=cwd)
    check_fio(proc, "verify pass")


def scrub_clean(array):
    out = array.cli("scrub", "--wait", timeout=300).stdout
    assert " 0 mismatches" in out, out
    return out


@pytest.fixture
def members(tmp_path):
    yield from tracking(lambda name: Nbdkit(tmp_path, name), Nbdkit.kill)


@pytest.fixture
def arrays():
    yield from tracking(Array, Array.cleanup)


def create(level, nbdkits, name, *extra):
    run([RAIDKIT_BIN, "create", "--level", level, "--chunk", CHUNK, "--name", name, *extra,
         *[str(m.image) for m in nbdkits]])


def new_array(tmp_path, members, arrays, level, name, stall=(), pause=(), extra=()):
    count, _ = LEVELS[level]
    nbdkits = [members(f"m{i}") for i in range(count)]
    create(level, nbdkits, name, *extra)
    for i, m in enumerate(nbdkits):
        m.start(write_delay_s=4 * IO_TIMEOUT_S if i in stall else None, pause=i in pause)
    array = arrays(tmp_path, name, [m.uri for m in nbdkits])
    return nbdkits, array


def start_fault(fault, member):
    if fault == "read-errors":
        member.read_flag.touch()
    elif fault == "write-errors":
        member.write_flag.touch()
    elif fault == "killed":
        member.kill()
    elif fault == "paused":
        member.pause()
    else:
        assert fault == "stall"  # the delay filter is on from the start: the next write stalls


def wait_health(array, health, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while (status := array.status())["health"] != health:
        assert time.monotonic() < deadline, f"array not {health}: {status}"
        time.sleep(0.05)


def wait_faulty(array, roles, since, bound_s):
    """Polls status until every role in `roles` is faulty; returns the status."""
    deadline = since + bound_s
    while True:
        status = array.status()
        states = {m["role"]: m for m in status["members"] if m["role"] is not None}
        if all(states[r]["state"] == "faulty" for r in roles):
            return status
        assert time.monotonic() < deadline, \
            f"roles {roles} not faulty within {bound_s} s: {json.dumps(status, indent=1)}"
        time.sleep(0.2)


def add_spares_and_check(array, members, count, cwd):
    for i in range(count):
        spare = members(f"spare{i}").start()
        array.cli("add", spare.uri, "--wait", timeout=300)
    status = array.status()
    assert status["task"] is None, status
    assert array.role_states() == ["active"] * len(array.members), status
    assert status["health"] in ("clean", "active"), status
    fio_verify(array, cwd)
    scrub_clean(array)


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("level", list(LEVELS))
def test_member_fails_under_fio(tmp_path, members, arrays, level, fault):
    require_tools("nbdkit", "fio")
    count, fail = LEVELS[level]
    victims = list(range(1, 1 + fail))
    nbdkits, array = new_array(tmp_path, members, arrays, level, f"f{level}",
                               stall=victims if fault == "stall" else (),
                               pause=victims if fault == "paused" else ())
    array.start()
    # Writes spread over ~2 s, then the verify reads over ~2 s; the fault starts after 0.7 s.
    job = subprocess.Popen(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1", "--rate=8m,8m"),
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    # The fault starts once fio's writes are under way (the array is marked dirty), so it
    # meets data I/O; the stall is there from the start and meets the dirty mark itself.
    if fault != "stall":
        wait_health(array, "active")
    time.sleep(0.3)
    since = time.monotonic()
    for r in victims:
        start_fault(fault, nbdkits[r])
    out, _ = job.communicate(timeout=300)
    check_fio(out, f"fio while {fault} on roles {victims}")
    waited = max_completion_s(out)
    print(f"raid{level} {fault}: longest client request {waited:.2f} s")
    assert waited <= IO_TIMEOUT_S + CLIENT_WAIT_SLACK_S, \
        f"a client request took {waited:.1f} s (timeout {IO_TIMEOUT_S} s)\n{out[-3000:]}"
    if fault == "read-errors":
        # Only reads fail: the verify pass reads enough to cross the threshold.
        fio_verify(array, tmp_path)
    status = wait_faulty(array, victims, since, IO_TIMEOUT_S + DETECT_SLACK_S)
    by_role = {m["role"]: m for m in status["members"] if m["role"] is not None}
    for r in victims:
        m = by_role[r]
        if fault == "read-errors":
            assert m["read_errors"] > READ_ERRORS_MAX, m
        if fault == "paused":
            assert m["timeouts"] >= 1, json.dumps(status, indent=1)
    assert status["health"] == "degraded", status
    add_spares_and_check(array, members, fail, tmp_path)
    array.stop()


@pytest.mark.slow
@pytest.mark.parametrize("level", list(LEVELS))
def test_member_missing_at_start(tmp_path, members, arrays, level):
    require_tools("nbdkit", "fio")
    count, fail = LEVELS[level]
    nbdkits, array = new_array(tmp_path, members, arrays, level, f"v{level}")
    for r in range(1, 1 + fail):
        nbdkits[r].kill()
    array.start()
    status = array.status()
    assert status["health"] == "degraded", status
    states = array.role_states()
    assert states.count("active") == count - fail, status
    proc = run(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1"), timeout=300, cwd=tmp_path)
    check_fio(proc, "fio on the degraded array")
    add_spares_and_check(array, members, fail, tmp_path)
    array.stop()


def fail_and_write(array, tmp_path):
    proc = run(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1"), timeout=300, cwd=tmp_path)
    check_fio(proc, "fio write")
    array.cli("fail", "role 1")


def wait_task(array, timeout_s=10):
    """Waits until the background task (started by the worker) shows in status."""
    deadline = time.monotonic() + timeout_s
    while array.status()["task"] is None:
        assert time.monotonic() < deadline, f"no task started: {array.status()}"
        time.sleep(0.1)


def rebuild_offset(status):
    offsets = [m["rebuild_offset_bytes"] for m in status["members"]
               if m["state"] == "rebuilding"]
    assert len(offsets) == 1, status
    return offsets[0]


@pytest.mark.slow
def test_restart_resumes_rebuild(tmp_path, members, arrays):
    require_tools("nbdkit", "fio")
    # No used-regions map: the rebuild is to copy every byte, slowly enough to be interrupted.
    nbdkits, array = new_array(tmp_path, members, arrays, "5", "resume", extra=["--no-used-map"])
    array.extra = ["--speed-min", "1M", "--speed-max", "4M"]
    array.start()
    fail_and_write(array, tmp_path)
    spare = members("spare0").start()
    array.cli("add", spare.uri)
    wait_task(array)
    time.sleep(2.5)
    reported = rebuild_offset(array.status())
    assert reported > 0, array.status()
    array.stop()
    sb = json.loads(run([RAIDKIT_BIN, "examine", "--json", str(spare.image)]).stdout)[0]
    saved = sb["recovery_offset_bytes"]
    assert saved is not None and saved > 0, sb
    array.start(members=[m.uri for m in nbdkits] + [spare.uri])
    after = rebuild_offset(array.status())
    print(f"rebuild offset: {reported} reported before SIGTERM, {saved} saved, {after} after")
    assert after >= saved, f"rebuild restarted at {after}, {saved} was saved"
    # Progress is saved at checkpoints (every 5 % / 5 s): at most one checkpoint is redone.
    assert after >= reported // 2, f"rebuild restarted at {after}, was at {reported}"
    array.cli("speed-limit", "--max", "200M")
    array.cli("status", "--watch", timeout=300)
    assert array.role_states() == ["active"] * 3, array.status()
    fio_verify(array, tmp_path)
    scrub_clean(array)
    array.stop()


def replace_task(status):
    task = status["task"]
    return task if task is not None and task["kind"] == "replace" else None


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["sigterm", "kill"])
def test_restart_resumes_replace(tmp_path, members, arrays, stop):
    """A replace interrupted by SIGTERM or kill -9 resumes as a replace after the restart, not
    as a spare rebuild: the old member stays in sync and serving, the array is never degraded,
    and afterwards the new member holds the role (docs/FORMAT.md "Replace")."""
    require_tools("nbdkit", "fio")
    nbdkits, array = new_array(tmp_path, members, arrays, "5", f"rr{stop}")
    array.extra = ["--speed-min", "1M", "--speed-max", "2M"]
    array.start()
    check_fio(run(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1"), timeout=300, cwd=tmp_path),
              "fio write")
    new = members("new").start()
    array.cli("replace", "role 1", "--with", new.uri)
    deadline = time.monotonic() + 30
    while not (replace_task(array.status()) or {}).get("done_bytes"):
        assert time.monotonic() < deadline, f"the replace made no progress: {array.status()}"
        time.sleep(0.1)
    if stop == "sigterm":
        array.stop()
    else:
        array.proc.kill()
        array.proc.wait()
        array.proc = None
    sb = json.loads(run([RAIDKIT_BIN, "examine", "--json", str(new.image)]).stdout)[0]
    assert [r["replacing"] for r in sb["roles"] if r["state"] == "spare"] == [1], sb
    if stop == "sigterm":
        assert sb["replace_offset_bytes"] > 0, sb
    array.start(members=[m.uri for m in nbdkits] + [new.uri])
    wait_task(array)
    status = array.status()
    assert replace_task(status) is not None, f"no replace after the restart: {status}"
    states = {m["name"]: m["state"] for m in status["members"]}
    assert states[nbdkits[1].uri] == "replacing", status
    assert states[new.uri] == "replacement_target", status
    # Watched at the throttled rate for a while, then at full speed until the copy is done.
    slow_until = time.monotonic() + 2
    raised = False
    while replace_task(status := array.status()) is not None:
        assert status["health"] not in ("degraded", "failed"), status
        assert all(s in ("active", "replacing") for s in array.role_states()), status
        if not raised and time.monotonic() > slow_until:
            array.cli("speed-limit", "--max", "200M")
            raised = True
        time.sleep(0.1)
    array.cli("speed-limit", "--max", "200M")
    array.cli("status", "--watch", timeout=300)
    status = array.status()
    names = [m["name"] for m in status["members"] if m["role"] is not None]
    assert names[1] == new.uri, status
    assert array.role_states() == ["active"] * 3, status
    fio_verify(array, tmp_path)
    scrub_clean(array)
    array.stop()


@pytest.mark.slow
def test_replace_under_fio(tmp_path, members, arrays):
    require_tools("nbdkit", "fio")
    nbdkits, array = new_array(tmp_path, members, arrays, "5", "replace")
    array.extra = ["--speed-max", "16M"]
    array.start()
    job = subprocess.Popen(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1", "--rate=4m,4m"),
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    time.sleep(0.5)
    new = members("new").start()
    waiter = subprocess.Popen([RAIDKIT_BIN, "replace", "role 1", "--with", new.uri, "--wait",
                               "--admin", str(array.admin_sock)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    seen = set()
    while waiter.poll() is None or job.poll() is None:
        status = array.status()
        seen.add(status["health"])
        assert status["health"] not in ("degraded", "failed"), status
        time.sleep(0.1)
    assert waiter.returncode == 0, waiter.stdout.read()
    assert "rebuilding" in seen, f"the replace was never seen running: {seen}"
    check_fio(job.stdout.read(), "fio during replace")
    status = array.status()
    names = [m["name"] for m in status["members"] if m["role"] is not None]
    assert names[1] == new.uri, status
    assert array.role_states() == ["active"] * 3, status
    fio_verify(array, tmp_path)
    array.stop()


@pytest.mark.slow
def test_scrub_finds_and_repairs_corruption(tmp_path, members, arrays):
    require_tools("nbdkit", "fio")
    nbdkits, array = new_array(tmp_path, members, arrays, "6", "scrub")
    array.start()
    proc = run(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1"), timeout=300, cwd=tmp_path)
    check_fio(proc, "fio write")
    array.stop()
    victim = nbdkits[2]
    examined = json.loads(run([RAIDKIT_BIN, "examine", "--json", str(victim.image)]).stdout)
    data_offset = examined[0]["data_offset_bytes"]
    member_offset = 3 * MIB + 4096 + 123
    with open(victim.image, "r+b") as f:
        f.seek(data_offset + member_offset)
        f.write(rng_for("scrub-corruption").randbytes(1000))
    array.start()
    report = array.cli("scrub", "--wait", timeout=300).stdout
    assert " 0 mismatches" not in report, report
    assert f"role 2 {victim.uri}" in report, report
    assert f"at data offset {member_offset}" in report, report
    status = array.status()
    first = status["last_scrub"]["first_mismatches"][0]
    assert first["member"].startswith(victim.uri) and first["role"] == 2, status
    assert first["member_offset"] == member_offset, status
    repaired = array.cli("scrub", "--repair", "--wait", timeout=300).stdout
    assert " 0 repaired" not in repaired, repaired
    scrub_clean(array)
    fio_verify(array, tmp_path)
    array.stop()


@pytest.mark.slow
def test_rebuild_throttle(tmp_path, members, arrays):
    require_tools("nbdkit", "fio")
    limit = 6 * MIB
    nbdkits, array = new_array(tmp_path, members, arrays, "1", "throttle")
    array.start()
    fail_and_write(array, tmp_path)
    array.cli("speed-limit", "--min", "1M", "--max", str(limit))
    spare = members("spare0").start()
    array.cli("add", spare.uri)
    wait_task(array)
    samples = []
    while True:
        status = array.status()
        task = status["task"]
        if task is None:
            break
        samples.append((time.monotonic(), task["done_bytes"]))
        time.sleep(0.25)
    # Skip the first sample (the rebuild may have started between add and it).
    assert len(samples) >= 8, samples
    (t0, d0), (t1, d1) = samples[1], samples[-1]
    rate = (d1 - d0) / (t1 - t0)
    print(f"rebuild rate {rate / MIB:.2f} MiB/s with max {limit / MIB:.0f} MiB/s")
    assert rate <= limit * 1.10, f"rebuild ran at {rate / MIB:.2f} MiB/s over the limit"
    assert rate >= limit * 0.5, f"rebuild ran at only {rate / MIB:.2f} MiB/s"
    assert array.role_states() == ["active"] * 2
    array.stop()


@pytest.mark.slow
def test_spare_at_start_takes_over(tmp_path, members, arrays):
    require_tools("nbdkit", "fio")
    nbdkits, array = new_array(tmp_path, members, arrays, "10", "spare")
    spare = members("spare0").start()
    array.extra = ["--spare", spare.uri]
    array.start()
    status = array.status()
    assert [m["state"] for m in status["members"]] == ["active"] * 4 + ["spare"], status
    proc = run(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1"), timeout=300, cwd=tmp_path)
    check_fio(proc, "fio write")
    nbdkits[3].write_flag.touch()
    proc = run(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1", "--randseed=7"), timeout=300,
               cwd=tmp_path)
    check_fio(proc, "fio while role 3 fails")
    array.cli("status", "--watch", timeout=300)
    status = array.status()
    names = [m["name"] for m in status["members"] if m["role"] is not None]
    assert names[3] == spare.uri, status
    assert array.role_states() == ["active"] * 4, status
    array.stop()
    array.start()
    assert array.role_states() == ["active"] * 4, array.status()
    fio_verify_seed(array, tmp_path, 7)
    scrub_clean(array)
    array.stop()


def fio_verify_seed(array, cwd, seed):
    proc = run(fio_cmd(array.uri, FIO_BYTES, "--verify_only", f"--randseed={seed}"),
               timeout=300, cwd=cwd)
    check_fio(proc, "verify pass")


@pytest.mark.slow
def test_returning_member_is_rebuilt(tmp_path, members, arrays):
    """A remote member whose server dies and comes back (same data, now stale) is not trusted:
    the operator removes it and adds it back, and it is rebuilt."""
    require_tools("nbdkit", "fio")
    nbdkits, array = new_array(tmp_path, members, arrays, "5", "back")
    array.start()
    victim = nbdkits[1]
    job = subprocess.Popen(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1", "--rate=8m,8m"),
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    time.sleep(0.7)
    victim.kill()
    out, _ = job.communicate(timeout=300)
    check_fio(out, "fio while a member's server dies")
    wait_faulty(array, [1], time.monotonic(), IO_TIMEOUT_S + DETECT_SLACK_S)
    victim.start()
    array.cli("remove", victim.uri)
    assert array.role_states()[1] == "missing", array.status()
    array.cli("add", victim.uri, "--wait", timeout=300)
    status = array.status()
    assert array.role_states() == ["active"] * 3, status
    assert [m["name"] for m in status["members"]][1] == victim.uri, status
    fio_verify(array, tmp_path)
    scrub_clean(array)
    array.stop()


# level -> (members, members failed) for the initial-sync test: the RAID 5 of 4.
SYNC_LEVELS = {"5": (4, 1), "6": (5, 2)}


@pytest.mark.slow
@pytest.mark.parametrize("level", list(SYNC_LEVELS))
def test_writes_during_initial_sync_survive_member_failure(tmp_path, members, arrays, level):
    """Issue 10 item 1: members full of old data (not cheap to zero: NBD members), so the
    array starts with a throttled initial sync; fio writes random 4-64 KiB blocks while the
    sync has barely started, members fail, and every block must verify from the degraded
    array (a read-modify-write on an unsynced stripe kept its wrong parity: blocks were lost)."""
    require_tools("nbdkit", "fio")
    count, fail = SYNC_LEVELS[level]
    rng = random.Random(f"{SEED}:sync{level}")
    nbdkits = [members(f"m{i}") for i in range(count)]
    for m in nbdkits:
        m.image.write_bytes(rng.randbytes(MEMBER_BYTES))
        m.start()
    uris = [m.uri for m in nbdkits]
    # No used-regions map: this is the initial sync over old data (with one, a region's first
    # write zeroes its stripes and nothing is synced; test_used_map.py covers that).
    out = run([RAIDKIT_BIN, "create", "--force", "--level", level, "--chunk", CHUNK,
               "--no-used-map", "--name", f"s{level}", *uris]).stdout
    assert "initial sync pending" in out, out
    array = arrays(tmp_path, f"s{level}", uris,
                   extra=["--speed-min", "256K", "--speed-max", "256K"]).start()
    status = array.status()
    assert status["health"] == "resyncing", status
    # 24 MiB of blocks scattered over 64 MiB, so many stripes get one partial write: where
    # later writes cover the same range, a reconstruct-write among them regenerates the parity
    # an earlier read-modify-write left wrong, and hides the loss.
    size = 64 * MIB
    write = ["fio", "--name=sync", "--ioengine=nbd", f"--uri={array.uri}", "--rw=randwrite",
             "--bsrange=4k-64k", "--blockalign=4k", "--iodepth=16", f"--size={size}",
             f"--io_size={24 * MIB}", f"--randseed={SEED}", "--verify=crc32c",
             "--verify_state_save=0"]
    check_fio(run([*write, "--do_verify=0", "--end_fsync=1"], timeout=120, cwd=tmp_path),
              "writes during the initial sync")
    status = array.status()
    assert status["health"] == "resyncing", status
    # The sync (per member bytes) passed less than half of the written range.
    data_members = count - (1 if level == "5" else 2)
    task = status["task"]
    assert task["kind"] == "initial_sync", status
    assert task["done_bytes"] * data_members < size // 2, status
    for role in range(1, 1 + fail):
        array.cli("fail", uris[role])
    assert array.status()["health"] == "degraded", array.status()
    check_fio(run([*write, "--verify_only"], timeout=120, cwd=tmp_path),
              f"verify with {fail} member(s) failed")
    array.stop()


class FuseMember:
    """A local *file* member that really blocks in the kernel: ``nbdkit memory`` behind the
    pause filter, mounted as a file with ``nbdfuse``. Once paused, every read and write of the
    file waits in the FUSE driver (the caller is stuck inside pread/pwrite) until resumed."""

    def __init__(self, workdir, name, size=MEMBER_BYTES):
        self.dir = Path(workdir)
        self.sock = self.dir / f"{name}.sock"
        self.pause_sock = self.dir / f"{name}.pause"
        self.mount = self.dir / f"{name}.mnt"
        self.path = self.mount / "disk"
        self.mount.mkdir()
        self.nbdkit = subprocess.Popen(
            ["nbdkit", "--foreground", "--exit-with-parent", "-U", str(self.sock),
             "--filter=pause", "memory", str(size), f"pause-control={self.pause_sock}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.fuse = None
        self.paused = False
        self._wait_for(self.sock.exists, "nbdkit not listening")
        self.fuse = subprocess.Popen(["nbdfuse", str(self.path), "--unix", str(self.sock)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self._wait_for(self.path.exists, "nbdfuse did not mount")

    def _wait_for(self, ready, what):
        deadline = time.monotonic() + 10
        while not ready():
            assert time.monotonic() < deadline, what
            time.sleep(0.02)

    def _control(self, command, answer):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(10)
            c.connect(str(self.pause_sock))
            c.sendall(command)
            assert c.recv(1) == answer, f"nbdkit pause filter did not answer {answer!r}"

    def pause(self):
        self._control(b"p", b"P")
        self.paused = True

    def cleanup(self):
        """Resumes first (a thread stuck on the paused file cannot even be killed), then a lazy
        unmount (raidkit may still hold the file open) and the servers stopped."""
        if self.paused:
            self._control(b"r", b"R")
            self.paused = False
        if self.fuse is not None:
            subprocess.run(["fusermount3", "-u", "-z", str(self.mount)], timeout=30, check=False)
            try:
                self.fuse.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.fuse.kill()
                self.fuse.wait()
            self.fuse = None
        self.nbdkit.kill()
        self.nbdkit.wait()


@pytest.fixture
def fuse_members(tmp_path):
    yield from tracking(lambda name: FuseMember(tmp_path, name), FuseMember.cleanup)


@pytest.mark.parametrize("level", ["1", "5", "6"])
def test_local_member_stuck_in_kernel(tmp_path, arrays, fuse_members, level):
    """File members whose reads and writes hang inside the kernel (FUSE files whose server is
    paused; RAID 6: two of them) are abandoned at --io-timeout with --local-io-deadline: no client request waits
    much longer, the members are faulty, status reports the stuck calls, the array serves
    degraded and verifies, and SIGTERM stops the server at once although a call is still
    stuck (issue 10 item 4)."""
    require_tools("nbdkit", "nbdfuse", "fusermount3", "fio")
    count, fail = LEVELS[level]
    victims = list(range(1, 1 + fail))
    files, stuck = [], []
    for i in range(count):
        if i in victims:
            stuck.append(fuse_members(f"m{i}"))
            files.append(str(stuck[-1].path))
            continue
        image = tmp_path / f"m{i}.img"
        with open(image, "wb") as f:
            f.truncate(MEMBER_BYTES)
        files.append(str(image))
    run([RAIDKIT_BIN, "create", "--level", level, "--chunk", CHUNK, "--name", f"k{level}",
         *files])
    array = arrays(tmp_path, f"k{level}", files, extra=["--local-io-deadline"]).start()
    job = subprocess.Popen(fio_cmd(array.uri, FIO_BYTES, "--do_verify=1", "--rate=8m,8m"),
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    wait_health(array, "active")
    time.sleep(0.3)
    since = time.monotonic()
    for m in stuck:
        m.pause()
    out, _ = job.communicate(timeout=120)
    check_fio(out, f"fio while roles {victims} of raid{level} are stuck in the kernel")
    waited = max_completion_s(out)
    print(f"raid{level} local member stuck: longest client request {waited:.2f} s")
    # One timeout: stuck members in one batch are called together and time out together, and
    # a member another request already waits on is given up when that request's deadline ends.
    # A quarter-timeout grace is left only for a stuck member first called after the request's
    # deadline with nothing else waiting on it (docs/DESIGN.md "Stuck local members"), so
    # RAID 6 is bounded at 1.25 timeouts: measured 2.00-2.02 s in most runs, 2.50-2.51 s in the
    # others (before the batch's calls were started together, 2.50 s in nearly every run).
    # The slack is tight on purpose: 1.5 timeouts must not fit. Without --local-io-deadline
    # the request never completes at all.
    bound = IO_TIMEOUT_S * (1 + (len(victims) - 1) / 4) + STUCK_WAIT_SLACK_S
    assert waited <= bound, \
        f"a client request took {waited:.1f} s (timeout {IO_TIMEOUT_S} s)\n{out[-3000:]}"
    status = wait_faulty(array, victims, since, IO_TIMEOUT_S + DETECT_SLACK_S)
    for member in status["members"]:
        if member["role"] in victims:
            assert member["abandoned_calls"] >= 1 and member["stuck_calls"] >= 1, member
    assert status["health"] == "degraded", status
    fio_verify(array, tmp_path)
    assert "stuck in the kernel" in array.logs(), array.logs()
    text = array.cli("status").stdout
    assert "abandoned" in text, text
    # SIGTERM while the call is still stuck: the array closes at once, without waiting for it.
    # Linux reaps no process while one of its threads sleeps uninterruptibly in the kernel (a
    # FUSE write, a dying disk; not even SIGKILL helps), so the exit status only comes once
    # the call returns: the FUSE server is resumed after the clean close is seen.
    proc = array.proc
    proc.send_signal(signal.SIGTERM)
    log = next(tmp_path.glob("serve-*.log"))
    deadline = time.monotonic() + 10
    while "closed cleanly" not in log.read_text():
        assert time.monotonic() < deadline, f"serve did not close the array{array.logs()}"
        time.sleep(0.05)
    for m in stuck:
        m.cleanup()
    rc = proc.wait(timeout=STOP_TIMEOUT_S)
    array.proc = None
    assert rc == 0, f"serve exited {rc} after SIGTERM{array.logs()}"
    assert not array.admin_sock.exists(), "admin socket left behind"
