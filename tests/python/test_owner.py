"""Two servers on the same remote members (issue 10 item 6): the owner record and its lease.

The members are nbdkit ``file`` exports (``Nbdkit`` from test_faults), which accept any number
of connections, so no lock can stop a second ``raidkit serve`` from reaching them: the owner
record in the superblocks does. "Another host" is simulated by running the second server in
its own pid namespace (``unshare --pid --fork --mount-proc``): it cannot look the first one up
in /proc, so, as on another machine, only the lease tells whether the first still lives.

- ``test_second_server_on_this_host_is_refused``: a second server on the same NBD members
  refuses, naming the first one's pid, and so do ``journal add`` and ``create --force``;
  ``examine`` still works; after the first is killed
  with SIGKILL (no clean stop, its record stays) a new server starts without any flag, since
  the recorded process is gone.
- ``test_another_host_waits_for_the_lease_or_forces``: from another pid namespace the second
  server is refused while the first runs, naming its lease and ``--force-owner``; still
  refused right after the first is SIGKILLed (the lease has not run out); with
  ``--force-owner`` it starts.
- ``test_a_server_taken_over_stops``: a live first server whose array is taken over with
  ``--force-owner`` from another namespace stops by itself at its next renewal (exit 3,
  saying who took it), and writes nothing more.
- ``test_a_refused_second_server_leaves_the_journal_attached``: a second server started
  without the array's write-through journal is refused (the first one serves it) before it
  detaches the journal from the superblocks (it used to detach it first, leaving the served
  array without its journal reference); after a SIGKILL of the first, a start with the journal
  replays it.
- ``test_clean_stop_clears_the_record``: after SIGTERM the record is gone from every member
  (``examine`` shows no owner), so another host starts without waiting or forcing.
"""

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

import skips

from conftest import RAIDKIT_BIN, SERVER_KIND, require_tools, run
from test_faults import Array, members, arrays  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit",
                                reason=skips.env_reason("raidkit-only (RAIDKIT_TEST_SERVER is not raidkit)"))

REFUSE_WITHIN_S = 20
RENEW_INTERVAL_S = 10


def setup_array(tmp_path, members, name):
    require_tools("nbdkit")
    nbdkits = [members(f"m{i}") for i in range(2)]
    run([RAIDKIT_BIN, "create", "--level", "1", "--name", name,
         *[str(m.image) for m in nbdkits]])
    for m in nbdkits:
        m.start()
    return nbdkits


def other_host(cmd):
    """`cmd` in a new pid namespace: to it, this host's processes are invisible."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to simulate a second host")
    return ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *cmd]


class OtherHost:
    """A `raidkit serve` in its own pid namespace. `unshare` ignores SIGTERM while it waits for
    its child, so the child (raidkit) is signalled directly."""

    def __init__(self, cmd):
        self.proc = subprocess.Popen(other_host(cmd), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)

    def serving(self):
        line = self.proc.stdout.readline()
        assert "raidkit: serving" in line, f"start failed: {line}{self.proc.stderr.read()}"
        return self

    def stop(self):
        """SIGTERM to raidkit; asserts a clean exit."""
        if self.proc.poll() is None:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
            for child in children.split():
                os.kill(int(child), signal.SIGTERM)
        rc = self.proc.wait(timeout=30)
        assert rc == 0, f"exit {rc}: {self.proc.stderr.read()}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()  # --kill-child: raidkit goes with it
            self.proc.wait()


def serve_cmd(tmp_path, tag, uris, *extra):
    return [RAIDKIT_BIN, "serve", "--unix", str(tmp_path / f"{tag}.sock"), *extra, *uris]


def refused(cmd):
    """Runs a serve that must refuse; returns its stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=REFUSE_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"a second server started: {cmd}\n{out}\n{err}")
    assert proc.returncode != 0, f"a second server started: {cmd}\n{out}\n{err}"
    return err


def first_server(tmp_path, arrays, name, nbdkits):
    d = tmp_path / "first"
    d.mkdir()
    return arrays(d, name, [m.uri for m in nbdkits]).start()


def owners(nbdkits):
    """The "owner" lines `raidkit examine` prints for each member image."""
    out = run([RAIDKIT_BIN, "examine", *[str(m.image) for m in nbdkits]]).stdout
    return [line.strip() for line in out.splitlines() if line.strip().startswith("owner")]


