"""Bad-block lists end to end (issue 15): a RAID 5 rebuild onto a spare meets a range the
surviving member cannot read (no redundancy left for it) and finishes anyway, recording the
range in the new member's bad-block list; reads of the lost range fail with EIO over NBD, every
other byte of the array reads back as written; a write over the range clears the record and
its data reads back.

The unreadable member is served by nbdkit: the ``ddrescue`` filter makes reads of the ranges
its map file marks bad fail with EIO (nbdkit 1.32's ``error`` filter cannot be limited to a
range: it fails every request of a kind, or a random share of them), under the ``cow`` filter
(4 KiB blocks) so that the member takes writes, as a disk does that remaps a sector on write.
"""

import json

import nbd
import pytest

import skips
from conftest import RAIDKIT_BIN, SERVER_KIND, require_tools, rng_for, run, start_nbdkit_unix

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit",
                                reason=skips.env_reason("raidkit-only (RAIDKIT_TEST_SERVER is not raidkit)"))

MIB = 1024 * 1024
MEMBER_BYTES = 8 * MIB
CHUNK = 64 * 1024
BLOCK = 4096
DATA_OFFSET = 1 * MIB
# The unreadable range of role 0's data area: inside row 5, a whole block.
LOST = 5 * CHUNK + 3 * BLOCK


def nbdkit_bad_range(tmp_path, image, offset, length):
    """nbdkit serving `image` with member bytes [offset, offset + length) unreadable."""
    mapfile = tmp_path / "m0.map"
    end = offset + length
    mapfile.write_text("# Mapfile. Created by GNU ddrescue\n0x0 + 1\n"
                       f"0x0 {offset:#x} +\n{offset:#x} {length:#x} -\n"
                       f"{end:#x} {MEMBER_BYTES - end:#x} +\n")
    sock = tmp_path / "m0.sock"
    proc = start_nbdkit_unix(sock, ["--filter=cow", "--filter=ddrescue", "file", str(image),
                                    f"ddrescue-mapfile={mapfile}", "cow-block-size=4096"])
    return proc, f"nbd+unix:///?socket={sock}"


def read_blocks(uri, size):
    """Reads the array block by block over one NBD connection: {offset: bytes or None (EIO)}."""
    h = nbd.NBD()
    h.connect_uri(uri)
    out = {}
    for off in range(0, size, BLOCK):
        try:
            out[off] = h.pread(BLOCK, off)
        except nbd.Error as e:
            assert e.errno in ("EIO", 5), f"read at {off}: {e}"  # EIO, nothing else
            out[off] = None
    h.shutdown()
    return out


def test_raid5_rebuild_records_an_unreadable_range_and_a_write_clears_it(tmp_path, arrays):
    require_tools("nbdkit")
    rng = rng_for("bad_blocks")
    images = [tmp_path / f"m{i}.img" for i in range(3)]
    spare = tmp_path / "spare.img"
    for p in [*images, spare]:
        with open(p, "wb") as f:
            f.truncate(MEMBER_BYTES)
    run([RAIDKIT_BIN, "create", "--level", "5", "--chunk", "64K", "--name", "bb",
         *map(str, images)])
    sb = json.loads(run([RAIDKIT_BIN, "examine", "--json", str(images[0])]).stdout)[0]
    assert sb["bad_blocks"] == {"ranges": [], "error": None}, sb
    assert sb["data_offset_bytes"] == DATA_OFFSET

    # Written while every member reads; then role 2 is left out and role 0 served by nbdkit.
    (tmp_path / "a").mkdir()
    first = arrays(tmp_path / "a", images)
    first.start()
    size = json.loads(first.cli("status", "--json").stdout)["size_bytes"]
    data = bytearray(rng.randbytes(size))
    first.write(0, bytes(data))
    first.stop()
    proc, m0 = nbdkit_bad_range(tmp_path, images[0], DATA_OFFSET + LOST, BLOCK)
    try:
        (tmp_path / "b").mkdir()
        array = arrays(tmp_path / "b", [m0, str(images[1])])
        array.start()
        array.cli("add", str(spare), "--wait", timeout=300)
        status = json.loads(array.cli("status", "--json").stdout)
        states = [m["state"] for m in status["members"] if m["role"] is not None]
        assert states == ["active"] * 3, status
        lost = status["bad_blocks"]
        assert [(b["role"], b["member"], b["member_offset"], b["len"]) for b in lost] \
            == [(2, str(spare), LOST, BLOCK)], status
        assert "recorded as lost" in array.logs()
        text = array.cli("status").stdout
        assert f"role 2 {spare}: member bytes {LOST}-{LOST + BLOCK}" in text, text

        # Only the blocks of that row on the unreadable member and the lost one fail.
        blocks = read_blocks(array.uri, size)
        failed = sorted(off for off, got in blocks.items() if got is None)
        status = json.loads(array.cli("status", "--json").stdout)
        held = sorted(b["array_offset"] for b in status["bad_blocks"]
                      if b["array_offset"] is not None)
        assert failed and failed == held, (failed, status["bad_blocks"])
        for off, got in blocks.items():
            if got is not None:
                assert got == data[off:off + BLOCK], f"array block at {off} differs"
        assert all(m["state"] == "active" for m in status["members"]), status

        # A write of the whole stripe makes it valid again: both records are cleared.
        stripe = lost[0]["stripe_array_offset"]
        fresh = rng.randbytes(2 * CHUNK)
        h = nbd.NBD()
        h.connect_uri(array.uri)
        h.pwrite(fresh, stripe)
        h.flush()
        h.shutdown()
        data[stripe:stripe + len(fresh)] = fresh
        status = json.loads(array.cli("status", "--json").stdout)
        assert status["bad_blocks"] == [], status
        blocks = read_blocks(array.uri, size)
        bad = [off for off, got in blocks.items() if got != data[off:off + BLOCK]]
        assert bad == [], f"blocks differ or fail after the write: {bad[:8]}"
        out = array.cli("scrub", "--wait", timeout=300).stdout
        assert " 0 mismatches" in out, out
        array.stop()
    finally:
        proc.kill()
        proc.wait()
    sb = json.loads(run([RAIDKIT_BIN, "examine", "--json", str(spare)]).stdout)[0]
    assert sb["bad_blocks"] == {"ranges": [], "error": None}, sb
