"""Limits a hostile client cannot exhaust (issue 14): ``raidkit serve`` attacked with plain
sockets while libnbd's nbdcopy/nbdinfo, a well-behaved client, is served.

- ``test_silent_flood_from_one_address_leaves_the_others_served``: 300 connections from
  127.0.0.2 that never speak take the 8 slots of ``--max-connections-per-client 8``; the other
  292 are closed at once, with one rate-limited log line naming the address, the limit and
  the flag; nbdcopy from 127.0.0.1 reads its data meanwhile.
- ``test_silent_flood_from_the_clients_own_address_ends_at_the_handshake_deadline``: 300
  silent connections from 127.0.0.1 itself take every slot of the listener (the total limit is
  logged); they are dropped at ``--handshake-timeout 2``, and nbdcopy, retried, gets its data
  within the deadline plus a margin.
- ``test_one_byte_at_a_time_is_dropped_at_the_handshake_deadline``: a client that sends a
  byte every 0.3 s is dropped once the whole handshake has taken the deadline, not before.
- ``test_oversized_option_is_refused_with_too_big``: an option over ``--max-option-size`` gets
  NBD_REP_ERR_TOO_BIG, then the connection ends; one at the limit is read and answered.
- ``test_idle_connection_is_closed_and_an_active_one_is_not``: with ``--idle-timeout 2`` a
  client that negotiated and sends nothing is disconnected after 2 s; one sending a request
  every 0.4 s is served on.
- ``test_a_client_that_never_reads_its_replies_is_cut``: 64 reads of 8 MiB never read hold
  the whole ``--buffer-memory 64M``; ``--reply-timeout 2`` cuts that client and nbdcopy, which
  needs buffers too, gets its data.
- ``test_daemon_takes_the_limits_from_its_config``: the ``[daemon]`` keys reach its listener.
- ``test_help_shows_every_limit_with_its_default``.

Timing: deadlines are short (2 s) and set by flags; a bound on how late something may happen
has a margin of 15 s for a loaded machine; nothing is asserted earlier than its deadline.
"""

import socket
import struct
import subprocess
import threading
import time

import pytest

from conftest import RAIDKIT_BIN, SERVER_KIND, free_tcp_port, require_tools, rng_for, run
from test_daemon import Daemon

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit", reason="raidkit only")

MIB = 1024 * 1024
MARGIN_S = 15.0
DEADLINE_S = 2
FLOOD = 300

OPTION_MAGIC = 0x49484156454F5054  # IHAVEOPT
REPLY_MAGIC = 0x3E889045565A9
OPT_LIST, OPT_INFO, OPT_GO = 3, 6, 7
REP_ACK, REP_ERR_INVALID, REP_ERR_TOO_BIG = 1, 2**31 + 3, 2**31 + 9
REQUEST_MAGIC, SIMPLE_REPLY_MAGIC = 0x25609513, 0x67446698
CMD_READ = 0


class Served:
    """``raidkit serve`` of a RAID 1 on two 16 MiB RAM members on 127.0.0.1, with ``flags``."""

    def __init__(self, workdir, *flags):
        self.port = free_tcp_port()
        self.stderr_path = workdir / "server.stderr"
        cmd = [RAIDKIT_BIN, "serve", "--listen", f"127.0.0.1:{self.port}", *flags, "--create",
               "--level", "1", "--size", "16M", "--name", "lim", "mem:16M", "mem:16M"]
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        assert "raidkit: serving" in line, f"{line}{self.stderr()}"
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.uri = f"nbd://127.0.0.1:{self.port}/"

    def stderr(self):
        return self.stderr_path.read_text()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            assert self.proc.wait(timeout=60) == 0, self.stderr()


@pytest.fixture
def serve(tmp_path):
    require_tools("nbdcopy", "nbdinfo")
    servers = []

    def factory(*flags):
        srv = Served(tmp_path, *flags)
        servers.append(srv)
        return srv

    yield factory
    for srv in servers:
        srv.stop()


