"""Real-process crash tests: ``kill -9`` of ``raidkit serve`` in the middle of a write stream.

For each redundant level (1, 5, 6, 10), ``ROUNDS`` rounds on the same member files; each round:

1. start ``raidkit serve --admin SOCK`` (created in round 0, assembled from the member files after);
2. wait for its background work (the resync of an array left dirty by the kill) to finish
   (``raidkit status --json``: no task, health not resyncing);
3. verify the window written in the previous round, per 512-byte sector: every sector holds the
   newest value known durable (acknowledged before a FLUSH that completed, or an acknowledged FUA
   write) or a value written after it (in flight or not yet flushed may be old or new);
4. ``raidkit scrub --wait``: zero parity/mirror mismatches;
5. drive the server with libnbd's asynchronous API (up to ``DEPTH`` requests in flight): seeded
   random writes of 1-4 blocks of 4 KiB, one in eight of 16-64 blocks (one in eight FUA) at
   random blocks of a 2 MiB window, a FLUSH every 2-6 writes; never two writes in flight to one
   block, so every block's versions are ordered. After a random number of requests, SIGKILL the
   server with requests in flight.

``test_kill9_write_back_journal_keeps_acknowledged_writes`` does the same for RAID 5 and 6 with a
write-back journal (``--journal PATH --journal-mode write-back``): there every acknowledged write,
flushed or not, must read back after the restart (the journal is replayed at start).

Seeded by ``RAIDKIT_SEED`` (printed in pytest's header and on failure; each round prints its own
line). ``RAIDKIT_SOAK=1`` runs ``ROUNDS_SOAK`` rounds per level.
"""

import json
import os
import random
import signal
import time

import nbd
import pytest

from conftest import RAIDKIT_BIN, SEED, SOAK, Server, run

BLOCK = 4096
SECTOR = 512
WINDOW_BLOCKS = 512          # 2 MiB of the array, spread over several stripes
MEMBER_BYTES = 16 * 1024 * 1024
DEPTH = 8
ROUNDS = 20
ROUNDS_SOAK = 100
IDLE_TIMEOUT_S = 60
LEVELS = ["1", "5", "6", "10"]


