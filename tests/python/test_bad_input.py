"""Bad input from clients: libnbd with strict mode off (so it sends what the server must refuse),
and a raw socket client for what libnbd cannot send (unknown commands, bad magic, truncated
requests). Each test asserts the NBD error returned and that the server then still serves a second
connection correctly (a pattern written and read back), and that no data changed that should not.

Expected errors (NBD spec "Error values" and issue 3): read/trim past the end EINVAL; write and
write-zeroes past the end ENOSPC; read/write over the 32 MiB maximum EINVAL; unknown flags and
unknown commands EINVAL; writes, trims and zeroes on a read-only export EPERM; a bad request magic
or a truncated request closes that connection only.

Run on RAID 5 and RAID 1 (Unix socket) and RAID 6 (TCP): the edge is the same code for every
level.
"""

import socket
import struct
import time

import nbd
import pytest

import skips

from conftest import MAX_REQUEST_BYTES, rng_for

KIB = 1024
MIB = 1024 * KIB
SUBSET = [("5", "unix"), ("1", "unix"), ("6", "tcp")]
IDS = [f"raid{lv}-{tr}" for lv, tr in SUBSET]

NBD_EPERM, NBD_EINVAL, NBD_ENOSPC = 1, 22, 28
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
CMD_READ, CMD_WRITE = 0, 1


@pytest.fixture(params=SUBSET, ids=IDS)
def srv(request, make_server):
    level, transport = request.param
    return make_server(level, transport)


def connect(uri, strict=False):
    h = nbd.NBD()
    if not strict:
        h.set_strict_mode(0)
    h.connect_uri(uri)
    return h


def assert_nbd_error(expected, fn, *args, **kw):
    with pytest.raises(nbd.Error) as err:
        fn(*args, **kw)
    assert err.value.errno == expected, f"expected {expected}, got {err.value}"


def assert_serves(srv, offset=5 * MIB + 7, pattern=b"\x5c"):
    """A fresh connection writes, flushes and reads back correctly."""
    h = connect(srv.uri, strict=True)
    try:
        data = pattern * (64 * KIB + 3)
        h.pwrite(data, offset)
        h.flush()
        assert h.pread(len(data), offset) == data
    finally:
        h.shutdown()


def test_past_the_end(srv):
    h = connect(srv.uri)
    size = h.get_size()
    h.pwrite(b"\x77" * 8192, size - 8192)
    assert_nbd_error("EINVAL", h.pread, 4096, size - 100)
    assert_nbd_error("EINVAL", h.pread, 1, size)
    assert_nbd_error("ENOSPC", h.pwrite, b"\x01" * 4096, size - 100)
    assert_nbd_error("ENOSPC", h.pwrite, b"\x01" * 512, size + 4096)
    assert_nbd_error("ENOSPC", h.zero, 8192, size - 4096)
    assert_nbd_error("EINVAL", h.trim, 8192, size - 4096)
    # Nothing inside the export changed.
    assert h.pread(8192, size - 8192) == b"\x77" * 8192
    h.shutdown()
    assert_serves(srv)


def test_over_maximum_size(srv):
    if not srv.is_raidkit:
        skips.environment("RAIDKIT_TEST_SERVER: reference servers accept larger requests")
    h = connect(srv.uri)
    too_big = MAX_REQUEST_BYTES + 4096
    assert_nbd_error("EINVAL", h.pread, too_big, 0)
    h.shutdown()
    assert_serves(srv)
    h = connect(srv.uri)
    h.pwrite(b"\x31" * 4096, 0)
    try:
        h.pwrite(b"\x99" * too_big, 0)
        pytest.fail("a write over the maximum size succeeded")
    except nbd.Error as err:
        assert err.errno == "EINVAL", err
    finally:
        h.shutdown()
    h = connect(srv.uri, strict=True)
    assert h.pread(4096, 0) == b"\x31" * 4096, "an oversize write changed data"
    h.shutdown()
    assert_serves(srv)


def test_integrityhuge_pattern(srv):
    """The transaction pattern of nbd-tester-client's ``integrityhuge`` (the reference NBD
    implementation's make-integrityhuge; the tester is not packaged in Debian): on a 50 MB area,
    lengths 1 KiB-aligned from 1 KiB up to nearly the whole area, reads, writes, FUA writes and
    flushes, from a client that never asks for block sizes. raidkit serves every request up to
    the spec's default maximum payload (2^25 bytes, also what it advertises) and answers a
    larger one with EINVAL, changing nothing and keeping the connection (docs/DESIGN.md,
    "Requests over the maximum payload"); a reference server may accept them.
    """
    rng = rng_for("integrityhuge")
    h = connect(srv.uri)  # strict mode off: libnbd would refuse the oversize requests itself
    area = min(50 * 1000 * 1000, h.get_size()) // KIB * KIB
    assert area > MAX_REQUEST_BYTES + 2 * KIB, "the export is too small for the pattern"
    model = bytearray(area)
    for at in range(0, area, MAX_REQUEST_BYTES):
        h.pwrite(bytes(min(MAX_REQUEST_BYTES, area - at)), at)
    refused = 0
    for i in range(24):
        length = rng.randrange(0, area - 2 * KIB) // KIB * KIB + KIB
        kind = rng.choice(["read", "write", "write", "fua", "flush"])
        if i < 2:  # at least one oversize read and write, whatever the seed
            length = rng.randrange(MAX_REQUEST_BYTES, area - KIB) // KIB * KIB + KIB
            kind = ["read", "write"][i]
        offset = rng.randrange(0, area - length + 1) // KIB * KIB
        oversize = length > MAX_REQUEST_BYTES and srv.is_raidkit
        what = f"transaction {i}: {kind} {length} bytes at {offset}"
        if kind == "flush":
            h.flush()
        elif kind == "read" and oversize:
            assert_nbd_error("EINVAL", h.pread, length, offset)
            refused += 1
        elif kind == "read":
            assert h.pread(length, offset) == model[offset:offset + length], what
        else:
            data = rng.randbytes(length)
            flags = nbd.CMD_FLAG_FUA if kind == "fua" else 0
            if oversize:
                assert_nbd_error("EINVAL", h.pwrite, data, offset, flags=flags)
                refused += 1
            else:
                h.pwrite(data, offset, flags=flags)
                model[offset:offset + length] = data
    for at in range(0, area, MAX_REQUEST_BYTES):
        piece = min(MAX_REQUEST_BYTES, area - at)
        assert h.pread(piece, at) == model[at:at + piece], f"area at {at} differs from the model"
    h.shutdown()
    assert_serves(srv)
    if srv.is_raidkit:
        assert refused >= 2


