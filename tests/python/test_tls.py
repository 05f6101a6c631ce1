"""TLS for NBD clients (issue 14): ``raidkit serve --tls on|require --tls-certificates DIR
[--tls-verify-peer]`` against libnbd's nbdinfo and nbdcopy over ``nbds://`` with
``tls-certificates=DIR``, and qemu-img with a ``tls-creds-x509`` object; an expired client
certificate (against ``--tls-verify-peer``) and an expired server certificate are refused, the
server's log saying so, while others are served. Certificates are made
per test session with certtool (gnutls-bin): a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate, and a second, unrelated CA.
"""

import subprocess
import threading
import time

import pytest

from conftest import RAIDKIT_BIN, free_tcp_port, require_tools, rng_for, run
from test_daemon import Daemon

MIB = 1024 * 1024
SIZE_BYTES = 64 * MIB
# A RAID 1 of two 64 MiB members, less its metadata.
EXPORT_BYTES = 63 * MIB


def certtool(*args):
    run(["certtool", *args], timeout=120)


def make_key(path):
    # RSA: rustls (ring) refused to load an ECDSA key certtool wrote in one run; RSA loads.
    certtool("--generate-privkey", "--key-type=rsa", "--bits=2048", "--no-text",
             "--outfile", str(path))


def make_ca(dir, name):
    dir.mkdir(parents=True, exist_ok=True)
    (dir / "ca.info").write_text(f"cn = {name}\nca\ncert_signing_key\nexpiration_days = 2\n")
    make_key(dir / "ca-key.pem")
    certtool("--generate-self-signed", "--load-privkey", str(dir / "ca-key.pem"),
             "--template", str(dir / "ca.info"), "--outfile", str(dir / "ca-cert.pem"))


def sign(ca, key, template, out):
    certtool("--generate-certificate", "--load-ca-certificate", str(ca / "ca-cert.pem"),
             "--load-ca-privkey", str(ca / "ca-key.pem"), "--load-privkey", str(key),
             "--template", str(template), "--outfile", str(out))


def issue(ca, root, dir, kind, template):
    """DIR/KIND-key.pem and DIR/KIND-cert.pem, signed by the CA in ``ca``."""
    info = root / f"{kind}.info"
    info.write_text(template + "signing_key\nencryption_key\nexpiration_days = 2\n")
    make_key(dir / f"{kind}-key.pem")
    sign(ca, dir / f"{kind}-key.pem", info, dir / f"{kind}-cert.pem")


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """Directories in nbdkit's/libnbd's layouts: ``server`` (ca-cert, server-cert, server-key),
    ``client`` (ca-cert, client-cert, client-key), ``anonymous`` (ca-cert only), ``other``
    (a client trusting another CA)."""
    require_tools("certtool", "nbdinfo", "nbdcopy")
    root = tmp_path_factory.mktemp("pki")
    ca, other = root / "ca", root / "other-ca"
    make_ca(ca, "raidkit test CA")
    make_ca(other, "another CA")
    dirs = {name: root / name for name in ("server", "client", "anonymous", "other")}
    for d in dirs.values():
        d.mkdir()
    for name in ("server", "client", "anonymous"):
        (dirs[name] / "ca-cert.pem").write_bytes((ca / "ca-cert.pem").read_bytes())
    (dirs["other"] / "ca-cert.pem").write_bytes((other / "ca-cert.pem").read_bytes())
    issue(ca, root, dirs["server"], "server",
          "cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\n")
    issue(ca, root, dirs["client"], "client", "cn = raidkit test client\ntls_www_client\n")
    return dirs


