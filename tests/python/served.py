"""One array served by `raidkit serve` on a Unix socket, for tests that start, stop and restart
it with different flags and members (the `arrays` fixture in conftest.py makes them and kills any
left running)."""

import os
import signal
import subprocess
import threading

import nbd
import pytest

from conftest import RAIDKIT_BIN, STOP_TIMEOUT_S, run


class Array:
    """One array served by `raidkit serve` on a Unix socket, with an admin socket."""

    def __init__(self, tmp_path, members, extra=()):
        self.dir = tmp_path
        self.members = [str(m) for m in members]
        self.extra = list(extra)
        self.sock = tmp_path / "nbd.sock"
        self.admin = tmp_path / "admin.sock"
        self.proc = None
        self.starts = 0

    @property
    def uri(self):
        return f"nbd+unix:///?socket={self.sock}"

    def start(self, *args, members=None, expect_fail=False, env=None):
        """Starts serve with `args` (and `env` added to the environment); returns self, or
        its log with `expect_fail`."""
        self.starts += 1
        log = self.dir / f"serve-{self.starts}.log"
        cmd = [RAIDKIT_BIN, "serve", "--unix", str(self.sock), "--admin", str(self.admin),
               *self.extra, *args, *(members or self.members)]
        with open(log, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                    stdin=subprocess.DEVNULL,
                                    env={**os.environ, **env} if env else None)
        line = proc.stdout.readline()
        if expect_fail:
            assert proc.wait(timeout=60) != 0, f"serve started: {cmd}"
            return log.read_text()
        if "raidkit: serving" not in line:
            proc.kill()
            proc.wait()
            pytest.fail(f"serve did not start: {cmd}\n{line}{log.read_text()}")
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        self.proc = proc
        self.log = log
        return self

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=STOP_TIMEOUT_S) == 0, self.logs()
        self.proc = None

    def logs(self):
        return "".join(p.read_text()[-3000:] for p in sorted(self.dir.glob("serve-*.log")))

    def cli(self, *args, timeout=300):
        return run([RAIDKIT_BIN, *args, "--admin", str(self.admin)], timeout=timeout)

    def write(self, offset, data):
        h = nbd.NBD()
        h.connect_uri(self.uri)
        h.pwrite(data, offset)
        h.flush()
        h.shutdown()

    def read(self, offset, length):
        h = nbd.NBD()
        h.connect_uri(self.uri)
        data = h.pread(length, offset)
        h.shutdown()
        return data

    def cleanup(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
