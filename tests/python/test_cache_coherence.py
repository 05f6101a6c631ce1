"""The read cache stays coherent with changes made below it.

A scrub repair rewrites member data underneath the NBD layer's read cache: RAID 6 finds the one
corrupt data member from P and Q and fixes the data itself. A client that read the corrupt data
before the repair (so the cache holds it) must read the repaired data afterwards, not the
cached copy. This guards the wiring of `Volume::set_data_changed_hook` to
`ReadCache::invalidate` in `raidkit serve`.
"""

import json
import os
import subprocess

import nbd
import pytest

import skips
from conftest import RAIDKIT_BIN, SERVER_KIND, run

MIB = 1024 * 1024
CHUNK = 128 * 1024


def start_server(tmp_path, members):
    sock = tmp_path / "nbd.sock"
    admin = tmp_path / "admin.sock"
    cmd = [RAIDKIT_BIN, "serve", "--create", "--level", "6", "--size", "16M",
           "--chunk", str(CHUNK), "--unix", str(sock), "--admin", str(admin),
           "--cache-size", "8M", *map(str, members)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert "raidkit: serving" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, sock, admin


def connect(sock):
    h = nbd.NBD()
    h.connect_uri(f"nbd+unix:///?socket={sock}")
    return h


@pytest.mark.skipif(SERVER_KIND != "raidkit", reason=skips.env_reason("RAIDKIT_TEST_SERVER: tests raidkit's own cache and scrub"))
def test_scrub_repair_below_the_cache_is_seen_by_clients(tmp_path):
    members = [tmp_path / f"m{i}.img" for i in range(4)]
    proc, sock, admin = start_server(tmp_path, members)
    try:
        h = connect(sock)
        original = os.urandom(CHUNK)
        h.pwrite(original, 0)
        h.flush()
        # RAID 6 over 4 members, stripe 0: P on member 3, Q on member 0, data index 0 (array
        # bytes 0..CHUNK) on member 1 (md's left-symmetric layout, docs/DESIGN.md).
        data_offset = json.loads(run([RAIDKIT_BIN, "examine", "--json", str(members[1])]).stdout)[0][
            "data_offset_bytes"]
        bad = bytes(b ^ 0xFF for b in original[4096:8192])
        with open(members[1], "r+b") as f:
            f.seek(data_offset + 4096)
            f.write(bad)
            f.flush()
            os.fsync(f.fileno())
        # The client now reads (and the cache keeps) the corrupt bytes: healthy reads do not
        # check parity.
        seen = h.pread(CHUNK, 0)
        assert seen[4096:8192] == bad, "the corruption should be visible before the repair"
        assert h.pread(CHUNK, 0) == seen, "second read (from the cache) agrees"

        repaired = run([RAIDKIT_BIN, "scrub", "--repair", "--wait", "--admin", str(admin)],
                       timeout=120).stdout
        assert " 0 repaired" not in repaired, repaired
        after = h.pread(CHUNK, 0)
        assert after == original, "a client must read the repaired data, not the cached copy"
        with open(members[1], "rb") as f:
            f.seek(data_offset + 4096)
            assert f.read(4096) == original[4096:8192], "the data member itself was fixed"
        clean = run([RAIDKIT_BIN, "scrub", "--wait", "--admin", str(admin)], timeout=120).stdout
        assert " 0 mismatches" in clean, clean
        h.shutdown()
    finally:
        proc.terminate()
        try:
            assert proc.wait(timeout=60) == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
