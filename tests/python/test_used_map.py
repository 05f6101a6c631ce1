"""Rebuilds that copy only data (issue 15, the used-regions map).

- ``test_a_spare_rebuild_copies_only_the_written_tenth``: a RAID 5 of four 64 MiB file members
  (``raidkit create``: the map is on by default) gets a tenth of its bytes written through NBD
  in a few runs; a member is failed and a spare full of random bytes is added. While the rebuild
  runs, ``status --json`` says it copies at most a quarter of the member (the written tenth
  rounded out to whole 1.5 MiB regions) (``total_bytes`` of
  ``of_member_bytes``) and ``raidkit status`` prints "copies X of Y"; afterwards most of the
  spare's data area still holds its random bytes (it was not written there). Every byte of the
  array reads back as written (zeroes elsewhere), also with each of the other members left out
  in turn (so through the rebuilt spare), and a scrub finds nothing.

An array made before the map (no used map, rebuilt in full) is test_format_compat.py's.
"""

import json
import time

from conftest import RAIDKIT_BIN, rng_for, run

MIB = 1 << 20
MEMBER_BYTES = 64 * MIB


def status_json(array):
    return json.loads(run([RAIDKIT_BIN, "status", "--json", "--admin", str(array.admin)]).stdout)


def read_all(array, size):
    """The whole array, in requests under NBD's 64 MiB limit."""
    return b"".join(array.read(at, min(16 * MIB, size - at)) for at in range(0, size, 16 * MIB))


def data_area(path):
    """A member's superblock as ``examine --json`` shows it."""
    return json.loads(run([RAIDKIT_BIN, "examine", "--json", str(path)]).stdout)[0]


def test_a_spare_rebuild_copies_only_the_written_tenth(tmp_path, arrays):
    members = [tmp_path / f"m{i}.img" for i in range(4)]
    # Regions of 1 MiB asked (1.5 MiB: whole stripes of 3 x 64 KiB); the default 4 MiB would
    # make 6 MiB regions, coarse for a 192 MiB array.
    run([RAIDKIT_BIN, "create", "-l", "5", "-c", "64K", "-s", str(MEMBER_BYTES), "-n", "um",
         "--used-region", "1M", *map(str, members)])
    array = arrays(tmp_path, members).start()
    status = status_json(array)
    size = status["size_bytes"]
    assert status["used_map"]["used_regions"] == 0, status
    rng = rng_for("used-map")
    model = bytearray(size)
    run_bytes = size // 60
    for i in range(6):  # a tenth of the array, in six runs at random places
        at = rng.randrange(0, size - run_bytes) // 512 * 512
        data = rng.randbytes(run_bytes)
        array.write(at, data)
        model[at:at + run_bytes] = data
    used = status_json(array)["used_map"]
    assert size // 10 <= used["used_bytes"] <= size // 4, used

    spare = tmp_path / "spare.img"
    garbage = rng.randbytes(MEMBER_BYTES)
    spare.write_bytes(garbage)
    array.cli("speed-limit", "--min", "4M", "--max", "4M")
    array.cli("fail", str(members[1]))
    array.cli("add", str(spare))
    deadline = time.monotonic() + 120
    task = None
    while time.monotonic() < deadline:
        task = status_json(array).get("task")
        if task and task["kind"] == "rebuild":
            break
        time.sleep(0.05)
    assert task and task["kind"] == "rebuild", status_json(array)
    member_data = task["of_member_bytes"]
    assert member_data and member_data // 20 <= task["total_bytes"] <= member_data // 4, task
    line = run([RAIDKIT_BIN, "status", "--admin", str(array.admin)]).stdout
    assert "copies" in line and "the regions holding data" in line, line
    array.cli("speed-limit", "--min", "1G", "--max", "1G")
    array.cli("status", "--watch", timeout=300)
    status = status_json(array)
    assert [m["state"] for m in status["members"][:4]] == ["active"] * 4, status
    assert read_all(array, size) == bytes(model)
    array.stop()

    # The spare was written only where data was: most of its data area is still the garbage.
    offset = data_area(spare)["data_offset_bytes"]
    now = spare.read_bytes()
    blocks = range(offset, MEMBER_BYTES, 4096)
    kept = sum(now[b:b + 4096] == garbage[b:b + 4096] for b in blocks)
    assert kept >= 0.65 * len(blocks), f"{kept} of {len(blocks)} blocks of the spare untouched"

    # Every byte, with each other member left out in turn: role 1 is served by the spare.
    roles = [members[0], spare, members[2], members[3]]
    for left_out in (0, 2, 3):
        served = [str(m) for i, m in enumerate(roles) if i != left_out]
        array.start(members=served)
        assert read_all(array, size) == bytes(model), f"without role {left_out}"
        array.stop()
    array.start(members=[str(m) for m in roles])
    array.cli("scrub", "--wait", timeout=300)
    scrub = status_json(array)["last_scrub"]
    assert scrub["finished"] and scrub["mismatches"] == 0, scrub
    array.stop()