def test_unknown_flags(srv):
    h = connect(srv.uri)
    h.pwrite(b"\x42" * 4096, 0)
    assert_nbd_error("EINVAL", h.pread, 4096, 0, flags=1 << 12)
    assert_nbd_error("EINVAL", h.pwrite, b"\x43" * 4096, 0, flags=1 << 12)
    assert h.pread(4096, 0) == b"\x42" * 4096
    h.shutdown()
    assert_serves(srv)


def test_read_only_export(make_server):
    srv = make_server("5", "unix")
    h = connect(srv.uri)
    h.pwrite(b"\x24" * 4096, 0)
    h.flush()
    h.shutdown()
    srv.stop()
    srv.read_only = True
    srv.start()
    h = connect(srv.uri)
    assert h.is_read_only()
    assert_nbd_error("EPERM", h.pwrite, b"\x25" * 4096, 0)
    assert_nbd_error("EPERM", h.trim, 4096, 0)
    assert_nbd_error("EPERM", h.zero, 4096, 0)
    assert h.pread(4096, 0) == b"\x24" * 4096
    h.shutdown()


class RawClient:
    """Minimal fixed-newstyle client: NBD_OPT_EXPORT_NAME, then simple replies only."""

    def __init__(self, srv):
        if srv.transport == "unix":
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(srv.sock)
        else:
            self.sock = socket.create_connection(("127.0.0.1", srv.port))
        self.sock.settimeout(20)
        assert self.recv(8) == b"NBDMAGIC"
        assert self.recv(8) == b"IHAVEOPT"
        (server_flags,) = struct.unpack(">H", self.recv(2))
        assert server_flags & 1, "server is not fixed newstyle"
        no_zeroes = server_flags & 2
        self.sock.sendall(struct.pack(">I", 1 | no_zeroes))
        name = srv.name.encode()
        self.sock.sendall(b"IHAVEOPT" + struct.pack(">II", 1, len(name)) + name)
        self.size, self.flags = struct.unpack(">QH", self.recv(10))
        if not no_zeroes:
            self.recv(124)

    def recv(self, n):
        data = b""
        while len(data) < n:
            block = self.sock.recv(n - len(data))
            if not block:
                raise ConnectionError(f"server closed the connection after {len(data)}/{n} bytes")
            data += block
        return data

    def request(self, cmd, offset, length, handle, flags=0, magic=REQUEST_MAGIC):
        self.sock.sendall(struct.pack(">IHHQQI", magic, flags, cmd, handle, offset, length))

    def simple_reply(self, handle):
        magic, error, got = struct.unpack(">IIQ", self.recv(16))
        assert magic == SIMPLE_REPLY_MAGIC, hex(magic)
        assert got == handle, (got, handle)
        return error

    def closed_by_server(self):
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self):
        self.sock.close()


def test_unknown_command(srv):
    c = RawClient(srv)
    c.request(0x7F, 0, 4096, handle=7)
    assert c.simple_reply(7) == NBD_EINVAL
    c.request(CMD_READ, 0, 16, handle=8)  # the connection goes on
    assert c.simple_reply(8) == 0
    assert len(c.recv(16)) == 16
    c.close()
    assert_serves(srv)


def test_bad_magic_closes_only_that_connection(srv):
    other = connect(srv.uri, strict=True)
    c = RawClient(srv)
    c.request(CMD_READ, 0, 4096, handle=1, magic=0x12345678)
    assert c.closed_by_server(), "server kept a connection with a bad request magic"
    c.close()
    data = b"\x61" * 10000
    other.pwrite(data, 123457)
    assert other.pread(len(data), 123457) == data
    other.shutdown()
    assert_serves(srv)


def test_truncated_requests(srv):
    h = connect(srv.uri, strict=True)
    h.pwrite(b"\x10" * 8192, 0)
    h.flush()
    # Half a request header, then hang up.
    c = RawClient(srv)
    c.sock.sendall(struct.pack(">IHH", REQUEST_MAGIC, 0, CMD_WRITE))
    c.close()
    # A write whose payload is cut short: no data may change.
    c = RawClient(srv)
    c.request(CMD_WRITE, 0, 8192, handle=3)
    c.sock.sendall(b"\xee" * 100)
    c.close()
    time.sleep(0.3)  # give a wrong server the time to apply it
    assert h.pread(8192, 0) == b"\x10" * 8192, "a truncated write changed data"
    h.shutdown()
    assert_serves(srv)
