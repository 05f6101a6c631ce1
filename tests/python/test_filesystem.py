"""A real filesystem on the served array: nbdfuse exposes the export as a file, the kernel mounts
it through a loop device, ext4 is made on it and a tree of files is copied in; after unmounting,
``e2fsck -fn`` must find it clean, and after the server restarts from its member files the files
must read back with equal checksums (and fsck still clean).

Subset: RAID 5 over a Unix socket, RAID 6 over TCP, RAID 10 over a Unix socket. Skipped (never
passed; environment-dependent, see skips.py) when not root, or when FUSE or loop devices are
missing; a missing tool fails.
"""

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import skips
from conftest import require_tools, rng_for, run

KIB = 1024
MIB = 1024 * KIB
SUBSET = [("5", "unix"), ("6", "tcp"), ("10", "unix")]


def require_fuse_and_loop():
    require_tools("nbdfuse", "fusermount3", "mkfs.ext4", "e2fsck", "losetup", "mount", "umount")
    if os.geteuid() != 0:
        skips.environment("mounting a loop device needs root")
    if not os.path.exists("/dev/fuse"):
        skips.environment("/dev/fuse is missing (no FUSE in this machine or container)")
    probe = subprocess.run(["losetup", "-f"], capture_output=True, text=True)
    if probe.returncode != 0 or not os.path.exists("/dev/loop-control"):
        skips.environment(f"no free loop device: {probe.stderr.strip()}")


def make_tree(root, rng, total_bytes):
    """Directories of files with random sizes and contents; returns {relative path: sha256}."""
    sums = {}
    written = 0
    index = 0
    while written < total_bytes:
        rel = Path(f"d{index % 7}") / f"sub{index % 3}" / f"f{index}.bin"
        size = rng.choice([0, 1, 511, 4096, 4097, 65536 + 3, rng.randrange(1, 2 * MIB)])
        data = rng.randbytes(size)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        sums[str(rel)] = hashlib.sha256(data).hexdigest()
        written += size
        index += 1
    return sums


def tree_sums(root):
    sums = {}
    for path in root.rglob("*"):
        if path.is_file():
            sums[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    sums.pop("lost+found", None)
    return sums


class Fuse:
    """nbdfuse serving the export as <dir>/disk."""

    def __init__(self, workdir, uri, size):
        self.dir = workdir / "fuse"
        self.dir.mkdir(exist_ok=True)
        self.disk = self.dir / "disk"
        self.proc = subprocess.Popen(["nbdfuse", str(self.disk), uri],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"nbdfuse exited {self.proc.returncode}: {self.proc.stdout.read()}")
            if self.disk.exists() and self.disk.stat().st_size == size:
                return
            time.sleep(0.1)
        self.close()
        pytest.fail("nbdfuse did not expose the export within 20 s")

    def close(self):
        if self.proc.poll() is None:
            subprocess.run(["fusermount3", "-u", str(self.dir)], capture_output=True)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def mounted(fuse, mnt, body):
    mnt.mkdir(exist_ok=True)
    run(["mount", "-o", "loop", str(fuse.disk), str(mnt)], timeout=60)
    try:
        return body()
    finally:
        subprocess.run(["sync"])
        umount = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
        if umount.returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
            pytest.fail(f"umount failed: {umount.stderr}")


def fsck_clean(disk):
    proc = run(["e2fsck", "-fn", str(disk)], check=False, timeout=120)
    assert proc.returncode == 0, f"e2fsck -fn found problems:\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.slow
@pytest.mark.parametrize("level,transport", SUBSET, ids=[f"raid{l}-{t}" for l, t in SUBSET])
def test_ext4_on_nbdfuse_loop(make_server, tmp_path, level, transport):
    require_fuse_and_loop()
    srv = make_server(level, transport)
    size = srv.size()
    src = tmp_path / "src"
    src.mkdir()
    sums = make_tree(src, rng_for(f"fs-{level}-{transport}"), min(size // 4, 24 * MIB))
    mnt = tmp_path / "mnt"

    fuse = Fuse(tmp_path, srv.uri, size)
    try:
        run(["mkfs.ext4", "-q", "-F", str(fuse.disk)], timeout=120)
        mounted(fuse, mnt, lambda: shutil.copytree(src, mnt / "tree"))
        fsck_clean(fuse.disk)
    finally:
        fuse.close()

    srv.restart()
    fuse = Fuse(tmp_path, srv.uri, size)
    try:
        got = mounted(fuse, mnt, lambda: tree_sums(mnt / "tree"))
        assert got == sums, "file contents differ after remount"
        fsck_clean(fuse.disk)
    finally:
        fuse.close()
