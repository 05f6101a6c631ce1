"""Fixtures for the end-to-end tests: start the NBD server under test, yield its URI, stop it.

The server under test is chosen by the environment:

- ``RAIDKIT_BIN``: path of the raidkit binary (default: ``target/release/raidkit``).
- ``RAIDKIT_TEST_SERVER``: ``raidkit`` (default), or ``nbdkit`` / ``qemu-nbd`` to run the same
  tests against a reference server on one flat file (or ``memserve``, the nbd crate's RAM example
  named by ``MEMSERVE_BIN``, for the tests that need no restart) (used to validate the harness itself; the
  level parameter is then ignored and raidkit-only expectations are skipped).
- ``RAIDKIT_SEED``: seed for every random choice (printed in the header and on each failure).
- ``RAIDKIT_SOAK=1``: larger sizes and longer runs.
- ``RAIDKIT_MEMBER_CACHE``: ``direct`` or ``buffered``: raidkit servers started by the helpers
  get ``--member-cache`` with it (test_direct_io.py runs a selection of files with ``direct``).
- ``RAIDKIT_MEMBER_IO``: ``uring``, ``threads`` or ``auto``: raidkit servers started by the
  helpers get ``--member-io`` with it (test_direct_io.py runs a selection with ``uring``).

Fixtures:

- ``server``: parameterized over every level (linear, 0, 1, 10, 5, 6) and both transports
  (Unix socket, TCP on 127.0.0.1 with a free port); yields a running ``Server``.
- ``make_server``: factory for tests that choose their own level/transport/size subset.

Each ``Server`` keeps its member files in the test's ``tmp_path`` and can be stopped with SIGTERM
(asserting exit status 0), killed with SIGKILL, and started again from the same member files.
"""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

pytest.register_assert_rewrite("skips")
import skips  # noqa: E402 (after the rewrite registration)

pytest_plugins = ["skips"]

REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("RAIDKIT_SEED") or random.SystemRandom().randrange(2**32))
SOAK = os.environ.get("RAIDKIT_SOAK", "0") not in ("", "0")
SERVER_KIND = os.environ.get("RAIDKIT_TEST_SERVER", "raidkit")
RAIDKIT_BIN = os.environ.get("RAIDKIT_BIN", str(REPO / "target" / "release" / "raidkit"))
MEMBER_CACHE = os.environ.get("RAIDKIT_MEMBER_CACHE", "")
MEMBER_IO = os.environ.get("RAIDKIT_MEMBER_IO", "")

CHUNK_BYTES = 64 * 1024
MAX_REQUEST_BYTES = 32 * 1024 * 1024
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 60

# level -> (member count, data members per stripe). Member counts are chosen so that the
# full-stripe data size is a power of two (NBD requires the preferred block size to be one).
LEVELS = {
    "linear": (2, None),
    "0": (4, 4),
    "1": (2, 1),
    "10": (4, 2),
    "5": (5, 4),
    "6": (4, 2),
}
TRANSPORTS = ("unix", "tcp")
MATRIX = [(level, transport) for level in LEVELS for transport in TRANSPORTS]


def pytest_report_header(config):
    return [f"raidkit e2e: server={SERVER_KIND} bin={RAIDKIT_BIN} RAIDKIT_SEED={SEED} soak={SOAK}"
            f" member_cache={MEMBER_CACHE or 'default'} member_io={MEMBER_IO or 'default'}"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("replay", f"RAIDKIT_SEED={SEED} (export it to replay this run)"))
        item.raidkit_failed = True


@pytest.fixture(autouse=True)
def _remove_tmp_path_of_passed_tests(request, tmp_path):
    """A passed test's member files are removed when it ends (after every other fixture of the
    test stopped its servers); a failed test's stay for the post-mortem. pytest itself keeps
    every test's directory until the session ends: ~12 GiB for the whole suite."""
    yield
    if not getattr(request.node, "raidkit_failed", False):
        shutil.rmtree(tmp_path, ignore_errors=True)


def rng_for(name):
    """A random generator for one test, derived from the session seed and the test's name."""
    return random.Random(f"{SEED}:{name}")


