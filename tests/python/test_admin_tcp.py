"""The admin API on TCP (issue 14: "a TCP admin listener requires TLS and a token"), on
loopback: ``raidkit serve --admin-listen HOST:PORT --admin-tls-certificates DIR
--admin-token-file FILE`` and the daemon's ``admin_listen``; the CLI reaches it with ``--admin
https://HOST:PORT --admin-token-file F --admin-ca FILE`` (status, fail, add); a missing or
wrong token gets 401 and a log line, a plaintext client gets no HTTP, a client trusting
another CA refuses the server; without certificates or a token (or with a token file others
can read) the listener does not start; with ``--admin-tls-verify-peer`` a client without a
certificate signed by the CA is refused in the handshake and one with it (the CLI's
``--admin-client-certificates``) is served; a connection held open is closed when serve stops
(during its NBD drain, before the process exits), and the daemon's listener closes at its stop
as serve's does (the held connection closed, a new one refused, while the drain runs).
Certificates: certtool, as test_tls.py makes them.
"""

import json
import signal
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

from conftest import RAIDKIT_BIN, free_tcp_port, run
from test_daemon import Daemon
from test_limits import CMD_READ, REQUEST_MAGIC, go
from test_tls import pki  # noqa: F401  (the session's certificates)

TOKEN = "c2VjcmV0LWFkbWluLXRva2VuLTAxMjM0NTY3"
# A connection left open at a stop is closed within this (the fix: at once).
CLOSED_WITHIN_S = 3
MEMBER_BYTES = 32 * 1024 * 1024


def token_file(dir, text=TOKEN, mode=0o600):
    path = dir / "admin.token"
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


