"""Remote members that come back by themselves (issue 4, "Members on other machines").

The members are nbdkit ``file`` exports over image files (``Nbdkit`` from test_faults), so a
restarted nbdkit serves the same data and superblock again. ``raidkit serve`` runs with
``--reconnect-interval-max 2`` (retries every 1-2 s) and no operator command is given:

- ``test_member_comes_back_by_itself``: RAID 1; data written; one member's nbdkit killed;
  more data written (the member goes faulty); an nbdkit serving a *blank* image on the same
  socket is not added (status keeps the member faulty, the log says why); the member's own
  nbdkit restarted: status shows it rebuilding (a throttled partial rebuild of the bitmap's
  dirty regions) then active; all data reads back (qemu-io ``read -P``) and ``scrub --wait``
  finds 0 mismatches.
- ``test_member_missing_at_start_comes_back``: RAID 5 whose member's server is down when
  ``serve`` starts (left out, degraded); data written; the server started: the member is added
  back and rebuilt; data and scrub check.
- ``test_no_reconnect_leaves_member_faulty``: with ``--no-reconnect`` a restarted member's
  server is left alone (still faulty 5 s later).

``test_member_comes_back_by_itself[tls]`` runs the first test's course with the second member an
``nbds+unix://`` export behind ``nbdkit --tls=require --tls-verify-peer`` (certificates from
test_tls's certtool ``pki``): instead of the blank image, a *plaintext* nbdkit of the member's
own image on its socket is not taken (the log says the server does not offer TLS); the member's
TLS nbdkit restarted on the same socket comes back, is rebuilt, and the data and scrub check.
"""

import time

import pytest

import skips

from conftest import RAIDKIT_BIN, SERVER_KIND, require_tools, run
from test_faults import Array, Nbdkit, members, arrays, scrub_clean  # noqa: F401 (fixtures)
from test_tls import pki  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit",
                                reason=skips.env_reason("raidkit-only (RAIDKIT_TEST_SERVER is not raidkit)"))

MIB = 1024 * 1024
# A rebuild of the 4 MiB written while degraded takes ~4 s at 1 MiB/s: long enough to see.
EXTRA = ["--reconnect-interval-max", "2", "--speed-min", "256K", "--speed-max", "1M"]
BACK_WITHIN_S = 20


def create(level, nbdkits, name):
    run([RAIDKIT_BIN, "create", "--level", level, "--chunk", "64K", "--name", name,
         "--bitmap-region", "1M", *[str(m.image) for m in nbdkits]])


def qemu_io(array, *cmds):
    args = ["qemu-io", "-f", "raw"]
    for c in cmds:
        args += ["-c", c]
    proc = run([*args, array.uri], timeout=120)
    assert "Pattern verification failed" not in proc.stdout, proc.stdout
    assert "error" not in proc.stdout.lower(), proc.stdout
    return proc


def role_state(array, role):
    return array.role_states()[role]


def wait_state(array, role, state, timeout_s):
    deadline = time.monotonic() + timeout_s
    while (now := role_state(array, role)) != state:
        assert time.monotonic() < deadline, \
            f"role {role} not {state} within {timeout_s} s: {array.status()}{array.logs()}"
        time.sleep(0.1)
    return now


def wait_log(array, text, timeout_s):
    deadline = time.monotonic() + timeout_s
    while text not in array.logs():
        assert time.monotonic() < deadline, f"log never said {text!r}{array.logs()}"
        time.sleep(0.1)


def wait_back(array, role):
    """Polls until `role` is active again; returns the states seen on the way."""
    seen = []
    deadline = time.monotonic() + BACK_WITHIN_S
    while (state := role_state(array, role)) != "active":
        if not seen or seen[-1] != state:
            seen.append(state)
        assert time.monotonic() < deadline, \
            f"role {role} not back within {BACK_WITHIN_S} s (seen {seen}): {array.status()}" \
            f"{array.logs()}"
        time.sleep(0.05)
    return seen


