"""Bounded memory: ``raidkit serve``'s peak resident memory stays under the sum of its configured
limits plus a small constant, under a load built to go past them.

The server runs a RAID 6 of 4 file members with ``--cache-size 16M --buffer-memory 64M`` (and, in
the second case, a 64 MiB write-back journal, whose buffer is bounded by ring/8 = 8 MiB). Three
fio jobs (three connections) then ask for far more than that at once: random writes and random
reads of 1-32 MiB at queue depth 16 each (up to 1 GiB of request data in flight if the server
took it all) and small random I/O at queue depth 32, with ``verify=crc32c`` on the writes. The
peak (VmHWM from /proc/PID/status) must stay under:

    cache + buffer memory x (1 + RAID 6 scratch) + idle buffers + journal buffer
          + write-back applies in flight + constant

where the RAID 6 scratch is what the engine allocates per request beside its data: P and Q for
every stripe touched, i.e. as much again as the data with 2 data members per stripe (so x 2 in
all), the idle buffers kept for reuse are a quarter of the buffer memory, the write-back
appliers copy at most 8 MiB of the journal buffer into the runs they are writing, and the constant
(48 MiB) covers the binary, its libraries, thread stacks and the allocator's slack. An unbounded
server (no buffer budget: 1 GiB in flight) fails this.

The fourth test is issue 17's load: nbdcopy's 4 connections x 64 requests reading (twice) a
RAID 5 of 4 x 320 MiB members that a 4-connection 1 MiB sequential write filled whole (so every
read reaches the members, and the write leaves the idle request buffers full of 1 MiB buffers),
with the same small limits and the same bound as the first case. Before the fix raidkit peaked
at 377-573 MiB here (480-641 MiB with the default limits), far over it, and 94-100 MiB after:
the idle 1 MiB buffers kept nbdcopy's reads from reusing buffers, so each read allocated and
freed one, and glibc's 16 per-thread arenas kept what they were freed.

The third case runs the same load with direct-I/O members (``--member-cache direct``, issue 17):
the same bound holds, and the page cache does not grow with the data written through raidkit:
the member files' own pages in the page cache (mincore over a mapping of each) grow by less than
1 MiB over the run, while in the buffered cases they grow by at least 16 MiB (the control that
shows the measure sees them).
"""

import subprocess
import sys

import pytest

from conftest import REPO, SEED, Server, require_tools

sys.path.append(str(REPO / "bench"))
from pagecache import cached_bytes  # noqa: E402  (bench/pagecache.py)

MIB = 1024 * 1024
MEMBER_BYTES = 160 * MIB
CACHE_BYTES = 16 * MIB
BUFFER_BYTES = 64 * MIB
JOURNAL_BYTES = 64 * MIB
CONSTANT_BYTES = 48 * MIB
RUNTIME_S = 8


class BoundedServer(Server):
    """RAID 6 (or `level`) x4 with small configured limits, optionally a write-back journal."""

    def __init__(self, workdir, journal, member_cache, level="6", member_bytes=MEMBER_BYTES):
        super().__init__(workdir, level, "unix", member_bytes)
        self.journal = str(self.workdir / "journal.img") if journal else None
        self.member_cache = member_cache

    def members_cached_bytes(self):
        """The member files' bytes in the page cache."""
        return sum(cached_bytes(m) for m in self.members)

    def command(self):
        cmd = super().command()
        at = cmd.index("serve") + 1
        extra = ["--cache-size", str(CACHE_BYTES), "--buffer-memory", str(BUFFER_BYTES),
                 "--member-cache", self.member_cache]
        if self.journal:
            if not self.created:
                with open(self.journal, "wb") as f:
                    f.truncate(JOURNAL_BYTES)
            extra += ["--journal", self.journal, "--journal-mode", "write-back"]
            # tmp_path may be on tmpfs (Debian's /tmp); nothing here cuts the power.
            extra += ["--allow-volatile-journal"]
        return cmd[:at] + extra + cmd[at:]

    def peak_rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc/PID/status")


# Issue 17's load: RAID 5 of 4 x 320 MiB (a 960 MiB export, as in docs/PERFORMANCE.md), read
# whole by nbdcopy this many times.
NBDCOPY_MEMBER_BYTES = 320 * MIB
NBDCOPY_PASSES = 2

# journal::writeback: no run is taken once the runs in flight hold APPLY_BYTES_MAX (4 MiB), and
# a run is at most 4 MiB here (whole 128 KiB stripes; records <= 64 MiB / 16), so < 8 MiB.
APPLIES_IN_FLIGHT_BYTES = 8 * MIB


def bound_bytes(journal):
    journal_buffer = JOURNAL_BYTES // 8 + APPLIES_IN_FLIGHT_BYTES if journal else 0
    idle = BUFFER_BYTES // 4
    return CACHE_BYTES + 2 * BUFFER_BYTES + idle + journal_buffer + CONSTANT_BYTES


def assert_within_bound(srv, peak, idle_rss, journal, load):
    """The peak is under `bound_bytes(journal)`, and the load really filled the buffer memory
    (else the bound proves nothing)."""
    bound = bound_bytes(journal)
    applies = (JOURNAL_BYTES // 8 + APPLIES_IN_FLIGHT_BYTES) // MIB if journal else 0
    assert peak <= bound, (
        f"peak RSS {peak / MIB:.0f} MiB{load} above the configured limits' sum "
        f"{bound / MIB:.0f} MiB (cache {CACHE_BYTES // MIB}, buffers {BUFFER_BYTES // MIB} "
        f"x 2, idle {BUFFER_BYTES // 4 // MIB}, journal + applies {applies},"
        f" constant {CONSTANT_BYTES // MIB} MiB)\n{srv.logs()}")
    assert peak >= idle_rss + BUFFER_BYTES // 2, (
        f"peak {peak / MIB:.0f} MiB: the load did not reach the buffer limit")