def write_pattern(tmp_path, uri):
    """Writes 4 MiB of seeded data at offset 0; returns it."""
    data = rng_for(str(tmp_path)).randbytes(4 * MIB)
    src = tmp_path / "pattern"
    src.write_bytes(data)
    run(["nbdcopy", str(src), uri], timeout=60)
    return data


def read_back(tmp_path, uri, data, check=True):
    """nbdcopy reads the export; True if it got ``data`` at offset 0 (with ``check``, a failed
    copy fails the test)."""
    out = tmp_path / "back"
    proc = run(["nbdcopy", uri, str(out)], timeout=60, check=check)
    if proc.returncode != 0:
        return False
    assert out.read_bytes()[: len(data)] == data
    return True


def connect(port, source="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(MARGIN_S)
    s.connect(("127.0.0.1", port))
    return s


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, f"connection closed after {len(buf)} of {n} bytes"
        buf += chunk
    return buf


def greeted_or_closed(s):
    """'greeted' if the server sent its greeting, 'closed' if it closed the connection."""
    try:
        first = s.recv(1)
    except ConnectionResetError:
        return "closed"
    return "greeted" if first else "closed"


def closed_after(s, bound_s):
    """Reads and drops until the server closes ``s``; the seconds that took (fails after
    ``bound_s``)."""
    started = time.monotonic()
    while True:
        left = bound_s - (time.monotonic() - started)
        assert left > 0, f"connection still open after {bound_s} s"
        s.settimeout(left)
        try:
            if not s.recv(65536):
                return time.monotonic() - started
        except ConnectionResetError:
            return time.monotonic() - started
        except socket.timeout:
            pytest.fail(f"connection still open after {bound_s} s")


def handshake_start(s):
    """Reads the greeting and sends the client flags (fixed newstyle, no zeroes)."""
    greeting = recv_exact(s, 18)
    assert greeting[:16] == b"NBDMAGICIHAVEOPT", greeting
    s.sendall(struct.pack(">I", 3))


def option_header(option, length):
    return struct.pack(">QII", OPTION_MAGIC, option, length)


def option_reply(s):
    magic, option, kind, length = struct.unpack(">QIII", recv_exact(s, 20))
    assert magic == REPLY_MAGIC, hex(magic)
    return option, kind, recv_exact(s, length)


def go(s):
    """Negotiates the default export with NBD_OPT_GO: the connection is in transmission."""
    handshake_start(s)
    s.sendall(option_header(OPT_GO, 6) + struct.pack(">IH", 0, 0))
    while True:
        _, kind, _ = option_reply(s)
        if kind == REP_ACK:
            return
        assert kind < 2**31, f"GO refused: {kind:#x}"


def read_request(s, cookie, offset, length):
    s.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_READ, cookie, offset, length))
    magic, error, got = struct.unpack(">IIQ", recv_exact(s, 16))
    assert (magic, error, got) == (SIMPLE_REPLY_MAGIC, 0, cookie)
    return recv_exact(s, length)


def flood(port, source):
    """FLOOD connections from ``source`` that never speak: (the ones greeted, kept open, and
    how many were closed at once)."""
    kept, closed = [], 0
    for _ in range(FLOOD):
        s = connect(port, source)
        if greeted_or_closed(s) == "greeted":
            kept.append(s)
        else:
            closed += 1
            s.close()
    return kept, closed


def wait_for_log(srv, text):
    """Waits (at most MARGIN_S) for ``text`` in the server's log: a connection's line is written
    once its last thread ended, just after its socket closed."""
    deadline = time.monotonic() + MARGIN_S
    while text not in srv.stderr():
        assert time.monotonic() < deadline, f"{text!r} not in the log:\n{srv.stderr()}"
        time.sleep(0.05)


def refusal_lines(srv, needle):
    return [line for line in srv.stderr().splitlines() if needle in line]


