"""A crash that also takes a disk: ``kill -9`` of ``raidkit serve`` under writes, then a restart
with members missing (issue 10 item 2).

With a journal (write-through or write-back) the dirty and degraded RAID 5/6 array starts with
no flag: the journal's replay makes every stripe being written at the crash consistent, so the
missing members' data reconstructed from parity is right. Each round: start with every member,
wait for the background work (rebuild of the members left out last round, resync), check the
window, write with libnbd (``test_crash.Workload``: random writes, FLUSH every 2-6, FUA) and
``kill -9`` with requests in flight, restart without one member (RAID 6: two), and check that
every write acknowledged before the last completed FLUSH (write-back: every acknowledged write)
reads back from the degraded array, per 512-byte sector (``test_crash.Model``). Then a clean stop
while degraded. At the end, all members, a scrub with 0 mismatches.

Without a journal the restart is refused with a message naming ``--start-dirty-degraded``;
with the flag it starts and reports the array ranges at risk (the write-intent bitmap's dirty
regions, which cover the written window and not the whole array) in its log and in
``raidkit status`` (text and JSON) until the member is rebuilt.

Seeded by ``RAIDKIT_SEED`` (printed by pytest's header and in failure messages).
"""

import os
import random
import subprocess
import time

import pytest

from conftest import SEED
from test_crash import BLOCK, WINDOW_BLOCKS, AdminServer, Model, one_round, read_window, \
    scrub_clean, start_check_stop

ROUNDS = 8
BITMAP_REGION = 1 << 20


class DegradedServer(AdminServer):
    """An ``AdminServer`` that can be started without some members and with extra flags."""

    def __init__(self, workdir, level, journal_mode=None):
        super().__init__(workdir, level, journal_mode)
        self.left_out = []
        self.flags = []

    def command(self):
        cmd = super().command()
        at = cmd.index("serve") + 1
        extra = list(self.flags)
        if not self.created:
            extra += ["--bitmap-region", str(BITMAP_REGION)]
        gone = {self.members[i] for i in self.left_out}
        return [a for a in cmd[:at] + extra + cmd[at:] if a not in gone]

    def refused(self):
        """Runs the start command, which must exit with an error; returns its stderr."""
        try:
            proc = subprocess.run(self.command(), capture_output=True, text=True, timeout=30,
                                  cwd=self.workdir)
        except subprocess.TimeoutExpired:
            pytest.fail(f"started (and served) instead of refusing: {self.command()}")
        for path in (self.sock, self.admin_sock):
            if os.path.exists(path):
                os.unlink(path)
        assert proc.returncode != 0, f"started: {proc.stdout}{proc.stderr}"
        return proc.stderr

    def last_log(self):
        return (self.workdir / f"server-{self.starts}.stderr").read_text()