def check_data(array):
    qemu_io(array, f"read -P 0x11 0 {4 * MIB}", f"read -P 0x22 {4 * MIB} {4 * MIB}")
    array.cli("speed-limit", "--min", "1M", "--max", "200M")  # the scrub at full speed
    scrub_clean(array)
    assert array.role_states() == ["active"] * len(array.members), array.status()


def serve(tmp_path, members, arrays, level, count, name, started=None, extra=EXTRA, pki=None):
    """A level ``level`` array ``name`` created over ``count`` nbdkit members, the first
    ``started`` of them (default: all) started, served with ``extra``: (nbdkits, array).
    With ``pki`` (test_tls's certificates) the last member is served over TLS only, clients
    verified (its URI an nbds+unix one)."""
    require_tools("nbdkit", "qemu-io")
    nbdkits = [members(f"m{i}") for i in range(count)]
    if pki:
        nbdkits[-1].use_tls(pki["server"], pki["client"], verify_peer=True)
    create(level, nbdkits, name)
    for m in nbdkits[:started]:
        m.start()
    array = arrays(tmp_path, name, [m.uri for m in nbdkits], extra=extra).start()
    return nbdkits, array


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_member_comes_back_by_itself(tmp_path, members, arrays, tls, request):
    pki = request.getfixturevalue("pki") if tls else None
    nbdkits, array = serve(tmp_path, members, arrays, "1", 2, "back", pki=pki)
    victim = nbdkits[1]
    qemu_io(array, f"write -P 0x11 0 {4 * MIB}", "flush")
    victim.kill()
    qemu_io(array, f"write -P 0x22 {4 * MIB} {4 * MIB}", "flush")
    wait_state(array, 1, "faulty", 15)
    wait_log(array, "is unreachable", 10)

    if tls:
        # A plaintext server on the member's socket, with the member's own image: never
        # used for an nbds URI.
        wrong, reason = Nbdkit(tmp_path, "m1"), "the server does not offer TLS"
    else:
        # A server on the same socket with a blank image: not this array's member.
        wrong, reason = Nbdkit(tmp_path, "stranger"), "no superblock of this array"
        wrong.sock = victim.sock
    wrong.start()
    wait_log(array, "answers but is not added back", 10)
    assert reason in array.logs(), array.logs()
    time.sleep(3)
    assert role_state(array, 1) == "faulty", array.status()
    assert array.status()["health"] == "degraded", array.status()
    wrong.kill()

    victim.start()
    seen = wait_back(array, 1)
    assert "rebuilding" in seen, f"never seen rebuilding: {seen}"
    assert "raidkit: member " + victim.uri + " is reachable again; adding it back (rebuild of" \
        in array.logs(), array.logs()
    check_data(array)
    array.stop()


def test_member_missing_at_start_comes_back(tmp_path, members, arrays):
    nbdkits, array = serve(tmp_path, members, arrays, "5", 3, "late", started=2)
    assert role_state(array, 2) == "missing", array.status()
    qemu_io(array, f"write -P 0x11 0 {4 * MIB}", f"write -P 0x22 {4 * MIB} {4 * MIB}",
            "flush")
    nbdkits[2].start()
    wait_back(array, 2)
    assert "is reachable again; adding it back" in array.logs(), array.logs()
    check_data(array)
    array.stop()


def test_no_reconnect_leaves_member_faulty(tmp_path, members, arrays):
    nbdkits, array = serve(tmp_path, members, arrays, "1", 2, "stay",
                           extra=[*EXTRA, "--no-reconnect"])
    victim = nbdkits[1]
    victim.kill()
    qemu_io(array, f"write -P 0x22 0 {MIB}", "flush")
    wait_state(array, 1, "faulty", 15)
    victim.start()
    time.sleep(5)
    assert role_state(array, 1) == "faulty", array.status()
    assert "adding it back" not in array.logs(), array.logs()
    array.stop()