def test_silent_flood_from_one_address_leaves_the_others_served(serve, tmp_path):
    srv = serve("--max-connections-per-client", "8")
    data = write_pattern(tmp_path, srv.uri)
    started = time.monotonic()
    kept, closed = flood(srv.port, "127.0.0.2")
    assert (len(kept), closed) == (8, FLOOD - 8)
    # The well-behaved client (from 127.0.0.1) reads its data while the 8 are held.
    read_back(tmp_path, srv.uri, data)
    took = time.monotonic() - started
    lines = refusal_lines(srv, "refused a connection from 127.0.0.2")
    assert lines, srv.stderr()
    assert "8 connections open" in lines[0] and "--max-connections-per-client" in lines[0], lines
    # One line per 10 s at most: 292 refusals are not 292 lines.
    assert len(lines) <= 1 + int(took // 10) + 1, lines
    for s in kept:
        s.close()


def test_silent_flood_from_the_clients_own_address_ends_at_the_handshake_deadline(
        serve, tmp_path):
    srv = serve("--handshake-timeout", str(DEADLINE_S), "--max-connections-per-client", "64")
    data = write_pattern(tmp_path, srv.uri)
    flooded = time.monotonic()
    kept, closed = flood(srv.port, "127.0.0.1")
    # Every slot of the listener is taken (some may already have been freed at the deadline
    # on a slow machine, and taken again by the flood).
    assert len(kept) >= 64 and closed >= 1, (len(kept), closed)
    assert refusal_lines(srv, "64 connections are open, the most this listener takes")
    # The real client is retried until it gets in: at the latest once the deadline freed
    # the slots.
    while not read_back(tmp_path, srv.uri, data, check=False):
        assert time.monotonic() - flooded < DEADLINE_S + MARGIN_S, srv.stderr()
        time.sleep(0.2)
    for s in kept:
        closed_after(s, MARGIN_S)
    assert time.monotonic() - flooded >= DEADLINE_S
    wait_for_log(srv, f"handshake not finished within {DEADLINE_S} s")


def test_one_byte_at_a_time_is_dropped_at_the_handshake_deadline(serve, tmp_path):
    srv = serve("--handshake-timeout", str(DEADLINE_S))
    data = write_pattern(tmp_path, srv.uri)
    s = connect(srv.port)
    started = time.monotonic()
    handshake_start(s)
    trickle = option_header(OPT_LIST, 0)
    outcome = {}

    def send_slowly():
        sent = 0
        for byte in (trickle * 100)[:200]:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                break
            sent += 1
            time.sleep(0.3)
            if time.monotonic() - started > DEADLINE_S + MARGIN_S:
                break
        outcome["sent"] = sent

    sender = threading.Thread(target=send_slowly)
    sender.start()
    # Served meanwhile.
    read_back(tmp_path, srv.uri, data)
    closed_after(s, DEADLINE_S + MARGIN_S)
    elapsed = time.monotonic() - started
    sender.join()
    assert elapsed >= DEADLINE_S, f"dropped after {elapsed:.2f} s"
    assert outcome["sent"] >= 3, outcome
    wait_for_log(srv, f"handshake not finished within {DEADLINE_S} s")
    s.close()


def test_oversized_option_is_refused_with_too_big(serve, tmp_path):
    srv = serve("--max-option-size", "16K")
    data = write_pattern(tmp_path, srv.uri)
    s = connect(srv.port)
    handshake_start(s)
    s.sendall(option_header(OPT_GO, 1 << 20) + bytes(4096))
    option, kind, message = option_reply(s)
    assert (option, kind) == (OPT_GO, REP_ERR_TOO_BIG), (option, hex(kind), message)
    assert b"16384" in message, message
    closed_after(s, MARGIN_S)
    s.close()
    read_back(tmp_path, srv.uri, data)
    wait_for_log(srv, "--max-option-size")
    # At the limit: read, answered (LIST takes no data: INVALID), and the haggling goes on.
    s = connect(srv.port)
    handshake_start(s)
    s.sendall(option_header(OPT_LIST, 16 << 10) + bytes(16 << 10))
    assert option_reply(s)[:2] == (OPT_LIST, REP_ERR_INVALID)
    s.sendall(option_header(OPT_LIST, 0))
    kinds = []
    while not kinds or kinds[-1] != REP_ACK:
        kinds.append(option_reply(s)[1])
    s.close()


def test_idle_connection_is_closed_and_an_active_one_is_not(serve, tmp_path):
    srv = serve("--idle-timeout", str(DEADLINE_S))
    data = write_pattern(tmp_path, srv.uri)
    idle = connect(srv.port)
    go(idle)
    idle_since = time.monotonic()
    active = connect(srv.port)
    go(active)
    replies = {"n": 0}

    def keep_busy():
        # A request every 0.4 s for three idle limits: never idle for the limit.
        while time.monotonic() - idle_since < 3 * DEADLINE_S:
            replies["n"] += 1
            assert read_request(active, replies["n"], 0, 512) == data[:512]
            time.sleep(0.4)

    worker = threading.Thread(target=keep_busy)
    worker.start()
    read_back(tmp_path, srv.uri, data)
    closed_after(idle, DEADLINE_S + MARGIN_S)
    assert time.monotonic() - idle_since >= DEADLINE_S
    worker.join()
    assert replies["n"] >= 5, replies
    # Still open and served after three limits; then, left idle, closed too.
    assert read_request(active, 999, 4096, 512) == data[4096:4608]
    closed_after(active, DEADLINE_S + MARGIN_S)
    wait_for_log(srv, f"idle: no request for {DEADLINE_S} s")
    idle.close()
    active.close()


def test_a_client_that_never_reads_its_replies_is_cut(serve, tmp_path):
    srv = serve("--reply-timeout", str(DEADLINE_S), "--buffer-memory", "64M")
    data = write_pattern(tmp_path, srv.uri)
    hog = connect(srv.port)
    go(hog)
    hog.sendall(b"".join(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_READ, cookie, 0, 8 * MIB)
                         for cookie in range(64)))
    started = time.monotonic()
    read_back(tmp_path, srv.uri, data)
    assert time.monotonic() - started < DEADLINE_S + MARGIN_S
    closed_after(hog, MARGIN_S)
    wait_for_log(srv, f"took no byte of a reply for {DEADLINE_S} s")
    hog.close()


