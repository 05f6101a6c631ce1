"""nbdcopy: a 256 MiB random image into the export and back out; checksums equal, and the rest of
the fresh export still reads as zeroes. With 4 connections when the server advertises multi-conn,
else 1. Every level; the transport alternates between levels.
"""

import hashlib

import pytest

from conftest import LEVELS, SOAK, rng_for, run

MIB = 1024 * 1024
IMAGE_BYTES = (1024 if SOAK else 256) * MIB
SUBSET = [(level, "tcp" if i % 2 == 0 else "unix") for i, level in enumerate(LEVELS)]


def member_bytes_for(level):
    count, data = LEVELS[level]
    per = (IMAGE_BYTES + 32 * MIB) // (data or count)
    return (per + MIB - 1) // MIB * MIB


def sha256_file(path, limit):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        left = limit
        while left:
            block = f.read(min(left, 8 * MIB))
            assert block, f"{path} is shorter than {limit}"
            h.update(block)
            left -= len(block)
    return h.hexdigest()


def assert_zero_after(path, start):
    with open(path, "rb") as f:
        f.seek(start)
        offset = start
        while block := f.read(8 * MIB):
            assert block.count(0) == len(block), f"non-zero bytes after {offset} in {path}"
            offset += len(block)


@pytest.mark.slow
@pytest.mark.parametrize("level,transport", SUBSET, ids=[f"raid{l}-{t}" for l, t in SUBSET])
def test_nbdcopy_roundtrip(make_server, tmp_path, level, transport):
    srv = make_server(level, transport, member_bytes=member_bytes_for(level))
    info = srv.info()
    size = int(info["export-size"])
    assert size >= IMAGE_BYTES, (size, IMAGE_BYTES)
    connections = "4" if info["can_multi_conn"] else "1"

    image = tmp_path / "image.bin"
    rng = rng_for(f"nbdcopy-{level}-{transport}")
    with open(image, "wb") as f:
        for _ in range(IMAGE_BYTES // (16 * MIB)):
            f.write(rng.randbytes(16 * MIB))
    out = tmp_path / "out.bin"
    run(["nbdcopy", f"--connections={connections}", str(image), srv.uri], timeout=300)
    run(["nbdcopy", f"--connections={connections}", srv.uri, str(out)], timeout=300)
    assert out.stat().st_size == size
    assert sha256_file(out, IMAGE_BYTES) == sha256_file(image, IMAGE_BYTES)
    assert_zero_after(out, IMAGE_BYTES)