class AdminServer(Server):
    """A conftest ``Server`` that also serves the admin API on a Unix socket."""

    def __init__(self, workdir, level, journal_mode=None):
        super().__init__(workdir, level, "unix", MEMBER_BYTES)
        self.admin_sock = str(self.workdir / "admin.sock")
        self.journal_mode = journal_mode
        self.journal = str(self.workdir / "journal.img")

    def command(self):
        cmd = super().command()
        at = cmd.index("serve") + 1
        extra = ["--admin", self.admin_sock]
        if self.journal_mode:
            # The journal's periodic checkpoint (an array flush) counts as client activity, so
            # the resync would crawl at the default minimum rate: raise the minimum.
            extra += ["--journal", self.journal, "--speed-min", "200M"]
            # tmp_path may be on tmpfs (Debian's /tmp); a kill -9 does not empty it.
            extra += ["--allow-volatile-journal"]
            if not self.created:
                extra += ["--journal-mode", self.journal_mode, "--journal-size", "64M"]
        return cmd[:at] + extra + cmd[at:]

    def kill9_now(self):
        """SIGKILL without waiting for anything else; remove the sockets as an operator would."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        for path in (self.sock, self.admin_sock):
            if os.path.exists(path):
                os.unlink(path)

    def admin(self, *args, timeout=120):
        return run([RAIDKIT_BIN, *args, "--admin", self.admin_sock], timeout=timeout)

    def status(self):
        return json.loads(self.admin("status", "--json").stdout)

    def wait_idle(self):
        deadline = time.monotonic() + IDLE_TIMEOUT_S
        while True:
            st = self.status()
            if st["task"] is None and st["health"] not in ("resyncing", "rebuilding"):
                return st
            assert time.monotonic() < deadline, f"background work still running: {st}"
            time.sleep(0.05)


class Model:
    """Per block of the window: its versions since the round began, and which is durable."""

    def __init__(self, baseline):
        assert len(baseline) == WINDOW_BLOCKS * BLOCK
        self.versions = [[baseline[b * BLOCK:(b + 1) * BLOCK]] for b in range(WINDOW_BLOCKS)]
        self.durable = [0] * WINDOW_BLOCKS      # index into versions[b]

    def issue(self, block, data):
        self.versions[block].append(data)
        return (block, len(self.versions[block]) - 1)

    def make_durable(self, block_versions):
        for block, index in block_versions:
            self.durable[block] = max(self.durable[block], index)

    def check(self, image, context):
        bad = []
        for b in range(WINDOW_BLOCKS):
            got = image[b * BLOCK:(b + 1) * BLOCK]
            candidates = self.versions[b][self.durable[b]:]
            if got == candidates[-1] or got == candidates[0]:
                continue
            for s in range(0, BLOCK, SECTOR):
                sector = got[s:s + SECTOR]
                if not any(sector == v[s:s + SECTOR] for v in candidates):
                    bad.append((b, s, len(candidates)))
        assert not bad, (
            f"{context}: {len(bad)} sectors hold data never written there after their last durable "
            f"value (block, sector offset, candidate count): {bad[:8]}")


class Workload:
    """One round's asynchronous write/flush stream on one libnbd handle."""

    def __init__(self, handle, model, rng, window_offset, ack_is_durable=False):
        self.h = handle
        self.ack_is_durable = ack_is_durable
        self.model = model
        self.rng = rng
        self.window_offset = window_offset
        self.inflight = {}       # cookie -> ("w", [(block, index)], fua) | ("f", [(block, index)])
        self.busy = set()        # blocks with a write in flight
        self.acked = []          # (block, index) acknowledged since the last flush was issued
        self.buffers = {}        # cookie -> nbd.Buffer (kept alive until completion)
        self.writes_until_flush = rng.randint(2, 6)
        self.stats = {"writes": 0, "acked_writes": 0, "flushes": 0, "durable_flushes": 0,
                      "fua": 0}

    def reap(self):
        for cookie in list(self.inflight):
            try:
                done = self.h.aio_command_completed(cookie)
            except nbd.Error:
                kind, *_ = self.inflight.pop(cookie)
                self.buffers.pop(cookie, None)
                continue  # failed (the server died): not acknowledged
            if not done:
                continue
            kind, versions, *rest = self.inflight.pop(cookie)
            self.buffers.pop(cookie, None)
            if kind == "w":
                for block, _ in versions:
                    self.busy.discard(block)
                self.acked.extend(versions)
                self.stats["acked_writes"] += 1
                if rest[0] or self.ack_is_durable:
                    self.model.make_durable(versions)
            else:
                self.model.make_durable(versions)
                self.stats["durable_flushes"] += 1

    def issue_write(self):
        # Mostly small (read-modify-write) writes; one in eight spans 64-256 KiB (full stripes).
        count = self.rng.randint(16, 64) if self.rng.randrange(8) == 0 else self.rng.randint(1, 4)
        first = self.rng.randrange(WINDOW_BLOCKS - count + 1)
        blocks = list(range(first, first + count))
        if any(b in self.busy for b in blocks):
            return False
        data = self.rng.randbytes(count * BLOCK)
        versions = [self.model.issue(b, data[i * BLOCK:(i + 1) * BLOCK])
                    for i, b in enumerate(blocks)]
        fua = self.rng.randrange(8) == 0
        buf = nbd.Buffer.from_bytearray(bytearray(data))
        flags = nbd.CMD_FLAG_FUA if fua else 0
        cookie = self.h.aio_pwrite(buf, self.window_offset + first * BLOCK, flags=flags)
        self.buffers[cookie] = buf
        self.inflight[cookie] = ("w", versions, fua)
        self.busy.update(blocks)
        self.stats["writes"] += 1
        self.stats["fua"] += int(fua)
        return True

    def issue_flush(self):
        covered, self.acked = self.acked, []
        cookie = self.h.aio_flush()
        self.inflight[cookie] = ("f", covered)
        self.stats["flushes"] += 1

    def run_until_kill(self, server, requests):
        """Issues ``requests`` requests, then kills the server with requests in flight."""
        issued = 0
        while issued < requests:
            if len(self.inflight) >= DEPTH:
                self.h.poll(-1)
                self.reap()
                continue
            if self.writes_until_flush == 0:
                self.issue_flush()
                self.writes_until_flush = self.rng.randint(2, 6)
            elif not self.issue_write():
                self.h.poll(-1)
                self.reap()
                continue
            else:
                self.writes_until_flush -= 1
            issued += 1
            self.reap()
        time.sleep(self.rng.random() * 0.01)
        server.kill9_now()
        self.drain()

    def drain(self):
        """Collects replies the server sent before it died; the rest are not acknowledged."""
        try:
            while self.inflight:
                if self.h.poll(1000) == 0:
                    break
                self.reap()
        except nbd.Error:
            pass
        self.reap()


