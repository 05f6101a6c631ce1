"""TLS for remote members (issue 14): ``nbds+unix://`` members behind ``nbdkit --tls=require``,
with the certificates test_tls makes with certtool (``pki``).

- ``test_create_refuses_a_wrong_ca_and_a_server_without_tls``: ``raidkit create`` with an nbds
  member whose ``tls-certificates`` trusts another CA fails, naming the member's URI, the CA
  file and what to do; the same against a plaintext nbdkit says the server does not offer TLS.
- ``test_raid1_over_a_tls_member_served_over_tls_through_failure_and_reconnect`` (the issue's
  "Done when"), once with the member on loopback TCP (``nbds://127.0.0.1:PORT/``, nbdkit
  ``--ipaddr 127.0.0.1 --port PORT``, restarted on the same port) and once on a Unix socket
  (``nbds+unix://``): a RAID 1 of a local file and that export (nbdkit
  ``--tls=require --tls-verify-peer``: raidkit presents its client certificate), encrypted at
  rest (``create --encrypt --key-file``), created through the nbds URI, served with
  ``--key-file`` and ``--tls require --tls-verify-peer`` on loopback
  TCP. The TLS client in front of fio is nbdkit's nbd plugin (libnbd, ``tls=require``, a client
  certificate), because fio's nbd engine cannot read ``tls-certificates`` from its URI (libnbd
  denies local files in URIs unless the program allows them, and fio does not); fio talks to
  that proxy over a Unix socket. fio writes with ``verify=crc32c`` while the TLS member's nbdkit
  is killed; the member goes faulty, fio finishes clean; nbdkit restarted on the same socket,
  the member comes back by itself and is rebuilt; fio ``verify_only`` passes, then passes again
  with the local member failed (every read from the TLS member), and scrub finds nothing. A
  known pattern written through the TLS client reads back and is in neither member's file.
"""

import os
import subprocess
import time

import pytest

import skips

from conftest import RAIDKIT_BIN, SERVER_KIND, free_tcp_port, require_tools, run
from test_faults import (arrays, check_fio, fio_cmd, members,  # noqa: F401 (fixtures)
                         scrub_clean, wait_faulty)
from test_reconnect import wait_back
from test_tls import pki  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit",
                                reason=skips.env_reason("raidkit-only (RAIDKIT_TEST_SERVER is not raidkit)"))

MIB = 1024 * 1024
FIO_BYTES = 16 * MIB


def test_create_refuses_a_wrong_ca_and_a_server_without_tls(tmp_path, members, pki):
    require_tools("nbdkit")
    local = tmp_path / "m0.img"
    with open(local, "wb") as f:
        f.truncate(32 * MIB)
    member = members("m1").use_tls(pki["server"], pki["other"])
    member.start()
    proc = run([RAIDKIT_BIN, "create", "--level", "1", "--name", "x", str(local), member.uri],
               check=False, timeout=60)
    assert proc.returncode != 0, proc.stdout
    ca_file = f"{pki['other']}/ca-cert.pem"
    assert f"member {member.uri}: cannot connect to: TLS: the server's certificate is not " \
        f"signed by the CA in {ca_file}" in proc.stderr, proc.stderr
    assert f"put the CA that signed the server's certificate in {ca_file}" in proc.stderr, \
        proc.stderr
    member.kill()

    plain = members("m2")
    plain.start()
    uri = f"nbds+unix:///?socket={plain.sock}&tls-certificates={pki['client']}"
    proc = run([RAIDKIT_BIN, "create", "--level", "1", "--name", "x", str(local), uri],
               check=False, timeout=60)
    assert proc.returncode != 0, proc.stdout
    assert f"member {uri}: cannot connect to: the server does not offer TLS" in proc.stderr, \
        proc.stderr
    assert "never falls back to plaintext" in proc.stderr, proc.stderr


