"""Block checksums (`raidkit create --checksum`, issue 15): bytes changed in a member file
behind raidkit's back (no I/O error anywhere) are found and healed.

- ``test_read_heals_corruption``: for RAID 1, 10, 5 and 6, a pattern is written through NBD,
  the array stopped, 3 bytes of member 0's data area changed in its file, the array served
  again: reading through NBD returns the pattern, ``status --json`` counts the mismatch
  (mirrors: a read lands on either copy, so a scrub finishes the job when the reads did not
  meet it), and after a stop the member file holds the original bytes again.
- ``test_scrub_finds_corruption_nobody_read``: the same corruption, then only ``scrub --wait``:
  the mismatch is counted and the file healed without any client read; the serve log names
  the member and the block. (The daemon's monitor raises ``ChecksumMismatch``: tested in
  crates/service/tests/monitor.rs.)
- ``test_single_copy_levels_fail_the_read``: linear and RAID 0: the read of the block fails
  (EIO) instead of returning wrong bytes, the blocks around it read fine.
- ``test_scrub_records_what_no_copy_can_heal``: the same block corrupted in every copy (RAID
  1, 10), in two of RAID 5's members, three of RAID 6's, and a healable block in a later stripe:
  ``scrub --wait`` finishes, records the unhealable block in those members' bad-block lists,
  reports where (status text and ``--json``: ``last_scrub.units_lost``/``lost``, ``bad_blocks``;
  the serve log), fails no member, heals the later block; reads of the lost blocks fail (EIO),
  the rest reads back, a write clears the records.
- ``test_old_array_has_no_checksums``: an array made without --checksum shows none.
- ``test_serve_create_makes_checksums``: ``serve --create --checksum crc32c`` makes the same
  array as ``create --checksum`` (the corruption is found and healed after a restart).
"""

import json

import nbd
import pytest

from conftest import RAIDKIT_BIN, rng_for, run

MIB = 1 << 20
MEMBER_BYTES = 16 * MIB
SPAN = 2 * MIB
# The data-area byte of the victim member that holds array byte 12288 on every level: member 0
# (linear, RAID 0 and 1 directly, RAID 10's first pair, RAID 5's stripe 0 has P on its last
# member), RAID 6's member 1 (stripe 0 has Q on member 0, md's left-symmetric).
AT = 12288


LEVELS = [("1", 2), ("10", 4), ("5", 3), ("6", 4)]
# The read cache off: every read reaches the members.
NO_CACHE = ["--cache-size", "0"]


def victim(level):
    return 1 if level == "6" else 0


def status(array):
    return json.loads(array.cli("status", "--json").stdout)


def checksum(array):
    return status(array)["checksum"]


def create(tmp_path, level, count, checksum=True):
    members = [tmp_path / f"m{i}.img" for i in range(count)]
    extra = ["--checksum", "crc32c"] if checksum else []
    run([RAIDKIT_BIN, "create", "-l", level, "-c", "64K", "-s", str(MEMBER_BYTES), "-n", "sum",
         *extra, *map(str, members)])
    return members


def data_offset(path):
    return json.loads(run([RAIDKIT_BIN, "examine", "--json", str(path)]).stdout)[0][
        "data_offset_bytes"]


def corrupt(path, offset):
    """Inverts 3 bytes of the data area at `offset` in the file; returns the old bytes."""
    at = data_offset(path) + offset
    with open(path, "r+b") as f:
        f.seek(at)
        old = f.read(3)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in old))
    return old


def member_bytes(path, offset, length):
    with open(path, "rb") as f:
        f.seek(data_offset(path) + offset)
        return f.read(length)


def written(tmp_path, arrays, level, count, name):
    """An array with a pattern written, stopped, the victim member corrupted at AT, served
    again. Returns the victim's file, the array, the pattern and the bytes it held."""
    members = create(tmp_path, level, count)
    array = arrays(tmp_path, members, NO_CACHE).start()
    data = rng_for(name).randbytes(SPAN)
    array.write(0, data)
    array.stop()
    member = members[victim(level)]
    old = corrupt(member, AT)
    assert member_bytes(member, AT, 3) != old
    array.start()
    return member, array, data, old


@pytest.mark.parametrize("level,count", LEVELS, ids=[f"raid{lv}" for lv, _ in LEVELS])
def test_read_heals_corruption(tmp_path, arrays, level, count):
    member, array, data, old = written(tmp_path, arrays, level, count, f"read-{level}")
    assert array.read(0, SPAN) == data
    for _ in range(50):
        if checksum(array)["mismatches"] > 0:
            break
        assert array.read(AT, 4096) == data[AT:AT + 4096]
    if level in ("1", "10") and checksum(array)["mismatches"] == 0:
        # The read balance never chose member 0's copy: the scrub must find it.
        array.cli("scrub", "--wait")
    else:
        assert checksum(array)["mismatches"] == 1, status(array)
    assert checksum(array)["mismatches"] == 1, status(array)
    array.stop()
    assert member_bytes(member, AT, 3) == old, "the member file was not healed"
    array.start()
    assert array.read(0, SPAN) == data
    array.cli("scrub", "--wait")
    assert checksum(array)["mismatches"] == 0, status(array)
    array.stop()