class AdminServer:
    """``raidkit serve`` of a RAID 1 on two file members with the TCP admin listener."""

    def __init__(self, tmp_path, pki, extra=()):
        self.tmp = tmp_path
        self.port = free_tcp_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.members = [tmp_path / f"m{i}.img" for i in range(2)]
        self.token = token_file(tmp_path)
        self.ca = pki["server"] / "ca-cert.pem"
        self.stderr_path = tmp_path / "serve.stderr"
        self.nbd_port = free_tcp_port()
        cmd = [RAIDKIT_BIN, "serve", "--listen", f"127.0.0.1:{self.nbd_port}",
               "--admin-listen", f"127.0.0.1:{self.port}",
               "--admin-tls-certificates", str(pki["server"]),
               "--admin-token-file", str(self.token), *extra,
               "--create", "--level", "1", "--size", str(MEMBER_BYTES), "--name", "remote",
               *map(str, self.members)]
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        assert "raidkit: serving" in line, f"serve did not start: {line}{self.stderr()}"
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stderr(self):
        return self.stderr_path.read_text()

    def wait_for_log(self, *words, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(all(w in line for w in words) for line in self.stderr().splitlines()):
                return
            time.sleep(0.05)
        pytest.fail(f"server log never had a line with {words!r}:\n{self.stderr()}")

    def cli(self, *args, check=True, token=None, ca=None, client=None):
        more = ["--admin-client-certificates", str(client)] if client else []
        return run([RAIDKIT_BIN, *args, "--admin", self.url,
                    "--admin-token-file", str(token or self.token),
                    "--admin-ca", str(ca or self.ca), *more], timeout=60, check=check)

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(timeout=60)
        assert rc == 0, f"server exited {rc}:\n{self.stderr()}"


@pytest.fixture
def admin_server(tmp_path, pki):  # noqa: F811
    srv = AdminServer(tmp_path, pki)
    yield srv
    if srv.proc.poll() is None:
        srv.stop()


def https_request(port, ca, path, headers):
    """One request over TLS trusting ``ca``; (status, JSON body)."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}"
                        "Connection: close\r\n\r\n".encode())
            reply = b""
            while chunk := tls.recv(65536):
                reply += chunk
    head, _, body = reply.decode().partition("\r\n\r\n")
    return int(head.split(" ")[1]), json.loads(body)


def test_status_fail_and_add_over_tls_with_the_token(admin_server, tmp_path):
    status = json.loads(admin_server.cli("status", "--json").stdout)
    assert status["name"] == "remote", status
    assert [m["state"] for m in status["members"]] == ["active", "active"], status
    admin_server.cli("fail", str(admin_server.members[1]))
    status = json.loads(admin_server.cli("status", "--json").stdout)
    assert status["members"][1]["state"] == "faulty", status
    admin_server.cli("remove", str(admin_server.members[1]))
    spare = tmp_path / "spare.img"
    admin_server.cli("add", "--wait", str(spare))
    status = json.loads(admin_server.cli("status", "--json").stdout)
    names = {m["name"]: m["state"] for m in status["members"]}
    assert names.get(str(spare)) == "active", status
    assert status["health"] == "clean", status


def test_a_missing_or_wrong_token_is_refused_and_logged(admin_server, tmp_path):
    wrong_dir = tmp_path / "wrong"
    wrong_dir.mkdir()
    wrong = token_file(wrong_dir, text="not-the-admin-token-0123456789")
    refused = admin_server.cli("fail", str(admin_server.members[1]), token=wrong, check=False)
    assert refused.returncode != 0
    assert "unauthorized: a wrong token" in refused.stderr, refused.stderr
    admin_server.wait_for_log("admin TCP request POST /v1/fail from 127.0.0.1:",
                              "refused (401)", "a wrong token")
    status, body = https_request(admin_server.port, admin_server.ca, "/v1/status", {})
    assert status == 401, body
    admin_server.wait_for_log("admin TCP request GET /v1/status", "no Authorization header")
    status, body = https_request(admin_server.port, admin_server.ca, "/v1/status",
                                 {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and body["members"][1]["state"] == "active", body


def test_plaintext_and_an_untrusted_server_are_refused(admin_server, pki):  # noqa: F811
    # Plaintext HTTP to the TLS listener: no HTTP reply, and the server logs why.
    with socket.create_connection(("127.0.0.1", admin_server.port), timeout=30) as raw:
        raw.sendall(f"GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}"
                    "\r\n\r\n".encode())
        reply = b""
        try:
            while chunk := raw.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    assert b"HTTP/1.1 200" not in reply and b"members" not in reply, reply
    admin_server.wait_for_log("admin TCP connection from 127.0.0.1:", "TLS handshake failed")
    refused = run([RAIDKIT_BIN, "status", "--admin", f"http://127.0.0.1:{admin_server.port}"],
                  check=False, timeout=60)
    assert refused.returncode != 0 and "TLS only" in refused.stderr, refused.stderr
    # A client trusting another CA refuses the server (and so never sends the token).
    other = admin_server.cli("status", ca=pki["other"] / "ca-cert.pem", check=False)
    assert other.returncode != 0
    assert "TLS handshake" in other.stderr, other.stderr
    assert "UnknownIssuer" in other.stderr or "certificate" in other.stderr, other.stderr


def test_verify_peer_requires_a_client_certificate_signed_by_the_ca(tmp_path, pki):  # noqa: F811
    srv = AdminServer(tmp_path, pki, extra=["--admin-tls-verify-peer"])
    try:
        # Without a client certificate: refused in the handshake, logged, the token never read.
        refused = srv.cli("status", check=False)
        assert refused.returncode != 0, refused.stdout
        srv.wait_for_log("admin TCP connection from 127.0.0.1:", "TLS handshake failed")
        # A directory with the CA only (no client-cert.pem): the CLI says what is missing.
        missing = srv.cli("status", check=False, client=pki["anonymous"])
        assert missing.returncode != 0 and "no client-cert.pem and client-key.pem" in \
            missing.stderr, missing.stderr
        # With the client certificate the CA signed: served (the token still required).
        status = json.loads(srv.cli("status", "--json", client=pki["client"]).stdout)
        assert [m["state"] for m in status["members"]] == ["active", "active"], status
        wrong_dir = tmp_path / "wrong"
        wrong_dir.mkdir()
        wrong = token_file(wrong_dir, text="not-the-admin-token-0123456789")
        no_token = srv.cli("status", check=False, client=pki["client"], token=wrong)
        assert no_token.returncode != 0 and "unauthorized" in no_token.stderr, no_token.stderr
        # Python's ssl client with no certificate: the server ends the handshake.
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            https_request(srv.port, srv.ca, "/v1/status", {"Authorization": f"Bearer {TOKEN}"})
    finally:
        srv.stop()


def status_request():
    return (f"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {TOKEN}\r\n\r\n").encode()


def held_admin_connection(port, ca):
    """A TLS admin connection that had one keep-alive request answered, then is held open."""
    context = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
    tls.sendall(status_request())
    reply = tls.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200"), reply
    return tls


def drain_holder(nbd_port):
    """An NBD client in transmission with 64 reads of 8 MiB in flight whose replies it never
    reads: the server's writes block, so a stopping server drains it for its shutdown grace."""
    hog = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A small receive buffer: the replies it never reads fill it at once.
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    hog.settimeout(30)
    hog.connect(("127.0.0.1", nbd_port))
    go(hog)
    hog.sendall(b"".join(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_READ, cookie,
                                     0, 8 * 1024 * 1024) for cookie in range(64)))
    time.sleep(0.5)  # read by the server: in flight when the stop comes
    return hog


