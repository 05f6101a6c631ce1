"""qemu-io and qemu-img against the served array, for every level over both transports.

- ``test_qemu_io_patterns``: plain, FUA, write-zeroes (plain, may-unmap, fast), discard and flush,
  at aligned and unaligned offsets, across chunk and stripe boundaries and at the end of the
  export; every range is read back with ``read -P`` in the same connection and again from a new
  connection after the first one closed.
- ``test_qemu_img_convert_compare``: ``qemu-img convert`` the export to a local file and
  ``qemu-img compare`` them (identical), again after random data was written, and a deliberate
  difference is detected (the compare is not vacuous).
"""

import re

import nbd
import pytest

from conftest import CHUNK_BYTES, rng_for, run

ERROR_RE = re.compile(r"fail|error|could not|invalid|cannot|not supported", re.IGNORECASE)
KIB = 1024
MIB = 1024 * KIB


def qemu_io(uri, commands, read_only=False):
    """Run qemu-io commands on the export in one connection; fail on any error text."""
    cmd = ["qemu-io", "-f", "raw"]
    if read_only:
        cmd.append("-r")
    else:
        cmd += ["-d", "unmap"]
    for c in commands:
        cmd += ["-c", c]
    proc = run(cmd + [uri], timeout=120)
    text = proc.stdout + proc.stderr
    bad = [line for line in text.splitlines() if ERROR_RE.search(line)]
    assert not bad, f"qemu-io reported errors: {bad}\ncommands: {commands}\n{text[-3000:]}"
    return text


def pattern_plan(size, fast_zeroed):
    """(writes, reads): qemu-io commands and the read-back checks they imply.

    The final content of each range is tracked explicitly so the reads check what must be there.
    ``fast_zeroed``: whether the fast-zero request (done separately) succeeded.
    """
    chunk = CHUNK_BYTES
    end = size - 4097
    writes = [
        "write -P 0x11 0 4M",                                # several full stripes
        f"write -P 0x22 1000 {5000}",                        # unaligned inside a chunk
        f"write -f -P 0x33 {chunk - 7} {3 * chunk + 11}",    # FUA, across chunk boundaries
        f"write -z {2 * MIB + 512} {100 * KIB}",             # write zeroes
        f"write -z -u {2 * MIB + 200 * KIB} {300 * KIB}",    # write zeroes, may unmap
        f"discard {1 * MIB} {512 * KIB}",                    # trim whole chunks
        f"write -P 0x44 {1 * MIB + 4096} 777",               # rewrite inside the trimmed range
        f"write -P 0x55 {end} 4097",                         # up to the last byte
        "flush",
    ]
    reads = [
        "read -P 0x11 0 1000",
        "read -P 0x22 1000 5000",
        f"read -P 0x11 6000 {chunk - 7 - 6000}",
        f"read -P 0x33 {chunk - 7} {3 * chunk + 11}",
        f"read -P 0x11 {4 * chunk + 4} {MIB - 4 * chunk - 4}",
        f"read -P 0x0 {1 * MIB} 4096",
        f"read -P 0x44 {1 * MIB + 4096} 777",
        f"read -P 0x0 {1 * MIB + 4096 + 777} {512 * KIB - 4096 - 777}",
        f"read -P 0x11 {1 * MIB + 512 * KIB} {512 * KIB + 512}",
        f"read -P 0x0 {2 * MIB + 512} {100 * KIB}",
        f"read -P 0x11 {2 * MIB + 512 + 100 * KIB} {100 * KIB - 512}",
        f"read -P 0x0 {2 * MIB + 200 * KIB} {300 * KIB}",
        f"read -P 0x11 {2 * MIB + 500 * KIB} {MIB - 500 * KIB}",
        f"read -P 0x11 {3 * MIB} 3",
        f"read -P {'0x0' if fast_zeroed else '0x11'} {3 * MIB + 3} {50 * KIB}",
        f"read -P 0x11 {3 * MIB + 3 + 50 * KIB} {MIB - 3 - 50 * KIB}",
        f"read -P 0x55 {end} 4097",
    ]
    return writes, reads


def try_fast_zero(server, offset, length):
    """NBD_CMD_WRITE_ZEROES with FAST_ZERO: it must either zero the range or fail with ENOTSUP
    (the spec allows refusing a zero that would be slow); it may not fail with any other error,
    and when the export does not advertise fast zero, qemu must not even try."""
    cmd = ["qemu-io", "-f", "raw", "-c", f"write -z -n {offset} {length}", server.uri]
    proc = run(cmd, check=False)
    text = proc.stdout + proc.stderr
    if proc.returncode == 0 and not ERROR_RE.search(text):
        return True
    assert "Operation not supported" in text, f"fast zero failed unexpectedly: {text}"
    return False


def test_qemu_io_patterns(server):
    size = server.size()
    assert size >= 8 * MIB, f"export too small for the pattern plan: {size}"
    writes, reads = pattern_plan(size, fast_zeroed=False)
    qemu_io(server.uri, writes)
    fast_zeroed = try_fast_zero(server, 3 * MIB + 3, 50 * KIB)
    writes, reads = pattern_plan(size, fast_zeroed)
    qemu_io(server.uri, reads)
    # A new connection sees the same data.
    qemu_io(server.uri, reads)
    # And so does a new server process assembled from the same members.
    server.restart()
    qemu_io(server.uri, reads)


def write_random(uri, size, rng, count=24):
    """Write random bytes at random (unaligned) offsets through libnbd; returns the extents."""
    h = nbd.NBD()
    h.connect_uri(uri)
    try:
        extents = []
        for _ in range(count):
            length = rng.randrange(1, 2 * MIB)
            offset = rng.randrange(0, size - length)
            h.pwrite(rng.randbytes(length), offset)
            extents.append((offset, length))
        h.flush()
    finally:
        h.shutdown()
    return extents


def test_qemu_img_convert_compare(server, tmp_path):
    size = server.size()
    copy = tmp_path / "copy.img"
    qemu_io(server.uri, ["write -P 0x5a 12345 3M"])
    run(["qemu-img", "convert", "-f", "raw", "-O", "raw", server.uri, str(copy)])
    assert copy.stat().st_size == size
    run(["qemu-img", "compare", "-f", "raw", "-F", "raw", server.uri, str(copy)])

    rng = rng_for("qemu_img_convert_compare")
    write_random(server.uri, size, rng)
    differs = run(["qemu-img", "compare", "-f", "raw", "-F", "raw", server.uri, str(copy)],
                  check=False)
    assert differs.returncode == 1, f"compare missed the random writes: {differs.stdout}"

    copy.unlink()
    run(["qemu-img", "convert", "-f", "raw", "-O", "raw", server.uri, str(copy)])
    run(["qemu-img", "compare", "-f", "raw", "-F", "raw", server.uri, str(copy)])


@pytest.mark.parametrize("level", ["5"])
def test_read_only_export_refuses_writes(make_server, level):
    srv = make_server(level, "unix")
    qemu_io(srv.uri, ["write -P 0x66 0 1M", "flush"])
    srv.stop()
    srv.read_only = True
    srv.start()
    info = srv.info()
    assert info["is_read_only"] is True, info
    qemu_io(srv.uri, ["read -P 0x66 0 1M"], read_only=True)
    h = nbd.NBD()
    h.set_strict_mode(0)
    h.connect_uri(srv.uri)
    with pytest.raises(nbd.Error) as err:
        h.pwrite(b"x" * 4096, 0)
    h.shutdown()
    assert err.value.errno == "EPERM", err.value
    qemu_io(srv.uri, ["read -P 0x66 0 1M"], read_only=True)
