"""Arrays made by earlier raidkit still open (docs/FORMAT.md "Upgrade path"): every on-disk
addition is gated by a feature bit, so an array without it must assemble, serve the data it was
given, keep its parity right and take writes with today's binary.

The arrays are in tests/python/data/ (each directory's README says which build made it and what
it wrote); v1-raid1 (made before encryption) is opened by test_encrypt.py.
"""

import gzip
import json
import random
import shutil
from pathlib import Path

from conftest import RAIDKIT_BIN, run

MIB = 1 << 20
DATA = Path(__file__).resolve().parent / "data"
# What the making build wrote at array offset 1 MiB (tests/python/data/v1-raid5-bitmap/README.md).
RAID5_PATTERN = b"".join(b"raidkit format 2026-11-27 pattern %06d " % i
                         for i in range(8192))[:5 * 65536 + 4321]


def unpack(tmp_path, name, members):
    paths = []
    for m in members:
        path = tmp_path / f"{m}.img"
        with gzip.open(DATA / name / f"{m}.gz") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        paths.append(path)
    return paths


def test_raid5_with_a_bitmap_made_at_d7a2e12_opens_reads_scrubs_and_writes(tmp_path, arrays):
    members = unpack(tmp_path, "v1-raid5-bitmap", ["m0", "m1", "m2", "m3"])
    examined = run([RAIDKIT_BIN, "examine", str(members[0])]).stdout
    assert "format1127" in examined and "raid5" in examined, examined
    array = arrays(tmp_path, members).start()
    assert array.read(MIB, len(RAID5_PATTERN)) == RAID5_PATTERN
    status = json.loads(array.cli("status", "--json").stdout)
    assert status["health"] in ("active", "clean"), status
    assert [m["state"] for m in status["members"] if m["role"] is not None] == ["active"] * 4, status
    # The parity the old build wrote is right: a scrub finds nothing.
    scrubbed = array.cli("scrub", "--wait", timeout=120).stdout
    assert " 0 mismatches" in scrubbed, scrubbed
    array.write(0, b"written by today's raidkit")
    array.stop()

    # Degraded (role 1 left out), the data comes back from the old parity and the new.
    array.start(members=[str(m) for i, m in enumerate(members) if i != 1])
    assert array.read(MIB, len(RAID5_PATTERN)) == RAID5_PATTERN
    assert array.read(0, 26) == b"written by today's raidkit"
    assert json.loads(array.cli("status", "--json").stdout)["health"] == "degraded"
    array.stop()


def test_raid5_made_at_d7a2e12_grows_with_larger_members(tmp_path, arrays):
    """`raidkit grow --size max` (no new field, no feature bit) on the old array: the pattern
    reads back, clients are told the larger size, parity is right (scrub)."""
    import nbd

    members = unpack(tmp_path, "v1-raid5-bitmap", ["m0", "m1", "m2", "m3"])
    before = members[0].stat().st_size
    examined = run([RAIDKIT_BIN, "examine", str(members[0])]).stdout
    old_size = int(next(line.split()[2] for line in examined.splitlines()
                        if line.strip().startswith("array bytes")))
    for m in members:
        with open(m, "r+b") as f:
            f.truncate(before + 4 * MIB)
    out = run([RAIDKIT_BIN, "grow", "--size", "max", *map(str, members)]).stdout
    assert "grown from" in out and "the new part was zeroed" in out, out
    array = arrays(tmp_path, members).start()
    h = nbd.NBD()
    h.connect_uri(array.uri)
    size = h.get_size()
    h.shutdown()
    assert size == old_size + 3 * 4 * MIB, (size, old_size)  # 3 data members, 4 MiB more each
    assert array.read(MIB, len(RAID5_PATTERN)) == RAID5_PATTERN
    assert array.read(size - 4096, 4096) == bytes(4096)
    scrubbed = array.cli("scrub", "--wait", timeout=120).stdout
    assert " 0 mismatches" in scrubbed, scrubbed
    array.stop()


def test_the_old_array_has_no_used_map_and_a_spare_is_rebuilt_in_full(tmp_path, arrays):
    """Made before the used-regions map (feature_incompat bit 5): no map in examine or status,
    and a spare full of random bytes is written over its whole data area by the rebuild."""
    members = unpack(tmp_path, "v1-raid5-bitmap", ["m0", "m1", "m2", "m3"])
    examined = run([RAIDKIT_BIN, "examine", str(members[0])]).stdout
    assert "used map        none" in examined, examined
    array = arrays(tmp_path, members).start()
    assert json.loads(array.cli("status", "--json").stdout).get("used_map") is None
    spare = tmp_path / "spare.img"
    garbage = random.Random(15).randbytes(members[2].stat().st_size)
    spare.write_bytes(garbage)
    array.cli("fail", str(members[2]))
    array.cli("add", str(spare), "--wait", timeout=300)
    array.stop()
    offset = json.loads(run([RAIDKIT_BIN, "examine", "--json", str(spare)]).stdout)[0][
        "data_offset_bytes"]
    now = spare.read_bytes()
    blocks = range(offset, len(now), 4096)
    same = [b for b in blocks if now[b:b + 4096] == garbage[b:b + 4096]]
    assert not same, f"{len(same)} of {len(blocks)} blocks not rebuilt (first at {same[:1]})"
    array.start(members=[str(members[0]), str(members[1]), str(spare), str(members[3])])
    assert array.read(MIB, len(RAID5_PATTERN)) == RAID5_PATTERN
    array.stop()