def read_window(uri, offset):
    h = nbd.NBD()
    h.connect_uri(uri)
    try:
        return h.pread(WINDOW_BLOCKS * BLOCK, offset)
    finally:
        h.shutdown()


def scrub_clean(server, context):
    server.admin("scrub", "--wait")
    report = server.status()["last_scrub"]
    assert report is not None and report["finished"], f"{context}: no finished scrub: {report}"
    assert report["mismatches"] == 0, f"{context}: scrub found mismatches: {report}"


def start_check_stop(server, context, model=None, window_offset=None):
    """Starts the server and waits for its background work; checks the window at
    ``window_offset`` against ``model`` (when given); scrubs clean; stops the server."""
    server.start()
    server.wait_idle()
    if model is not None:
        model.check(read_window(server.uri, window_offset), context)
    scrub_clean(server, context)
    server.stop()


def one_round(server, model, rng, window_offset, ack_is_durable=False):
    h = nbd.NBD()
    h.connect_uri(server.uri)
    work = Workload(h, model, rng, window_offset, ack_is_durable)
    work.run_until_kill(server, rng.randint(4, 80))
    try:
        h.shutdown()
    except nbd.Error:
        pass
    return work.stats


def kill9_rounds(level, tmp_path, journal_mode=None):
    rng = random.Random(f"{SEED}:crash:{level}:{journal_mode}")
    rounds = ROUNDS_SOAK if SOAK else ROUNDS
    server = AdminServer(tmp_path / "srv", level, journal_mode)
    ack_is_durable = journal_mode == "write-back"
    name = f"raid{level}" + (f" journal {journal_mode}" if journal_mode else "")
    try:
        server.start()
        size = server.size()
        window_offset = rng.randrange((size - WINDOW_BLOCKS * BLOCK) // BLOCK) * BLOCK
        model = Model(bytes(WINDOW_BLOCKS * BLOCK))
        started = time.monotonic()
        for round_index in range(rounds):
            context = f"{name} round {round_index} (RAIDKIT_SEED={SEED})"
            if round_index > 0:
                server.start()
            server.wait_idle()
            image = read_window(server.uri, window_offset)
            model.check(image, context)
            scrub_clean(server, context)
            model = Model(image)
            stats = one_round(server, model, rng, window_offset, ack_is_durable)
            print(f"{context}: {stats}")
        start_check_stop(server, f"{name} after the last kill (RAIDKIT_SEED={SEED})", model,
                         window_offset)
        print(f"{name}: {rounds} kill -9 rounds in {time.monotonic() - started:.1f} s")
    finally:
        server.cleanup()


@pytest.mark.parametrize("level", LEVELS, ids=[f"raid{lv}" for lv in LEVELS])
def test_kill9_keeps_flushed_writes(level, tmp_path):
    """Flushed and FUA writes survive kill -9; the array is consistent after its resync."""
    kill9_rounds(level, tmp_path)


@pytest.mark.parametrize("level", ["5", "6"], ids=["raid5", "raid6"])
def test_kill9_write_back_journal_keeps_acknowledged_writes(level, tmp_path):
    """With a write-back journal every acknowledged write survives kill -9 (replayed at start),
    flushed or not; the array is consistent after replay and resync."""
    kill9_rounds(level, tmp_path, journal_mode="write-back")