class TlsProxy:
    """nbdkit's nbd plugin on a Unix socket, the TLS client (libnbd) of raidkit's listener."""

    def __init__(self, workdir, port, export, certs):
        self.sock = workdir / "proxy.sock"
        cmd = ["nbdkit", "--foreground", "--exit-with-parent", "-U", str(self.sock), "nbd",
               "hostname=127.0.0.1", f"port={port}", f"export={export}", "tls=require",
               f"tls-certificates={certs}"]
        with open(workdir / "proxy.log", "w") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 10
        while not self.sock.exists():
            assert self.proc.poll() is None, f"proxy exited: {cmd}"
            assert time.monotonic() < deadline, f"proxy not listening: {cmd}"
            time.sleep(0.02)

    @property
    def uri(self):
        return f"nbd+unix:///?socket={self.sock}"

    def kill(self):
        self.proc.kill()
        self.proc.wait()


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_raid1_over_a_tls_member_served_over_tls_through_failure_and_reconnect(
        tmp_path, members, arrays, pki, transport):
    require_tools("nbdkit", "nbdinfo", "fio")
    local = tmp_path / "m0.img"
    with open(local, "wb") as f:
        f.truncate(32 * MIB)
    remote = members("m1").use_tls(pki["server"], pki["client"], verify_peer=True,
                                   tcp_port=free_tcp_port() if transport == "tcp" else None)
    assert remote.uri.startswith("nbds://" if transport == "tcp" else "nbds+unix://")
    remote.start()
    key = tmp_path / "key"
    key.write_bytes(os.urandom(64))
    run([RAIDKIT_BIN, "create", "--level", "1", "--chunk", "64K", "--name", "secure",
         "--bitmap-region", "1M", "--encrypt", "--key-file", str(key),
         "--kdf-memory", "64K", "--kdf-iterations", "1", str(local), remote.uri])
    port = free_tcp_port()
    array = arrays(tmp_path, "secure", [str(local), remote.uri], listen=f"127.0.0.1:{port}",
                   extra=["--key-file", str(key),
                          "--tls", "require", "--tls-certificates", str(pki["server"]),
                          "--tls-verify-peer", "--reconnect-interval-max", "2"]).start()
    assert array.role_states() == ["active", "active"], array.status()

    # Served only over TLS, to a client with a certificate.
    tls_uri = f"nbds://127.0.0.1:{port}/secure?tls-certificates={pki['client']}"
    size = int(run(["nbdinfo", "--size", tls_uri], timeout=60).stdout)
    assert size > 30 * MIB, size
    plain = run(["nbdinfo", "--size", f"nbd://127.0.0.1:{port}/secure"], check=False,
                timeout=60)
    assert plain.returncode != 0, plain.stdout
    proxy = TlsProxy(tmp_path, port, "secure", pki["client"])
    try:
        # fio writes (~2 s at 8 MiB/s) and verifies while the TLS member's server is killed
        # 0.7 s in.
        fio = subprocess.Popen(fio_cmd(proxy.uri, FIO_BYTES, "--do_verify=1", "--rate=8m,8m"),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               cwd=tmp_path)
        time.sleep(0.7)
        assert fio.poll() is None, "fio finished before the member failed"
        killed_at = time.monotonic()
        remote.kill()
        out, _ = fio.communicate(timeout=300)
        assert fio.returncode == 0, out[-3000:]
        check_fio(out, "fio through a TLS member's failure")
        wait_faulty(array, [1], killed_at, 20)
        assert array.status()["health"] == "degraded", array.status()

        # The member's TLS server back on the same socket: the member comes back by itself.
        remote.start()
        seen = wait_back(array, 1)
        assert "is reachable again; adding it back" in array.logs(), (seen, array.logs())
        verify = fio_cmd(proxy.uri, FIO_BYTES, "--verify_only")
        check_fio(run(verify, timeout=300, cwd=tmp_path), "verify after the reconnect")
        scrub_clean(array)

        # At rest, ciphertext only: a known pattern written through the TLS client while both
        # members are in use reads back, and (below, once stopped) is in neither member's file.
        pattern = b"RAIDKIT-AT-REST-" * 4096
        at = 20 * MIB
        write_through(proxy.uri, at, pattern)
        assert read_through(proxy.uri, at, len(pattern)) == pattern

        # Every read from the TLS member: the local one failed.
        array.cli("fail", "role 0")
        assert array.role_states()[0] == "faulty", array.status()
        check_fio(run(verify, timeout=300, cwd=tmp_path), "verify from the TLS member alone")
        assert read_through(proxy.uri, at, len(pattern)) == pattern
    finally:
        proxy.kill()
    array.stop()
    for image in (local, remote.image):
        assert pattern[:64] not in image.read_bytes(), f"{image} holds plaintext"


def write_through(uri, offset, data):
    import nbd
    h = nbd.NBD()
    h.connect_uri(uri)
    h.pwrite(data, offset)
    h.flush()
    h.shutdown()


def read_through(uri, offset, length):
    import nbd
    h = nbd.NBD()
    h.connect_uri(uri)
    data = h.pread(length, offset)
    h.shutdown()
    return data
