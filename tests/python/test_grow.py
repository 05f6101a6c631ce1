"""`raidkit grow` (issue 15): a stopped array takes the room of members replaced by larger ones
(`--size max`, every level) and a linear array takes new members (`--add`); the data written
before reads back, clients see the new size, the new part is usable and (redundant levels)
consistent by scrub. What is not built yet (a running array, reshapes that move data) is
refused with a message saying so.
"""

import os
import subprocess
import time

import nbd
import pytest

from conftest import RAIDKIT_BIN, rng_for, run

MIB = 1 << 20
SMALL = 8 * MIB
LARGE = 16 * MIB


def size_of(array):
    """The size a new NBD connection is told."""
    h = nbd.NBD()
    h.connect_uri(array.uri)
    size = h.get_size()
    h.shutdown()
    return size


def grow(*args, check=True):
    return run([RAIDKIT_BIN, "grow", *map(str, args)], check=check)


def sizes(level, count, member_bytes):
    area = member_bytes - MIB
    return {"linear": count * area, "0": count * area, "1": area, "10": count * area // 2,
            "5": (count - 1) * area, "6": (count - 2) * area}[level]


@pytest.mark.parametrize("level,count", [("linear", 2), ("0", 2), ("1", 2), ("10", 4),
                                         ("5", 3), ("6", 4)])
def test_size_max_keeps_the_data_and_serves_the_larger_size(tmp_path, arrays, level, count):
    members = [tmp_path / f"m{i}.img" for i in range(count)]
    run([RAIDKIT_BIN, "create", "-l", level, "-c", "64K", "-s", str(SMALL), "-n", "g",
         *map(str, members)])
    array = arrays(tmp_path, members).start()
    old = size_of(array)
    assert old == sizes(level, count, SMALL)
    data = rng_for(f"grow-{level}").randbytes(old)
    array.write(0, data)
    array.stop()

    for m in members:
        os.truncate(m, LARGE)
    out = grow("--size", "max", *members).stdout
    if level == "linear":
        # Only the last member of a linear array grows (the others' data would move).
        new = old + (LARGE - SMALL)
        assert "left unused" in out, out
    else:
        new = sizes(level, count, LARGE)
    assert f"grown from {old // MIB}.0 MiB to {new // MIB}.0 MiB" in out, out
    if level not in ("linear", "0"):
        assert "the new part was zeroed" in out, out

    array.start()
    assert size_of(array) == new
    assert array.read(0, old) == data, "the data written before the grow"
    assert array.read(old, new - old) == bytes(new - old), "the new part reads as zeroes"
    more = rng_for(f"grow-more-{level}").randbytes(new - old)
    array.write(old, more)
    assert array.read(old, new - old) == more
    if level not in ("linear", "0"):
        out = array.cli("scrub", "--wait").stdout
        assert " 0 mismatches" in out, out
    array.stop()
    # Grown once, nothing more to take: refused, nothing written.
    again = grow("--size", "max", *members, check=False)
    assert again.returncode != 0 and "already uses all the room" in again.stderr, again.stderr
    array.start()
    assert array.read(0, old) == data and array.read(old, new - old) == more


def test_linear_add_appends_members_and_moves_no_data(tmp_path, arrays):
    members = [tmp_path / f"m{i}.img" for i in range(2)]
    run([RAIDKIT_BIN, "create", "-l", "linear", "-s", str(SMALL), "-n", "lin",
         *map(str, members)])
    array = arrays(tmp_path, members).start()
    old = size_of(array)
    data = rng_for("linear-add").randbytes(old)
    array.write(0, data)
    array.stop()
    new = [tmp_path / f"n{i}.img" for i in range(2)]
    for n in new:
        with open(n, "wb") as f:
            f.truncate(LARGE)
    out = grow("--add", new[0], "--add", new[1], *members).stdout
    assert "grown from" in out, out
    array.members += [str(n) for n in new]
    array.start()
    assert size_of(array) == old + 2 * (LARGE - MIB)
    assert array.read(0, old) == data
    tail = rng_for("linear-add-tail").randbytes(2 * (LARGE - MIB))
    array.write(old, tail)
    array.stop()
    array.start()
    assert array.read(0, old) == data and array.read(old, len(tail)) == tail
    # Without a new member the array no longer starts: its role is missing.
    array.stop()
    log = array.start(members=array.members[:-1], expect_fail=True)
    assert "missing" in log or "too few" in log, log


