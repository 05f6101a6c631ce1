"""A full filesystem under sparse member files (issue 10 item 5).

Each test mounts its own small tmpfs (root is needed to mount; without it the test is skipped
as environment-dependent) and puts the member files on it.

- ``test_full_filesystem_is_not_a_dead_disk``: a RAID 5 of four 100 MiB sparse files on a
  200 MiB tmpfs, and on a loop-mounted 200 MiB ext4, that also holds a 40 MiB filler file. ``create`` warns that the members can
  outgrow the filesystem. A sequential write through NBD fills the filesystem: the client gets
  ``ENOSPC`` (not ``EIO``), no member is marked faulty, ``status`` names the full filesystem,
  the server log says which filesystem is full. The filler is deleted: the refused blocks are
  written again and more after them, the half-written stripes are resynced (status goes back
  to zero unsynced bytes), every acknowledged block reads back, a scrub finds 0 mismatches,
  and the server stops cleanly.
- ``test_full_filesystem_under_a_write_back_journal``: the same array with a write-back
  journal on another filesystem. Writes are acknowledged from the journal past the point where
  the members' filesystem is full; the appliers are refused, the journal keeps the records, and
  only when its buffer is full is the client refused (``ENOSPC``). The server is stopped while
  still full (it cannot drain: not a clean exit), space is freed, the restart replays the
  journal, and every acknowledged block reads back; scrub finds 0 mismatches.
- ``test_create_preallocate``: ``create --preallocate`` reserves every member file's blocks
  (``st_blocks``); when the filesystem cannot hold them it refuses before writing anything.
"""

import errno
import hashlib
import json
import os
import random
import subprocess
import threading
import time
from pathlib import Path

import nbd
import pytest

import skips

from conftest import RAIDKIT_BIN, SEED, SERVER_KIND, START_TIMEOUT_S, run

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit",
                                reason=skips.env_reason("raidkit-only (RAIDKIT_TEST_SERVER is not raidkit)"))

MIB = 1024 * 1024
BLOCK = 1 * MIB