def journal_rounds(level, tmp_path, journal_mode, missing_count):
    rng = random.Random(f"{SEED}:dirty-degraded:{level}:{journal_mode}")
    server = DegradedServer(tmp_path / "srv", level, journal_mode)
    members = len(server.members)
    ack_is_durable = journal_mode == "write-back"
    name = f"raid{level} journal {journal_mode}, {missing_count} missing"
    try:
        server.start()
        window_offset = rng.randrange((server.size() - WINDOW_BLOCKS * BLOCK) // BLOCK) * BLOCK
        model = Model(bytes(WINDOW_BLOCKS * BLOCK))
        for round_index in range(ROUNDS):
            context = f"{name}, round {round_index} (RAIDKIT_SEED={SEED})"
            if round_index > 0:
                server.left_out = []
                server.start()
            server.wait_idle()
            image = read_window(server.uri, window_offset)
            model.check(image, f"{context}, all members back")
            model = Model(image)
            stats = one_round(server, model, rng, window_offset, ack_is_durable)
            first = rng.randrange(members)
            server.left_out = [(first + i) % members for i in range(missing_count)]
            server.start()  # dirty and degraded: no flag needed with the journal
            log = server.last_log()
            assert "replayed" in log, f"{context}: no journal replay in the log:\n{log}"
            model.check(read_window(server.uri, window_offset),
                        f"{context}, without roles {server.left_out}")
            assert server.status()["at_risk"] is None, f"{context}: {server.status()}"
            print(f"{context}: {stats}, restarted without roles {server.left_out}")
            server.stop()
        server.left_out = []
        start_check_stop(server, f"{name}, after the last round (RAIDKIT_SEED={SEED})", model,
                         window_offset)
    finally:
        server.cleanup()


@pytest.mark.parametrize("level,journal_mode,missing", [
    ("5", "write-through", 1),
    ("5", "write-back", 1),
    ("6", "write-through", 2),
    ("6", "write-back", 2),
], ids=["raid5-write-through", "raid5-write-back", "raid6-write-through-2-missing",
        "raid6-write-back-2-missing"])
def test_journal_starts_dirty_degraded_and_keeps_acknowledged_writes(level, journal_mode,
                                                                     missing, tmp_path):
    journal_rounds(level, tmp_path, journal_mode, missing)


def test_without_journal_the_flag_starts_it_and_names_the_ranges_at_risk(tmp_path):
    rng = random.Random(f"{SEED}:dirty-degraded:no-journal")
    server = DegradedServer(tmp_path / "srv", "5")
    try:
        server.start()
        size = server.size()
        window_offset = rng.randrange((size - WINDOW_BLOCKS * BLOCK) // BLOCK) * BLOCK
        stats = one_round(server, Model(bytes(WINDOW_BLOCKS * BLOCK)), rng, window_offset)
        server.left_out = [rng.randrange(len(server.members))]
        err = server.refused()
        for needle in ("not shut down cleanly", "write hole", "may read back wrong",
                       "raidkit serve --start-dirty-degraded", "regions its write-intent bitmap"):
            assert needle in err, f"{needle!r} not in the refusal: {err}"
        server.flags = ["--start-dirty-degraded"]
        server.start()
        # The window's bitmap regions are at risk; regions nothing wrote to are not.
        first = window_offset // BITMAP_REGION * BITMAP_REGION
        end = -(-(window_offset + WINDOW_BLOCKS * BLOCK) // BITMAP_REGION) * BITMAP_REGION
        risk = server.status()["at_risk"]
        assert risk is not None and not risk["whole_array"], risk
        spans = [(r["offset_bytes"], r["offset_bytes"] + r["len_bytes"]) for r in risk["ranges"]]
        # Every write fell in the window: only its regions (one or more) can be dirty.
        # A write acknowledged had its region marked first; with none acknowledged (the kill
        # came first) nothing may be at risk.
        assert spans or stats["acked_writes"] == 0, f"{stats}: no range at risk"
        assert all(first <= s < e <= end for s, e in spans), \
            f"window {window_offset}: {spans} outside [{first}, {end})"
        assert risk["bytes"] < size and risk["ranges_count"] == len(spans), risk
        assert all(s % BITMAP_REGION == 0 for s, _ in spans), spans
        if spans:
            start, stop = spans[0]
            log = server.last_log()
            assert "--start-dirty-degraded" in log and f"bytes {start}-{stop} (" in log, log
            text = server.admin("status").stdout
            assert "AT RISK" in text and f"    bytes {start}-{stop} (" in text, text
        server.stop()
        # Back with every member: still dirty (the resync could not run degraded) and the
        # member left out is stale, so the flag is needed again; the member is rebuilt, the
        # resync runs, and the ranges are no longer reported, with a line in the log.
        server.left_out = []
        server.flags = []
        assert "--start-dirty-degraded" in server.refused()
        server.flags = ["--start-dirty-degraded"]
        server.start()
        server.wait_idle()
        deadline = time.monotonic() + 30
        while server.status()["at_risk"] is not None:
            assert time.monotonic() < deadline, server.status()
            time.sleep(0.05)
        assert "every member is rebuilt" in server.last_log(), server.last_log()
        scrub_clean(server, f"no journal (RAIDKIT_SEED={SEED})")
        server.stop()
        # Clean and whole again: no flag needed.
        server.flags = []
        server.start()
        assert server.status()["at_risk"] is None
        server.stop()
    finally:
        server.cleanup()