def fio_job(name, uri, args):
    return ["fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}", "--time_based",
            f"--runtime={RUNTIME_S}", f"--randseed={SEED % 2**31}", *args]


@pytest.mark.parametrize("journal,member_cache", [(False, "buffered"), (True, "buffered"),
                                                  (False, "direct")],
                         ids=["no-journal", "write-back-journal", "direct-members"])
def test_peak_memory_stays_under_the_configured_limits(tmp_path, journal, member_cache):
    require_tools("fio")
    srv = BoundedServer(tmp_path / "srv", journal, member_cache)
    srv.start()
    try:
        idle_rss = srv.peak_rss_bytes()
        cached_before = srv.members_cached_bytes()
        uri = srv.uri
        size = srv.size()
        jobs = [
            fio_job("big-writes", uri, ["--rw=randwrite", "--bsrange=1m-32m", "--iodepth=16",
                                        f"--size={size // 2}", "--verify=crc32c",
                                        "--verify_fatal=1"]),
            fio_job("big-reads", uri, ["--rw=randread", "--bsrange=1m-32m", "--iodepth=16",
                                       f"--offset={size // 2}", f"--size={size // 2}"]),
            fio_job("small-io", uri, ["--rw=randrw", "--bsrange=4k-64k", "--iodepth=32",
                                      f"--offset={size // 2}", f"--size={size // 2}"]),
        ]
        procs = [subprocess.Popen(job, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, cwd=tmp_path) for job in jobs]
        outputs = [p.communicate(timeout=RUNTIME_S * 20)[0] for p in procs]
        for job, proc, out in zip(jobs, procs, outputs):
            assert proc.returncode == 0, f"{' '.join(job)} failed:\n{out[-3000:]}"
        peak = srv.peak_rss_bytes()
        bound = bound_bytes(journal)
        cached_growth = srv.members_cached_bytes() - cached_before
        print(f"member cache {member_cache}: peak RSS {peak / MIB:.0f} MiB (idle "
              f"{idle_rss / MIB:.0f} MiB), bound {bound / MIB:.0f} MiB; members' page cache "
              f"{cached_growth / MIB:+.1f} MiB")
        if member_cache == "direct":
            assert cached_growth < MIB, (
                f"direct members: {cached_growth / MIB:.1f} MiB of member data landed in the "
                f"page cache below raidkit")
        else:
            # The control: the measure sees member data in the page cache when it is there.
            assert cached_growth >= 16 * MIB, (
                f"buffered members: the page cache grew by only {cached_growth / MIB:.1f} MiB")
        assert idle_rss < CONSTANT_BYTES, f"idle server already at {idle_rss / MIB:.0f} MiB"
        assert_within_bound(srv, peak, idle_rss, journal, "")
    finally:
        if srv.proc is not None:
            srv.stop()
        srv.cleanup()


def test_nbdcopy_four_connections_reading_a_written_export_stays_under_the_limits(tmp_path):
    """Issue 17: nbdcopy's 4 connections reading a fully written RAID 5 (see the module text).

    The bound is the first case's (no journal): read cache, buffer memory x 2 (in use, plus the
    RAID scratch of the write phase, which for RAID 5's one parity member is at most a third of
    the data plus a stripe at each end, under RAID 6's x 1), idle buffers and the constant. The
    reads themselves hold only their reply buffers (a healthy RAID 5 read goes straight into
    them), charged to the buffer memory, so the run peaks near cache + buffer memory + idle.
    """
    require_tools("fio", "nbdcopy")
    srv = BoundedServer(tmp_path / "srv", False, "buffered", level="5",
                        member_bytes=NBDCOPY_MEMBER_BYTES)
    srv.start()
    try:
        idle_rss = srv.peak_rss_bytes()
        uri = srv.uri
        size = srv.size()
        assert size % (4 * MIB) == 0, size
        write = ["fio", "--name=fill", "--ioengine=nbd", f"--uri={uri}", "--rw=write",
                 "--bs=1m", "--iodepth=16", "--numjobs=4", f"--size={size // 4}",
                 f"--offset_increment={size // 4}", "--group_reporting"]
        out = subprocess.run(write, capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert out.returncode == 0, f"{' '.join(write)} failed:\n{out.stdout[-3000:]}{out.stderr}"
        after_write = srv.peak_rss_bytes()
        # Reset VmHWM (proc(5), clear_refs "5"), so what follows is nbdcopy's own peak.
        with open(f"/proc/{srv.proc.pid}/clear_refs", "w") as f:
            f.write("5")
        copy = ["nbdcopy", "--connections=4", "--threads=4", "--requests=64", uri, "null:"]
        for _ in range(NBDCOPY_PASSES):
            out = subprocess.run(copy, capture_output=True, text=True, cwd=tmp_path, timeout=300)
            assert out.returncode == 0, f"{' '.join(copy)} failed:\n{out.stdout}{out.stderr}"
        reading = srv.peak_rss_bytes()
        peak = max(after_write, reading)
        bound = bound_bytes(False)
        print(f"nbdcopy 4 connections: peak RSS while reading {reading / MIB:.0f} MiB (idle "
              f"{idle_rss / MIB:.0f}, the write's peak {after_write / MIB:.0f} MiB), bound "
              f"{bound / MIB:.0f} MiB")
        # The write filled the buffer memory; the reads are what used to go past the bound.
        assert_within_bound(srv, peak, idle_rss, False,
                            f" (nbdcopy's 4 connections reading {reading / MIB:.0f} MiB, the "
                            f"write before them {after_write / MIB:.0f} MiB)")
    finally:
        if srv.proc is not None:
            srv.stop()
        srv.cleanup()