@pytest.mark.parametrize("level,count", LEVELS, ids=[f"raid{lv}" for lv, _ in LEVELS])
def test_scrub_finds_corruption_nobody_read(tmp_path, arrays, level, count):
    member, array, data, old = written(tmp_path, arrays, level, count, f"scrub-{level}")
    array.cli("scrub", "--wait")
    sums = checksum(array)
    assert sums["mismatches"] == 1, status(array)
    assert sums["verified_blocks"] > 0, sums
    text = array.cli("status").stdout
    assert "1 mismatches" in text, text
    array.stop()
    assert "checksum mismatch in the 4 KiB block at data byte 12288" in array.logs(), \
        array.logs()
    assert member_bytes(member, AT, 3) == old, "the member file was not healed"
    array.start()
    assert array.read(0, SPAN) == data
    array.stop()


# Members whose copy of AT's row is corrupted so that nothing can rebuild it.
BEYOND = {"1": [0, 1], "10": [0, 1], "5": [0, 1], "6": [1, 2, 3]}
# A data-area byte of row 5: another stripe (unit) than AT's on every level.
SECOND = 5 * 64 * 1024 + 4096


@pytest.mark.parametrize("level,count", LEVELS, ids=[f"raid{lv}" for lv, _ in LEVELS])
def test_scrub_records_what_no_copy_can_heal(tmp_path, arrays, level, count):
    members = create(tmp_path, level, count)
    array = arrays(tmp_path, members, NO_CACHE).start()
    data = rng_for(f"lost-{level}").randbytes(SPAN)
    array.write(0, data)
    array.stop()
    for m in BEYOND[level]:
        corrupt(members[m], AT)
    old = corrupt(members[victim(level)], SECOND)
    array.start()
    array.cli("scrub", "--wait")
    st = status(array)
    report = st["last_scrub"]
    assert report["finished"] and report["units_lost"] == 1, report
    assert all(m["state"] == "active" for m in st["members"]), st["members"]
    lost = sorted((b["role"], b["member_offset"], b["len"]) for b in report["lost"])
    assert lost == [(r, AT, 4096) for r in BEYOND[level]], report
    shown = sorted((b["role"], b["member_offset"]) for b in st["bad_blocks"])
    assert shown == [(r, AT) for r in BEYOND[level]], st["bad_blocks"]
    for b in report["lost"]:
        assert b["member"] == str(members[b["role"]]), b
        assert b["stripe_array_offset"] == 0, b
    text = array.cli("status").stdout
    assert "1 stripes not compared" in text, text
    assert f"lost role {BEYOND[level][0]} {members[BEYOND[level][0]]}: member bytes " \
        f"{AT}-{AT + 4096}" in text, text
    lost_blocks = [AT, 64 * 1024 + AT] if level in ("5", "6") else [AT]
    for off in range(0, SPAN, 4096):
        if off in lost_blocks:
            with pytest.raises(nbd.Error) as e:
                array.read(off, 4096)
            assert "Input/output error" in str(e.value) or e.value.errnum == 5, e.value
        else:
            assert array.read(off, 4096) == data[off:off + 4096], off
    # A write over the stripe makes it readable again and clears the records.
    array.write(0, data[:128 * 1024])
    assert status(array)["bad_blocks"] == [], status(array)
    assert array.read(0, SPAN) == data
    array.stop()
    logs = array.logs()
    assert f"bytes {AT}..{AT + 4096} of its data area recorded as lost" in logs, logs
    assert "holds 2 range(s) no member or redundancy can provide" in logs \
        or "holds 3 range(s) no member or redundancy can provide" in logs, logs
    assert member_bytes(members[victim(level)], SECOND, 3) == old, "the later block not healed"


@pytest.mark.parametrize("level", ["linear", "0"])
def test_single_copy_levels_fail_the_read(tmp_path, arrays, level):
    member, array, data, old = written(tmp_path, arrays, level, 2, f"single-{level}")
    with pytest.raises(nbd.Error) as e:
        array.read(AT, 4096)
    assert "Input/output error" in str(e.value) or e.value.errnum == 5, e.value
    assert checksum(array)["mismatches"] >= 1, status(array)
    assert array.read(0, AT) == data[:AT]
    assert array.read(AT + 4096, 4096) == data[AT + 4096:AT + 8192]
    array.stop()
    assert member_bytes(member, AT, 3) != old, "nothing to heal from, nothing rewritten"


def test_old_array_has_no_checksums(tmp_path, arrays):
    members = create(tmp_path, "1", 2, checksum=False)
    array = arrays(tmp_path, members, NO_CACHE).start()
    assert status(array).get("checksum") is None
    sb = json.loads(run([RAIDKIT_BIN, "examine", "--json", str(members[0])]).stdout)[0]
    assert sb["data_offset_bytes"] == MIB
    array.stop()


def test_serve_create_makes_checksums(tmp_path, arrays):
    members = [tmp_path / f"m{i}.img" for i in range(3)]
    array = arrays(tmp_path, members, NO_CACHE).start(
        "--create", "-l", "5", "-c", "64K", "-s", str(MEMBER_BYTES), "--checksum", "crc32c")
    assert checksum(array) is not None, status(array)
    data = rng_for("serve-create").randbytes(SPAN)
    array.write(0, data)
    array.stop()
    sb = json.loads(run([RAIDKIT_BIN, "examine", "--json", str(members[0])]).stdout)[0]
    assert sb["checksum"] is not None, sb
    old = corrupt(members[0], AT)
    array.start()
    assert array.read(0, SPAN) == data
    assert checksum(array)["mismatches"] == 1, status(array)
    array.stop()
    assert member_bytes(members[0], AT, 3) == old, "the member file was not healed"