def test_daemon_takes_the_limits_from_its_config(tmp_path):
    require_tools("nbdinfo")
    port = free_tcp_port()
    members = [tmp_path / f"m{i}" for i in range(2)]
    run([RAIDKIT_BIN, "create", "--level", "1", "--name", "lim", "--size", "16M", *members])
    config = tmp_path / "raidkit.toml"
    config.write_text(
        f'[daemon]\nlisten = ["127.0.0.1:{port}"]\nadmin = "{tmp_path / "a.sock"}"\n'
        "max_connections_per_client = 2\nhandshake_timeout_secs = 3\n\n"
        f'[[array]]\nname = "lim"\nmembers = ["{members[0]}", "{members[1]}"]\n')
    daemon = Daemon(config, 1)
    try:
        connected = time.monotonic()
        kept = [connect(port, "127.0.0.2") for _ in range(3)]
        outcomes = [greeted_or_closed(s) for s in kept]
        assert outcomes == ["greeted", "greeted", "closed"], outcomes
        run(["nbdinfo", "--size", f"nbd://127.0.0.1:{port}/lim"], timeout=60)
        closed_after(kept[0], 3 + MARGIN_S)
        assert time.monotonic() - connected >= 3
        for s in kept:
            s.close()
    finally:
        log = daemon.stop()
    assert "refused a connection from 127.0.0.2" in log, log
    assert "max_connections_per_client" in log, log
    assert "handshake not finished within 3 s" in log, log


def test_help_shows_every_limit_with_its_default():
    text = run([RAIDKIT_BIN, "serve", "--help"]).stdout
    # Each option's block starts on a line "      --NAME <VALUE>".
    blocks = {}
    for block in text.split("\n      --")[1:]:
        blocks[block.split()[0]] = " ".join(block.split())
    for flag, default in [("handshake-timeout", "10"), ("max-connections", "64"),
                          ("max-connections-per-client", "16"), ("max-option-size", "64K"),
                          ("idle-timeout", "0"), ("max-requests-per-connection", "64"),
                          ("reply-timeout", "60")]:
        assert f"[default: {default}]" in blocks[flag], (flag, blocks.get(flag))