@pytest.fixture
def tmpfs(tmp_path):
    """A mount factory: ``tmpfs(size_mib, kind="tmpfs")`` mounts a fresh filesystem of that
    size and returns its path: a tmpfs, or (``kind="ext4"``) ext4 on a loop-mounted image file
    (delayed allocation: ENOSPC comes from the page-cache write, as on a real disk)."""
    mounted = []

    def mount(size_mib, kind="tmpfs"):
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        if kind == "tmpfs":
            cmd = ["mount", "-t", "tmpfs", "-o", f"size={size_mib}M", "tmpfs", str(point)]
        else:
            skips.require_tools("mkfs.ext4", "losetup")
            image = tmp_path / f"fs{len(mounted)}.ext4"
            with open(image, "wb") as f:
                f.truncate(size_mib * MIB)
            run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)])
            cmd = ["mount", "-o", "loop", str(image), str(point)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            skips.environment(f"cannot mount a {kind} (root needed): {proc.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def no_space(err):
    """True when an ``nbd.Error`` carries ENOSPC (libnbd gives the errno as a number)."""
    code = err.errno
    return code == errno.ENOSPC or code == "ENOSPC"


def status(admin):
    out = run([RAIDKIT_BIN, "status", "--admin", str(admin), "--json"]).stdout
    return json.loads(out)


class Serve:
    def __init__(self, workdir, members, extra=(), log_name="serve.log"):
        self.dir = Path(workdir)
        self.sock = self.dir / "nbd.sock"
        self.admin = self.dir / "admin.sock"
        self.log_path = self.dir / log_name
        for p in (self.sock, self.admin):
            if p.exists():
                p.unlink()
        cmd = [RAIDKIT_BIN, "serve", "--unix", str(self.sock), "--admin", str(self.admin),
               *extra, *map(str, members)]
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                     stdin=subprocess.DEVNULL)
        log.close()
        first = []
        reader = threading.Thread(target=lambda: first.append(self.proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not first or "raidkit: serving" not in first[0]:
            self.proc.kill()
            pytest.fail(f"serve did not start: {first}\n{self.log()}")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    @property
    def uri(self):
        return f"nbd+unix:///raidkit?socket={self.sock}"

    def log(self):
        return self.log_path.read_text()

    def stop(self, expect_ok=True):
        self.proc.terminate()
        code = self.proc.wait(timeout=60)
        if expect_ok:
            assert code == 0, f"serve exited {code}\n{self.log()}"
        return code


def wait_until(what, cond, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_full_filesystem_is_not_a_dead_disk(tmp_path, tmpfs, kind):
    rng = random.Random(f"{SEED}:no_space:{kind}")
    fs = tmpfs(200, kind)
    filler = fs / "filler"
    filler.write_bytes(os.urandom(40 * MIB))
    members = [fs / f"m{i}.img" for i in range(4)]
    created = run([RAIDKIT_BIN, "create", "--level", "5", "--size", "100M", "--chunk", "64K",
                   *map(str, members)])
    assert "--preallocate" in created.stderr and str(fs) in created.stderr, created.stderr
    srv = Serve(tmp_path, members)
    try:
        h = nbd.NBD()
        h.connect_uri(srv.uri)
        size = h.get_size()
        acked, refused_at = fill_until_refused(h, rng, size)
        # Further writes into holes are refused the same way, never with EIO.
        for _ in range(3):
            with pytest.raises(nbd.Error) as err:
                h.pwrite(rng.randbytes(BLOCK), refused_at)
            assert no_space(err.value), err.value
        s = status(srv.admin)
        assert [m["state"] for m in s["members"]] == ["active"] * 4, s["members"]
        assert all(m["write_errors"] == 0 for m in s["members"]), s["members"]
        full = [m for m in s["members"] if m["no_space_errors"] > 0]
        assert full, s["members"]
        assert all(m["filesystem"]["mount_point"] == str(fs) for m in full), full
        assert "out of space" in srv.log() and str(fs) in srv.log(), srv.log()
        # Space comes back: the refused blocks and a few more are written.
        filler.unlink()
        for extra in range(4):
            at = refused_at + extra * BLOCK
            if at + BLOCK > size:
                break
            data = rng.randbytes(BLOCK)
            h.pwrite(data, at)
            acked[at] = hashlib.sha256(data).digest()
        h.flush()
        wait_until("the resync of half-written stripes",
                   lambda: status(srv.admin)["unsynced_bytes"] == 0)
        for at, digest in sorted(acked.items()):
            assert hashlib.sha256(h.pread(BLOCK, at)).digest() == digest, \
                f"acknowledged block at {at} reads back wrong"
        h.shutdown()
        scrub = run([RAIDKIT_BIN, "scrub", "--admin", str(srv.admin), "--wait"],
                    timeout=300).stdout
        assert " 0 mismatches" in scrub, scrub
        s = status(srv.admin)
        assert [m["state"] for m in s["members"]] == ["active"] * 4, s["members"]
    finally:
        srv.stop()


def test_create_preallocate(tmp_path, tmpfs):
    fs = tmpfs(64)
    members = [fs / f"p{i}.img" for i in range(2)]
    run([RAIDKIT_BIN, "create", "--level", "1", "--size", "16M", "--preallocate",
         *map(str, members)])
    for m in members:
        assert m.stat().st_blocks * 512 >= 16 * MIB, f"{m}: not preallocated"
    # Two 40 MiB members cannot both fit on what is left: refused before anything is written.
    big = [fs / f"b{i}.img" for i in range(2)]
    proc = run([RAIDKIT_BIN, "create", "--level", "1", "--size", "40M", "--preallocate",
                *map(str, big)], check=False)
    assert proc.returncode != 0, proc.stdout
    assert "--preallocate" in proc.stderr and str(fs) in proc.stderr, proc.stderr
    examine = run([RAIDKIT_BIN, "examine", str(big[0])], check=False)
    assert examine.returncode != 0, "a superblock was written although create was refused"


def fill_until_refused(h, rng, size):
    """Sequential 1 MiB writes from 0 until one fails; the failure must be ENOSPC. Returns the
    acknowledged blocks (offset -> sha256) and the refused offset."""
    acked = {}
    offset = 0
    while offset + BLOCK <= size:
        data = rng.randbytes(BLOCK)
        try:
            h.pwrite(data, offset)
        except nbd.Error as err:
            assert no_space(err), f"write at {offset}: {err} (errno {err.errno})"
            return acked, offset
        acked[offset] = hashlib.sha256(data).digest()
        offset += BLOCK
    pytest.fail("the filesystem never filled up")


def test_full_filesystem_under_a_write_back_journal(tmp_path, tmpfs):
    rng = random.Random(f"{SEED}:no_space_journal")
    fs = tmpfs(200)
    filler = fs / "filler"
    filler.write_bytes(os.urandom(100 * MIB))
    members = [fs / f"m{i}.img" for i in range(4)]
    journal = tmp_path / "journal.img"
    run([RAIDKIT_BIN, "create", "--level", "5", "--size", "100M", "--chunk", "64K",
         "--journal", str(journal), "--journal-size", "128M", "--journal-mode", "write-back",
         "--allow-volatile-journal", *map(str, members)])
    # tmp_path may be on tmpfs (Debian's /tmp); nothing here cuts the power.
    extra = ["--journal", str(journal), "--allow-volatile-journal"]
    srv = Serve(tmp_path, members, extra)
    try:
        h = nbd.NBD()
        h.connect_uri(srv.uri)
        size = h.get_size()
        acked, refused_at = fill_until_refused(h, rng, size)
        s = status(srv.admin)
        assert [m["state"] for m in s["members"]] == ["active"] * 4, s["members"]
        assert s["journal"]["unapplied_bytes"] > 0, s["journal"]
        member_bytes = sum(m.stat().st_blocks * 512 for m in members)
        assert member_bytes < refused_at * 4 // 3, \
            "the client was refused only once the journal's buffer was full"
        h.shutdown()
    finally:
        code = srv.stop(expect_ok=False)
    assert code != 0, "a server that could not apply its journal must not report a clean stop"
    filler.unlink()
    srv = Serve(tmp_path, members, extra, log_name="serve-2.log")
    try:
        h = nbd.NBD()
        h.connect_uri(srv.uri)
        for at, digest in sorted(acked.items()):
            assert hashlib.sha256(h.pread(BLOCK, at)).digest() == digest, \
                f"acknowledged block at {at} reads back wrong after the replay"
        h.shutdown()
        wait_until("the resync of half-written stripes",
                   lambda: status(srv.admin)["unsynced_bytes"] == 0)
        scrub = run([RAIDKIT_BIN, "scrub", "--admin", str(srv.admin), "--wait"],
                    timeout=300).stdout
        assert " 0 mismatches" in scrub, scrub
    finally:
        srv.stop()