def test_what_is_not_built_is_refused_and_changes_nothing(tmp_path, arrays):
    members = [tmp_path / f"m{i}.img" for i in range(3)]
    run([RAIDKIT_BIN, "create", "-l", "5", "-s", str(SMALL), "-n", "r5", *map(str, members)])
    before = [m.read_bytes()[4096:8192] for m in members]
    new = tmp_path / "new.img"
    with open(new, "wb") as f:
        f.truncate(SMALL)

    def refused(args, says, served=False):
        r = grow(*args, check=False)
        assert r.returncode != 0 and says in r.stderr, (args, r.stderr)
        if not served:  # (a server rewrites its owner record)
            assert [m.read_bytes()[4096:8192] for m in members] == before, "superblocks unchanged"

    refused(["--add", new, *members], "not do yet")
    refused(["--chunk", "64K", *members], "not do yet")
    refused(["--level", "6", *members], "not do yet")
    refused(["--size", "1G", *members], "only \"max\"")
    refused(["--size", "max", *members[:2]], "grow needs every member")
    refused(["--size", "max", *members], "already uses all the room")
    array = arrays(tmp_path, members).start()
    # Served: refused (the members are held), and --admin says the online form is not built.
    refused(["--size", "max", *members], "stop the server", served=True)
    r = subprocess.run([RAIDKIT_BIN, "grow", "--admin", str(array.admin), "--size", "max"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "running array is not built yet" in r.stderr, r.stderr


def test_remote_members_get_the_new_part_resynced(tmp_path):
    """Members that are not files (NBD exports here) cannot be zeroed cheaply: grow records a
    resync offset at the old size and the next start resyncs the new part, whose old bytes
    (different on each member) leave parity wrong until then."""
    from test_faults import Array as RemoteArray, Nbdkit

    kits = [Nbdkit(tmp_path, f"r{i}", size=SMALL) for i in range(3)]
    array = RemoteArray(tmp_path, "rg", [k.uri for k in kits], extra=["--speed-min", "100M"])
    try:
        # No used-regions map: with one, the never-written new part is zeroed at its first
        # write instead of resynced, and this test is about the resync.
        run([RAIDKIT_BIN, "create", "-l", "5", "-c", "64K", "-n", "rg", "--no-used-map",
             *[str(k.image) for k in kits]])
        for k in kits:
            k.start()
        array.start()
        old = size_of(array)
        data = rng_for("grow-remote").randbytes(old)
        array_write(array, 0, data)
        array.stop()
        for i, k in enumerate(kits):
            k.stop()
            with open(k.image, "r+b") as f:
                f.truncate(LARGE)
                f.seek(SMALL + MIB)
                f.write(rng_for(f"grow-remote-old-{i}").randbytes(2 * MIB))
            k.start()
        out = grow("--size", "max", *[k.uri for k in kits]).stdout
        new = sizes("5", 3, LARGE)
        assert "resynced in the background from array byte %d" % old in out, out
        # RAID 5: the XOR of the members' data areas is zero where parity is right.
        assert xor_of([k.image for k in kits], SMALL, LARGE) != 0, "the old bytes disagree"
        array.start()
        assert size_of(array) == new
        deadline = time.monotonic() + 120
        while True:
            st = array.status()
            if st["task"] is None and st["health"] not in ("resyncing", "rebuilding"):
                break
            assert time.monotonic() < deadline, st
            time.sleep(0.2)
        h = nbd.NBD()
        h.connect_uri(array.uri)
        assert h.pread(old, 0) == data
        h.shutdown()
        out = array.cli("scrub", "--wait").stdout
        assert " 0 mismatches" in out, out
        array.stop()
        assert xor_of([k.image for k in kits], SMALL, LARGE) == 0, "the new part resynced"
    finally:
        array.cleanup()
        for k in kits:
            k.kill()


def xor_of(paths, start, end):
    """The XOR of the files' bytes [start, end), as an integer."""
    acc = 0
    for p in paths:
        with open(p, "rb") as f:
            f.seek(start)
            acc ^= int.from_bytes(f.read(end - start), "little")
    return acc


def array_write(array, offset, data):
    h = nbd.NBD()
    h.connect_uri(array.uri)
    h.pwrite(data, offset)
    h.flush()
    h.shutdown()