def assert_closed_while_draining(tls, proc, log, what):
    """The held admin connection ``tls`` ends (end of stream or a reset) within seconds of the
    stop, well before the listener's 10 s header-read timeout (counted from its one reply)
    would end an idle connection of a server that left it open, while ``proc`` still drains."""
    tls.settimeout(CLOSED_WITHIN_S)
    rest = b""
    try:
        while chunk := tls.recv(65536):
            rest += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass
    except socket.timeout:
        tls.sendall(status_request())
        late = tls.recv(65536)
        pytest.fail(f"the admin connection was still open {CLOSED_WITHIN_S} s after the "
                    f"stop began, {what} draining; a request on it was answered "
                    f"{late[:40]!r}:\n{log()}")
    assert b"HTTP/1.1" not in rest, rest
    assert proc.poll() is None, (
        f"{what} exited before the admin connection was seen closed: the test proves "
        f"nothing (the NBD drain should have held it):\n{log()}")


def assert_refused_while_draining(port, proc, log, what):
    """New admin connections are refused within seconds of the stop (the listening socket is
    closed at the stop, not at exit: a client does not wait in its backlog for an answer that
    never comes) while ``proc`` still drains. (The held connections are closed a moment
    before the listening socket: a connection made in between may still be taken.)"""
    deadline = time.monotonic() + CLOSED_WITHIN_S
    while True:
        try:
            late = socket.create_connection(("127.0.0.1", port), timeout=CLOSED_WITHIN_S)
        except ConnectionRefusedError:
            break
        late.close()
        if time.monotonic() > deadline:
            pytest.fail(f"{what} still accepted admin connections {CLOSED_WITHIN_S} s after "
                        f"the stop, during its drain:\n{log()}")
        time.sleep(0.05)
    assert proc.poll() is None, f"{what} no longer drains: the test proves nothing:\n{log()}"


def test_an_open_admin_connection_is_closed_when_serve_stops(admin_server):
    """Closed at the stop, while serve still runs: an NBD client that never reads its replies
    holds serve in its drain (the NBD connections' shutdown grace) after SIGTERM, and the
    admin connection held open must be closed during that drain, not left answering requests
    until the process exits, and a new connection is refused. (The process exit closes it
    anyway: the drain is the window in which the old server, whose connection tasks ran on
    detached, still served it, and in which its listening socket, still open, took new
    connections into its backlog unanswered.)"""
    tls = held_admin_connection(admin_server.port, admin_server.ca)
    hog = drain_holder(admin_server.nbd_port)
    try:
        admin_server.proc.terminate()
        admin_server.wait_for_log("shutting down: finishing requests in flight")
        assert_closed_while_draining(tls, admin_server.proc, admin_server.stderr, "serve")
        assert_refused_while_draining(admin_server.port, admin_server.proc,
                                      admin_server.stderr, "serve")
    finally:
        hog.close()
        tls.close()
    # The NBD client gone, serve ends its drain and stops cleanly.
    rc = admin_server.proc.wait(timeout=60)
    assert rc == 0, f"server exited {rc}:\n{admin_server.stderr()}"


def test_the_daemon_closes_its_admin_listener_at_the_stop_as_serve_does(tmp_path, pki):  # noqa: F811
    """The daemon's TCP admin listener closes at SIGTERM, before the NBD drain, as serve's and
    as the daemon's own Unix admin socket do (DESIGN "Admin endpoint": no admin action, a
    reload or an added member, may act on arrays the daemon is closing): the connection held
    open is closed and a new one is refused while an NBD client that never reads its replies
    holds the drain. (The daemon used to abort the listener only after the drain, so during
    it the listener accepted connections and answered them.)"""
    members = [tmp_path / f"m{i}" for i in range(2)]
    run([RAIDKIT_BIN, "create", "--level", "1", "--name", "home", "--size", "16M", *members])
    port, nbd_port = free_tcp_port(), free_tcp_port()
    config = tmp_path / "raidkit.toml"
    config.write_text(
        f'[daemon]\nlisten = ["127.0.0.1:{nbd_port}"]\nadmin = "{tmp_path}/a.sock"\n'
        f'admin_listen = "127.0.0.1:{port}"\nadmin_tls_certificates = "{pki["server"]}"\n'
        f'admin_token_file = "{token_file(tmp_path)}"\n\n'
        f'[[array]]\nname = "home"\nmembers = ["{members[0]}", "{members[1]}"]\n')
    daemon = Daemon(config, 1)
    log = daemon.log.read_text
    tls = hog = None
    try:
        tls = held_admin_connection(port, pki["server"] / "ca-cert.pem")
        hog = drain_holder(nbd_port)
        daemon.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while "shutting down: finishing requests in flight" not in log():
            assert time.monotonic() < deadline, f"no shutdown line:\n{log()}"
            time.sleep(0.05)
        assert_closed_while_draining(tls, daemon.proc, log, "the daemon")
        assert_refused_while_draining(port, daemon.proc, log, "the daemon")
    finally:
        for s in (hog, tls):
            if s is not None:
                s.close()
    try:
        # The NBD client gone, the daemon ends its drain and stops cleanly.
        rc = daemon.proc.wait(timeout=60)
        assert rc == 0, f"the daemon exited {rc}:\n{log()}"
    finally:
        daemon.kill()