class TlsServer:
    def __init__(self, workdir, pki, mode, verify_peer=False):
        self.port = free_tcp_port()
        self.stderr_path = workdir / "server.stderr"
        cmd = [RAIDKIT_BIN, "serve", "--listen", f"127.0.0.1:{self.port}", "--tls", mode,
               "--tls-certificates", str(pki["server"]), "--create", "--level", "1",
               "--size", str(SIZE_BYTES), "--name", "tls"]
        if verify_peer:
            cmd.append("--tls-verify-peer")
        cmd += ["mem:64M", "mem:64M"]
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL, text=True, cwd=workdir)
        self.serving = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        assert self.serving.wait(30), f"server not serving: {self.stderr()}"

    def _pump(self):
        for line in self.proc.stdout:
            if "raidkit: serving" in line:
                self.serving.set()

    def stderr(self):
        return self.stderr_path.read_text()

    def wait_for_log(self, text, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stderr():
                return
            time.sleep(0.05)
        pytest.fail(f"server log never said {text!r}:\n{self.stderr()}")

    def uri(self, certs=None):
        if certs is None:
            return f"nbd://127.0.0.1:{self.port}/"
        return f"nbds://127.0.0.1:{self.port}/?tls-certificates={certs}"

    def stop(self):
        self.proc.terminate()
        rc = self.proc.wait(timeout=60)
        assert rc == 0, f"server exited {rc}:\n{self.stderr()}"


@pytest.fixture
def tls_server(tmp_path, pki):
    servers = []

    def factory(mode, verify_peer=False):
        srv = TlsServer(tmp_path, pki, mode, verify_peer)
        servers.append(srv)
        return srv

    yield factory
    for srv in servers:
        if srv.proc.poll() is None:
            srv.stop()


def nbdinfo_size(uri):
    out = run(["nbdinfo", "--size", uri], timeout=60).stdout
    return int(out)


def copy_round_trip(tmp_path, uri, name):
    """Writes 8 MiB of random data through the export and reads it back; they must match."""
    data = rng_for(name).randbytes(8 * MIB)
    src, back = tmp_path / f"{name}.in", tmp_path / f"{name}.out"
    src.write_bytes(data)
    run(["nbdcopy", str(src), uri], timeout=120)
    run(["nbdcopy", uri, str(back)], timeout=120)
    assert back.read_bytes()[: len(data)] == data


def refused(uri):
    proc = run(["nbdinfo", "--size", uri], timeout=60, check=False)
    assert proc.returncode != 0, f"nbdinfo succeeded on {uri}: {proc.stdout}"
    return proc.stderr


def test_require_serves_tls_and_refuses_plaintext(tls_server, pki, tmp_path):
    srv = tls_server("require")
    tls_uri = srv.uri(pki["client"])
    assert nbdinfo_size(tls_uri) == EXPORT_BYTES
    copy_round_trip(tmp_path, tls_uri, "require")

    err = refused(srv.uri())
    assert "TLS" in err, err
    srv.wait_for_log("refusing NBD_OPT_")
    assert "TLS is required (--tls require)" in srv.stderr()
    # The server keeps serving TLS clients, with the data written before.
    copy_round_trip(tmp_path, tls_uri, "require-after")


def test_a_client_trusting_another_ca_is_refused(tls_server, pki):
    srv = tls_server("require")
    err = refused(srv.uri(pki["other"]))
    assert "certificate" in err.lower() or "verif" in err.lower(), err
    srv.wait_for_log("TLS handshake failed")
    assert nbdinfo_size(srv.uri(pki["client"])) == EXPORT_BYTES


def test_verify_peer_needs_a_client_certificate_signed_by_the_ca(tls_server, pki, tmp_path):
    srv = tls_server("require", verify_peer=True)
    refused(srv.uri(pki["anonymous"]))
    srv.wait_for_log("TLS handshake failed")
    assert "no certificates" in srv.stderr(), srv.stderr()
    copy_round_trip(tmp_path, srv.uri(pki["client"]), "verify-peer")


def issue_expired(pki, dir, kind, template):
    """DIR/ca-cert.pem and DIR/KIND-cert.pem + key signed by the session's CA, valid only in
    2019 (certtool's activation_date/expiration_date)."""
    root = pki["server"].parent
    dir.mkdir()
    (dir / "ca-cert.pem").write_bytes((pki["server"] / "ca-cert.pem").read_bytes())
    info = dir / f"{kind}.info"
    info.write_text(template + 'signing_key\nencryption_key\n'
                    'activation_date = "2019-01-01 00:00:00"\n'
                    'expiration_date = "2019-12-31 00:00:00"\n')
    make_key(dir / f"{kind}-key.pem")
    sign(root / "ca", dir / f"{kind}-key.pem", info, dir / f"{kind}-cert.pem")
    return dir


def test_an_expired_certificate_is_refused_and_others_are_still_served(
        tls_server, pki, tmp_path):
    # An expired client certificate against --tls-verify-peer: refused, the log says why.
    expired_client = issue_expired(pki, tmp_path / "expired-client", "client",
                                   "cn = raidkit expired client\ntls_www_client\n")
    srv = tls_server("require", verify_peer=True)
    refused(srv.uri(expired_client))
    srv.wait_for_log("TLS handshake failed")
    assert "xpired" in srv.stderr(), srv.stderr()
    assert nbdinfo_size(srv.uri(pki["client"])) == EXPORT_BYTES
    # An expired server certificate: the client refuses it (and the server logs the failure).
    expired_server = issue_expired(
        pki, tmp_path / "expired-server", "server",
        "cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\n")
    workdir = tmp_path / "second"
    workdir.mkdir()
    old = TlsServer(workdir, {**pki, "server": expired_server}, "require")
    try:
        err = refused(old.uri(pki["client"]))
        assert "xpired" in err or "certificate" in err.lower(), err
        old.wait_for_log("TLS handshake failed")
    finally:
        old.stop()
    assert nbdinfo_size(srv.uri(pki["client"])) == EXPORT_BYTES


def test_tls_on_serves_plaintext_and_tls_clients(tls_server, pki, tmp_path):
    srv = tls_server("on")
    copy_round_trip(tmp_path, srv.uri(pki["client"]), "on-tls")
    copy_round_trip(tmp_path, srv.uri(), "on-plain")
    assert "refusing" not in srv.stderr()


def test_qemu_img_with_tls_creds_x509(tls_server, pki):
    require_tools("qemu-img")
    srv = tls_server("require", verify_peer=True)
    out = run(["qemu-img", "info", "--output=json",
               "--object", f"tls-creds-x509,id=tls0,endpoint=client,dir={pki['client']}",
               "--image-opts",
               f"driver=nbd,host=127.0.0.1,port={srv.port},export=,tls-creds=tls0"],
              timeout=60).stdout
    assert f'"virtual-size": {EXPORT_BYTES}' in out, out


def test_bad_certificate_directory_is_refused_at_start(tmp_path, pki):
    proc = run([RAIDKIT_BIN, "serve", "--listen", "127.0.0.1:0", "--tls", "require",
                "--tls-certificates", str(pki["client"]), "--create", "--level", "1",
                "--size", str(SIZE_BYTES), "mem:64M", "mem:64M"], timeout=60, check=False)
    assert proc.returncode != 0
    assert "server-cert.pem" in proc.stderr, proc.stderr
    proc = run([RAIDKIT_BIN, "serve", "--listen", "127.0.0.1:0", "--tls", "on", "--create",
                "--level", "1", "--size", str(SIZE_BYTES), "mem:64M", "mem:64M"],
               timeout=60, check=False)
    assert proc.returncode != 0
    assert "--tls-certificates" in proc.stderr, proc.stderr


def test_daemon_tls_require(tmp_path, pki):
    """[daemon] tls = "require": the daemon's listener serves TLS clients and refuses a
    plaintext one, with the warning in its log."""
    members = [tmp_path / f"m{i}" for i in range(2)]
    run([RAIDKIT_BIN, "create", "--level", "1", "--name", "home", "--size", "16M", *members])
    port = free_tcp_port()
    config = tmp_path / "raidkit.toml"
    config.write_text(
        f'[daemon]\nlisten = ["127.0.0.1:{port}"]\nadmin = "{tmp_path}/a.sock"\n'
        f'tls = "require"\ntls_certificates = "{pki["server"]}"\ntls_verify_peer = true\n\n'
        f'[[array]]\nname = "home"\nmembers = ["{members[0]}", "{members[1]}"]\n')
    daemon = Daemon(config, 1)
    try:
        uri = f"nbds://127.0.0.1:{port}/home?tls-certificates={pki['client']}"
        assert nbdinfo_size(uri) > 0
        refused(f"nbd://127.0.0.1:{port}/home")
        refused(f"nbds://127.0.0.1:{port}/home?tls-certificates={pki['anonymous']}")
        assert nbdinfo_size(uri) > 0
    finally:
        text = daemon.stop()
        daemon.kill()
    assert "TLS is required" in text, text
    assert "TLS handshake failed" in text, text


def test_daemon_tls_without_certificates_is_a_config_error(tmp_path):
    config = tmp_path / "raidkit.toml"
    config.write_text('[daemon]\ntls = "on"\n')
    proc = run([RAIDKIT_BIN, "daemon", "--config", str(config), "--check-config"],
               check=False, timeout=60)
    assert proc.returncode != 0
    assert "tls_certificates" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
