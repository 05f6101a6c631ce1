"""nbdinfo: the advertised export name, flags, block sizes and block status, for every level over
both transports.

Intended advertisement of ``raidkit serve`` (issue 3): minimum block 1 (any byte offset works),
preferred block = one full stripe of data (chunk x data members; the test arrays are shaped so this
is a power of two, as NBD requires; for RAID 1 and linear, which have no stripe to complete, any
power of two up to the chunk), maximum 32 MiB; flush, FUA, trim, zero, fast zero, cache and
multi-conn all advertised; ``base:allocation`` offered; the export answers to its array name and to
the default (empty) name and is listed by NBD_OPT_LIST.
"""

import json

import nbd

from conftest import CHUNK_BYTES, LEVELS, MAX_REQUEST_BYTES, run

MIB = 1024 * 1024


def is_power_of_two(n):
    return n > 0 and n & (n - 1) == 0


def expected_data_bytes(srv):
    count, data = LEVELS[srv.level]
    return srv.member_bytes * (data or count)


def test_nbdinfo_flags_and_block_sizes(server):
    info = server.info()
    assert info["is_read_only"] is False, info
    for flag in ("can_flush", "can_fua", "can_trim", "can_zero"):
        assert info[flag] is True, f"{flag} not advertised: {info}"
    assert "base:allocation" in info.get("contexts", []), info
    if not server.is_raidkit:
        return
    for flag in ("can_fast_zero", "can_cache", "can_multi_conn"):
        assert info[flag] is True, f"{flag} not advertised: {info}"
    assert info["block_size_minimum"] == 1, info
    assert info["block_size_maximum"] == MAX_REQUEST_BYTES, info
    preferred = info["block_size_preferred"]
    assert is_power_of_two(preferred) and preferred >= 512, info
    data_members = LEVELS[server.level][1]
    if server.level in ("linear", "1"):
        # No stripe to complete: any aligned block is efficient.
        assert preferred <= CHUNK_BYTES * max(1, data_members or 1), (server.level, info)
    else:
        assert preferred == CHUNK_BYTES * data_members, (server.level, info)
    size = int(info["export-size"])
    full = expected_data_bytes(server)
    # The superblock area takes a little of each member, nothing more.
    assert 0.9 * full <= size <= full, (size, full)


def test_nbdinfo_list_and_default_export(server):
    out = run(["nbdinfo", "--list", "--json", server.uri], timeout=60).stdout
    names = [e["export-name"] for e in json.loads(out)["exports"]]
    assert server.name in names, names
    size = server.size()
    out = run(["nbdinfo", "--json", server.default_uri()], timeout=60).stdout
    assert int(json.loads(out)["exports"][0]["export-size"]) == size


def test_block_status_reports_written_data(server):
    """base:allocation may say "data" anywhere, but never "zero" where data was written."""
    h = nbd.NBD()
    h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(server.uri)
    try:
        assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
        h.pwrite(b"\xaa" * MIB, MIB + 123)
        h.flush()
        extents = []

        def callback(metacontext, offset, entries, err):
            if metacontext == nbd.CONTEXT_BASE_ALLOCATION:
                extents.append((offset, list(entries)))

        offset = 0
        end = 3 * MIB
        while offset < end:
            before = len(extents)
            h.block_status(end - offset, offset, callback)
            assert len(extents) > before, "no base:allocation reply"
            start, entries = extents[-1]
            for i in range(0, len(entries), 2):
                length, flags = entries[i], entries[i + 1]
                lo, hi = start, start + length
                if hi > MIB + 123 and lo < 2 * MIB + 123:
                    assert flags & nbd.STATE_ZERO == 0, (lo, hi, flags)
                    assert flags & nbd.STATE_HOLE == 0, (lo, hi, flags)
                start = hi
            assert start > offset, "block status made no progress"
            offset = start
    finally:
        h.shutdown()