def free_tcp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, timeout=300, check=True, **kw):
    """Run a command, capture its output, and fail with the command and its output on error."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        pytest.fail(
            f"command failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def start_serving(cmd):
    """Starts ``raidkit serve`` `cmd` and returns the process once it says it serves (its
    stdout drained from then on); fails the test with its output if it does not start."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if "raidkit: serving" not in line:
        proc.kill()
        pytest.fail(f"serve did not start: {line}{proc.stderr.read()}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc


def start_nbdkit_unix(sock, args):
    """Starts ``nbdkit --foreground --exit-with-parent -U SOCK ARGS...`` and returns the process
    once the socket exists; fails the test if nbdkit exits or does not listen within 10 s."""
    proc = subprocess.Popen(["nbdkit", "--foreground", "--exit-with-parent", "-U", str(sock),
                             *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not sock.exists():
        assert proc.poll() is None, "nbdkit exited"
        assert time.monotonic() < deadline, "nbdkit not listening"
        time.sleep(0.02)
    return proc


def stop_serving(proc):
    """SIGTERM, then a clean exit (0) within the stop timeout."""
    proc.terminate()
    assert proc.wait(timeout=STOP_TIMEOUT_S) == 0, proc.stderr.read()


class Server:
    """One NBD server process serving one array (or, for reference servers, one flat file)."""

    def __init__(self, workdir, level, transport, member_bytes, kind=SERVER_KIND, read_only=False):
        assert level in LEVELS, level
        assert transport in TRANSPORTS, transport
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.level = level
        self.transport = transport
        self.member_bytes = member_bytes
        self.kind = kind
        self.read_only = read_only
        self.name = {"raidkit": f"e2e-raid{level}", "memserve": "mem"}.get(kind, "")
        count, self.data_members = LEVELS[level]
        self.members = [str(self.workdir / f"member{i}.img") for i in range(count)]
        self.sock = str(self.workdir / "nbd.sock")
        self.port = free_tcp_port() if transport == "tcp" else None
        self.proc = None
        self.created = False
        self.stdout_lines = []
        self.serving = threading.Event()
        self.starts = 0

    @property
    def is_raidkit(self):
        return self.kind == "raidkit"

    @property
    def uri(self):
        if self.transport == "unix":
            return f"nbd+unix:///{self.name}?socket={self.sock}"
        return f"nbd://127.0.0.1:{self.port}/{self.name}"

    def default_uri(self):
        """The URI with the empty (default) export name."""
        if self.transport == "unix":
            return f"nbd+unix:///?socket={self.sock}"
        return f"nbd://127.0.0.1:{self.port}/"

    def listen_args(self):
        if self.transport == "unix":
            return ["--unix", self.sock]
        return ["--listen", f"127.0.0.1:{self.port}"]

    def command(self):
        if self.kind == "raidkit":
            cmd = [RAIDKIT_BIN, "serve", *self.listen_args()]
            if self.read_only:
                cmd.append("--read-only")
            if MEMBER_CACHE:
                cmd += ["--member-cache", MEMBER_CACHE]
            if MEMBER_IO:
                cmd += ["--member-io", MEMBER_IO]
            if not self.created:
                cmd += ["--create", "--level", self.level, "--chunk", str(CHUNK_BYTES),
                        "--size", str(self.member_bytes), "--name", self.name]
            return cmd + self.members
        image = self.members[0]
        if not self.created:
            total = self.member_bytes * (self.data_members or len(self.members))
            with open(image, "wb") as f:
                f.truncate(total)
        if self.kind == "nbdkit":
            net = ["--unix", self.sock] if self.transport == "unix" else \
                ["--ipaddr", "127.0.0.1", "--port", str(self.port)]
            ro = ["--readonly"] if self.read_only else []
            return ["nbdkit", "--foreground", *ro, *net, "file", image]
        if self.kind == "memserve":  # crates/nbd/examples/memserve: RAM, no persistence
            net = ["--unix", self.sock] if self.transport == "unix" else \
                ["--tcp", f"127.0.0.1:{self.port}"]
            ro = ["--read-only"] if self.read_only else []
            mib = self.member_bytes * (self.data_members or len(self.members)) // 2**20
            return [os.environ["MEMSERVE_BIN"], *net, "--size", str(mib), *ro]
        if self.kind == "qemu-nbd":
            net = ["--socket", self.sock] if self.transport == "unix" else \
                ["--bind", "127.0.0.1", "--port", str(self.port)]
            ro = ["--read-only"] if self.read_only else []
            return ["qemu-nbd", "--persistent", "--shared=16", "--format=raw", "--cache=none",
                    "--discard=unmap", *ro, *net, image]
        raise AssertionError(f"unknown RAIDKIT_TEST_SERVER {self.kind!r}")

    def _pump_stdout(self, proc):
        for line in proc.stdout:
            self.stdout_lines.append(line)
            if "raidkit: serving" in line:
                self.serving.set()

    def _reachable(self):
        try:
            if self.transport == "unix":
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(1)
                    s.connect(self.sock)
            else:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def start(self):
        assert self.proc is None, "server already running"
        self.serving.clear()
        self.starts += 1
        log = open(self.workdir / f"server-{self.starts}.stderr", "w")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log,
                                     stdin=subprocess.DEVNULL, text=True, cwd=self.workdir)
        log.close()
        threading.Thread(target=self._pump_stdout, args=(self.proc,), daemon=True).start()
        self._wait_ready()
        self.created = True
        if self.is_raidkit and MEMBER_CACHE == "direct":
            self.assert_members_direct()
        return self

    def assert_members_direct(self):
        """Every member file is open in the server with O_DIRECT (/proc/PID/fdinfo flags)."""
        seen = {}
        for fd in os.listdir(f"/proc/{self.proc.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.proc.pid}/fd/{fd}")
                info = Path(f"/proc/{self.proc.pid}/fdinfo/{fd}").read_text()
            except OSError:
                continue
            if target in self.members:
                flags = int(info.split("flags:")[1].split()[0], 8)
                seen[target] = bool(flags & os.O_DIRECT)
        assert seen and all(seen.values()) and len(seen) == len(self.members), \
            f"RAIDKIT_MEMBER_CACHE=direct but members open with O_DIRECT: {seen}"

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail(f"server exited with status {self.proc.returncode} while starting")
            ready = self.serving.is_set() if self.kind == "raidkit" else True
            if ready and self._reachable():
                return
            time.sleep(0.05)
        self._fail(f"server not serving after {START_TIMEOUT_S} s")

    def logs(self):
        text = "".join(self.stdout_lines)[-3000:]
        for p in sorted(self.workdir.glob("server-*.stderr")):
            text += f"\n--- {p.name}\n" + p.read_text()[-3000:]
        return text

    def _fail(self, why):
        cmd = " ".join(self.command())
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        pytest.fail(f"{why}: {cmd}\n--- stdout{self.logs()}")

    def stop(self):
        """SIGTERM; the server must finish, flush, and exit 0."""
        assert self.proc is not None, "server not running"
        # memserve (an example) stops on SIGINT only.
        self.proc.send_signal(signal.SIGINT if self.kind == "memserve" else signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._fail(f"server did not exit within {STOP_TIMEOUT_S} s of SIGTERM")
        self.proc = None
        if rc != 0:
            pytest.fail(f"server exited with status {rc} after SIGTERM (expected 0)\n{self.logs()}")

    def kill9(self):
        """SIGKILL. The Unix socket file stays behind; it is removed as an operator would (the
        servers under test refuse to bind over an existing path)."""
        assert self.proc is not None, "server not running"
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        if self.transport == "unix" and os.path.exists(self.sock):
            os.unlink(self.sock)

    def restart(self):
        self.stop()
        return self.start()

    def info(self):
        """The export's nbdinfo --json record."""
        out = run(["nbdinfo", "--json", self.uri], timeout=60).stdout
        exports = json.loads(out)["exports"]
        assert len(exports) == 1, out
        return exports[0]

    def size(self):
        return int(self.info()["export-size"])

    def cleanup(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def member_bytes_default():
    return (256 if SOAK else 64) * 1024 * 1024


def tracking(make, finish):
    """The body of a factory fixture (``yield from tracking(...)``): yields a factory that makes
    a thing with ``make(*args, **kw)`` and remembers it; at teardown ``finish(thing)`` runs on
    each thing made, in order."""
    made = []

    def factory(*args, **kw):
        thing = make(*args, **kw)
        made.append(thing)
        return thing

    yield factory
    for thing in made:
        finish(thing)


@pytest.fixture
def make_server(tmp_path):
    """Factory: make_server(level, transport, member_bytes=..., read_only=False) -> started Server.

    Every server still running at the end of the test is stopped with SIGTERM and must exit 0.
    """
    servers = []

    def factory(level, transport, member_bytes=None, read_only=False, start=True, sub=None):
        workdir = tmp_path / (sub or f"srv{len(servers)}")
        srv = Server(workdir, level, transport, member_bytes or member_bytes_default(),
                     read_only=read_only)
        servers.append(srv)
        return srv.start() if start else srv

    yield factory
    try:
        for srv in servers:
            if srv.proc is not None:
                srv.stop()
    finally:
        for srv in servers:
            srv.cleanup()


@pytest.fixture(params=MATRIX, ids=[f"raid{lv}-{tr}" for lv, tr in MATRIX])
def server(request, make_server):
    """A running server for every level x transport; stopped with SIGTERM (exit 0) afterwards."""
    level, transport = request.param
    return make_server(level, transport)


def require_tools(*tools):
    """Fails the test if a tool is missing (see skips.py for the opt-out)."""
    skips.require_tools(*tools)


@pytest.fixture
def arrays():
    """Makes `served.Array`s (`arrays(tmp_path, members, extra_flags)`); kills any still running
    at the end of the test."""
    from served import Array

    made = []
    yield lambda *a, **k: made.append(Array(*a, **k)) or made[-1]
    for a in made:
        a.cleanup()