def test_second_server_on_this_host_is_refused(tmp_path, members, arrays):
    nbdkits = setup_array(tmp_path, members, "twice")
    first = first_server(tmp_path, arrays, "twice", nbdkits)
    uris = [m.uri for m in nbdkits]
    err = refused(serve_cmd(tmp_path, "b", uris))
    assert f"in use by raidkit pid {first.proc.pid}" in err, err
    assert "runs on this host" in err, err
    assert "--force-owner" not in err, f"forcing cannot help against a running server: {err}"
    # Forcing does not override a server that runs here either.
    err = refused(serve_cmd(tmp_path, "b", uris, "--force-owner"))
    assert f"pid {first.proc.pid}" in err, err
    # Nor do commands that rewrite a stopped array's superblocks, --force or not.
    for cmd in (["journal", "add", str(tmp_path / "j.img"), *uris],
                ["create", "--level", "1", "--force", *uris]):
        proc = run([RAIDKIT_BIN, *cmd], check=False)
        assert proc.returncode != 0, f"{cmd} ran on a served array"
        assert f"in use by raidkit pid {first.proc.pid}" in proc.stderr, proc.stderr
    # Read-only commands still work while it is served, and show the owner.
    shown = owners(nbdkits)
    assert len(shown) == 2 and all(f"pid {first.proc.pid}" in s for s in shown), shown
    # SIGKILL: the record stays, but its process is gone.
    first.proc.kill()
    first.proc.wait()
    first.proc = None
    second = arrays(tmp_path, "twice", uris).start()
    second.stop()


def test_another_host_waits_for_the_lease_or_forces(tmp_path, members, arrays):
    nbdkits = setup_array(tmp_path, members, "hosts")
    first = first_server(tmp_path, arrays, "hosts", nbdkits)
    uris = [m.uri for m in nbdkits]
    err = refused(other_host(serve_cmd(tmp_path, "b", uris)))
    assert "array \"hosts\" is in use by raidkit pid" in err, err
    assert "lease renewed" in err and "--force-owner" in err, err
    first.proc.kill()
    first.proc.wait()
    first.proc = None
    # Killed, but another host cannot know: its lease (30 s) still holds.
    err = refused(other_host(serve_cmd(tmp_path, "b", uris)))
    assert "s for its lease to run out" in err, err
    # The operator knows it is gone.
    second = OtherHost(serve_cmd(tmp_path, "b", uris, "--force-owner"))
    try:
        second.serving().stop()
    finally:
        second.kill()


def test_a_server_taken_over_stops(tmp_path, members, arrays):
    nbdkits = setup_array(tmp_path, members, "taken")
    first = first_server(tmp_path, arrays, "taken", nbdkits)
    uris = [m.uri for m in nbdkits]
    second = OtherHost(serve_cmd(tmp_path, "b", uris, "--force-owner"))
    try:
        second.serving()
        rc = first.proc.wait(timeout=RENEW_INTERVAL_S + 10)
        first.proc = None
        assert rc == 3, f"exit {rc}{first.logs()}"
        assert "was taken over by raidkit pid" in first.logs(), first.logs()
        assert second.proc.poll() is None, "the new owner keeps serving"
        second.stop()
    finally:
        second.kill()


def test_clean_stop_clears_the_record(tmp_path, members, arrays):
    nbdkits = setup_array(tmp_path, members, "clean")
    first = first_server(tmp_path, arrays, "clean", nbdkits)
    assert len(owners(nbdkits)) == 2
    first.stop()
    assert owners(nbdkits) == [], "a clean stop clears the owner record"
    second = OtherHost(serve_cmd(tmp_path, "b", [m.uri for m in nbdkits]))
    try:
        second.serving().stop()
    finally:
        second.kill()


def test_a_refused_second_server_leaves_the_journal_attached(tmp_path, members, arrays):
    require_tools("nbdkit")
    nbdkits = [members(f"m{i}") for i in range(2)]
    images = [str(m.image) for m in nbdkits]
    journal = str(tmp_path / "journal.img")
    run([RAIDKIT_BIN, "create", "--level", "1", "--name", "jr", *images])
    run([RAIDKIT_BIN, "journal", "add", "--size", "8M", journal, *images])
    for m in nbdkits:
        m.start()
    uris = [m.uri for m in nbdkits]
    d = tmp_path / "first"
    d.mkdir()
    first = arrays(d, "jr", uris, extra=["--journal", journal]).start()
    err = refused(serve_cmd(tmp_path, "b", uris))
    assert f"in use by raidkit pid {first.proc.pid}" in err, err
    assert "detached" not in err and "running without it" not in err, err
    # Killed: no superblock write of the first server can restore a reference the second
    # removed. The journal is still the array's: a start with it replays it.
    first.proc.kill()
    first.proc.wait()
    first.proc = None
    second = arrays(tmp_path, "jr", uris, extra=["--journal", journal]).start()
    assert "(write-through): replayed" in second.logs(), second.logs()
    second.stop()
