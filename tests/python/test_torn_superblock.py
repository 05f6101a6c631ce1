"""A member's superblock whose checksum fails (a rewrite torn by a power cut, or corruption):
``raidkit serve`` still assembles the array, says so, and writes the superblock whole again.

- ``test_serve_assembles_over_a_torn_superblock``: for linear, RAID 1 and RAID 5 (an array
  stopped cleanly), the last bytes of one member's superblock (its crc32c) are changed in the
  file; ``raidkit examine`` reports the checksum mismatch; ``serve`` starts (before: it refused
  the whole array, "checksum mismatch"), its log names the member and says the superblock was
  rebuilt from its first sector and a peer's, the data reads back, status shows every role
  active (nothing degraded), and after a write and a stop the member's superblock is valid
  again (``examine`` reads it).
"""

import json

import pytest

from conftest import RAIDKIT_BIN, rng_for, run

MIB = 1 << 20
SB_OFFSET = 4096
SB_BYTES = 4096

LEVELS = [("linear", 2), ("1", 2), ("5", 3)]


def examine(path, check=True):
    return run([RAIDKIT_BIN, "examine", "--json", str(path)], check=check)


@pytest.mark.parametrize("level,count", LEVELS, ids=[f"raid{lv}" for lv, _ in LEVELS])
def test_serve_assembles_over_a_torn_superblock(tmp_path, arrays, level, count):
    members = [tmp_path / f"m{i}.img" for i in range(count)]
    run([RAIDKIT_BIN, "create", "-l", level, "-c", "64K", "-s", str(16 * MIB), "-n", "torn",
         *map(str, members)])
    array = arrays(tmp_path, members).start()
    data = rng_for(f"torn-{level}").randbytes(2 * MIB)
    array.write(0, data)
    array.stop()
    victim = members[1]
    with open(victim, "r+b") as f:
        f.seek(SB_OFFSET + SB_BYTES - 4)
        crc = f.read(4)
        f.seek(SB_OFFSET + SB_BYTES - 4)
        f.write(bytes(b ^ 0x5A for b in crc))
    broken = examine(victim, check=False)
    assert "checksum mismatch" in broken.stdout + broken.stderr, broken

    array.start()
    logs = array.logs()
    assert f"member {victim}" in logs and "torn by a power cut" in logs, logs
    assert array.read(0, len(data)) == data
    status = json.loads(array.cli("status", "--json").stdout)
    states = [m["state"] for m in status["members"]]
    assert states == ["active"] * count, status
    array.write(0, data[:4096])
    array.stop()
    sb = json.loads(examine(victim).stdout)[0]
    assert sb["array_name"] == "torn", sb