def test_the_listener_needs_certificates_and_a_private_token(tmp_path, pki):  # noqa: F811
    base = [RAIDKIT_BIN, "serve", "--listen", f"127.0.0.1:{free_tcp_port()}",
            "--admin-listen", f"127.0.0.1:{free_tcp_port()}", "--create", "--level", "1",
            "--size", str(MEMBER_BYTES), "mem:32M", "mem:32M"]
    private = token_file(tmp_path)
    no_tls = run(base + ["--admin-token-file", str(private)], check=False, timeout=60)
    assert no_tls.returncode != 0 and "speaks TLS only" in no_tls.stderr, no_tls.stderr
    no_token = run(base + ["--admin-tls-certificates", str(pki["server"])],
                   check=False, timeout=60)
    assert no_token.returncode != 0 and "needs a token" in no_token.stderr, no_token.stderr
    readable_dir = tmp_path / "readable"
    readable_dir.mkdir()
    readable = token_file(readable_dir, mode=0o644)
    shared = run(base + ["--admin-tls-certificates", str(pki["server"]),
                         "--admin-token-file", str(readable)], check=False, timeout=60)
    assert shared.returncode != 0 and "chmod 600" in shared.stderr, shared.stderr
    config = tmp_path / "raidkit.toml"
    config.write_text('[daemon]\nadmin_listen = "127.0.0.1:9470"\n')
    checked = run([RAIDKIT_BIN, "daemon", "--config", str(config), "--check-config"],
                  check=False, timeout=60)
    out = checked.stdout + checked.stderr
    assert checked.returncode != 0 and "admin_tls_certificates" in out, out
    assert "admin_token_file" in out, out


def test_daemon_admin_listen(tmp_path, pki):  # noqa: F811
    members = [tmp_path / f"m{i}" for i in range(2)]
    run([RAIDKIT_BIN, "create", "--level", "1", "--name", "home", "--size", "16M", *members])
    port = free_tcp_port()
    token = token_file(tmp_path)
    config = tmp_path / "raidkit.toml"
    config.write_text(
        f'[daemon]\nlisten = ["127.0.0.1:{free_tcp_port()}"]\nadmin = "{tmp_path}/a.sock"\n'
        f'admin_listen = "127.0.0.1:{port}"\nadmin_tls_certificates = "{pki["server"]}"\n'
        f'admin_token_file = "{token}"\nadmin_tls_verify_peer = true\n\n'
        f'[[array]]\nname = "home"\nmembers = ["{members[0]}", "{members[1]}"]\n')
    wrong_dir = tmp_path / "wrong"
    wrong_dir.mkdir()
    wrong = token_file(wrong_dir, text="nope-nope-nope-nope-nope")
    daemon = Daemon(config, 1)
    try:
        args = ["--admin", f"https://127.0.0.1:{port}", "--admin-token-file", str(token),
                "--admin-ca", str(pki["server"] / "ca-cert.pem"), "--array", "home"]
        # admin_tls_verify_peer: no client certificate, no admin API.
        refused = run([RAIDKIT_BIN, "status", *args], check=False, timeout=60)
        assert refused.returncode != 0, refused.stdout
        args += ["--admin-client-certificates", str(pki["client"])]
        status = json.loads(run([RAIDKIT_BIN, "status", "--json", *args]).stdout)
        assert [m["state"] for m in status["members"]] == ["active", "active"], status
        bad = run([RAIDKIT_BIN, "status", *args[:2], "--admin-token-file", str(wrong),
                   *args[4:]], check=False, timeout=60)
        assert bad.returncode != 0 and "unauthorized" in bad.stderr, bad.stderr
    finally:
        text = daemon.stop()
        daemon.kill()
    assert f"admin API on https://127.0.0.1:{port}" in text, text
    assert "refused (401): a wrong token" in text, text
    assert "TLS handshake failed" in text, text
