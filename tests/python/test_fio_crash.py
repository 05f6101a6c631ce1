"""fio with ``verify=crc32c`` and a flush every few writes against ``raidkit serve``, ``kill -9``
while writes are in flight, restart, verify: ``ROUNDS`` rounds per redundant level.

Each round (on the same member files):

1. start ``raidkit serve --admin`` (created in round 0) and wait for the resync the last kill
   left to finish;
2. a background fio job writes random blocks (4 KiB - 256 KiB, queue depth 16) to the second
   half of the export without pause: the writes in flight when the server dies;
3. meanwhile the verified fio job writes a random amount (2 - 12 MiB) of random blocks of
   4 KiB - 256 KiB at queue depth 16 to the first half, ``fsync=N`` (an NBD flush every N
   writes, N random from 2 to 8), ``verify=crc32c``, and finishes;
4. after a random 0 - 0.3 s more, the server gets SIGKILL with the background writes in flight;
5. restart, then fio ``verify_only`` of the verified job: every one of its writes must read
   back. ``kill -9`` ends the process, not the machine, so what reached the members' page
   cache stays: every acknowledged write must survive, flushed or not (what only a completed
   flush guarantees across power loss is test_crash.py's libnbd model and the simtest
   power-cut suite). A negative control (part of the region zeroed) shows the verify pass
   fails on missing data;
6. after the last round: ``raidkit scrub --wait`` finds no parity or mirror mismatch.

Why the verified job finishes before the kill: fio's own crash workflow (``verify_state_save``
and ``verify_state_load``, with or without ``--trigger``) also verifies writes that were in
flight at the crash and failed with the lost connection — against ``nbdkit file`` with a
100 ms write delay it reports 15 bad blocks after a kill -9 — so it cannot tell lost
acknowledged writes from never-acknowledged ones. The libnbd rounds of test_crash.py kill
with the verified writes themselves in flight, knowing exactly which were acknowledged.

The same with a write-back journal on RAID 5 and 6 (acknowledged writes are replayed from it).
Seeded by ``RAIDKIT_SEED``; ``RAIDKIT_SOAK=1`` runs ``ROUNDS_SOAK`` rounds.
"""

import random
import subprocess
import time

import pytest

from conftest import SEED, SOAK, require_tools, run
from test_crash import AdminServer, start_check_stop

MIB = 1024 * 1024
REGION_BYTES_MAX = 24 * MIB
ROUNDS = 20
ROUNDS_JOURNAL = 10
ROUNDS_SOAK = 60
LEVELS = ["1", "5", "6", "10"]
BSSPLIT = "--bssplit=4k/50:16k/20:64k/20:256k/10"


def verified_job(uri, region, seed, fsync_every, io_bytes, *extra):
    """The verified writer of one round (the same arguments write and verify)."""
    return ["fio", "--name=verified", "--ioengine=nbd", f"--uri={uri}", "--rw=randwrite",
            BSSPLIT, "--iodepth=16", f"--size={region}", f"--io_size={io_bytes}",
            f"--randseed={seed}", f"--fsync={fsync_every}", "--verify=crc32c",
            "--verify_state_save=0", *extra]


def background_job(uri, region, seed):
    """Writes to the second half until the server dies."""
    return ["fio", "--name=background", "--ioengine=nbd", f"--uri={uri}", "--rw=randwrite",
            BSSPLIT, "--iodepth=16", f"--offset={region}", f"--size={region}",
            f"--randseed={seed}", "--time_based", "--runtime=120"]


def fio_kill9_rounds(level, tmp_path, journal_mode=None):
    require_tools("fio", "qemu-io")
    rng = random.Random(f"{SEED}:fio-crash:{level}:{journal_mode}")
    rounds = ROUNDS_SOAK if SOAK else (ROUNDS_JOURNAL if journal_mode else ROUNDS)
    server = AdminServer(tmp_path / "srv", level, journal_mode)
    name = f"raid{level}" + (f" journal {journal_mode}" if journal_mode else "")
    started = time.monotonic()
    try:
        for round_index in range(rounds):
            context = f"{name} round {round_index} (RAIDKIT_SEED={SEED})"
            cwd = tmp_path / f"round{round_index}"
            cwd.mkdir()
            server.start()
            server.wait_idle()
            # Half the export (at most REGION_BYTES_MAX, whole MiB) each.
            region = min(REGION_BYTES_MAX, server.size() // 2 // MIB * MIB)
            seed, fsync_every = rng.randrange(2**31), rng.randint(2, 8)
            io_bytes = rng.randint(2, min(12, region // MIB)) * MIB
            background = subprocess.Popen(
                background_job(server.uri, region, rng.randrange(2**31)), cwd=cwd,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(rng.uniform(0, 0.3))
            job = verified_job(server.uri, region, seed, fsync_every, io_bytes, "--do_verify=0")
            written = run(job, timeout=300, check=False, cwd=cwd)
            assert written.returncode == 0 and "err= 0" in written.stdout, (
                f"{context}: the verified writer failed:\n{written.stdout[-3000:]}")
            time.sleep(rng.uniform(0, 0.3))
            assert background.poll() is None, (
                f"{context}: the background writer ended before the kill:\n"
                f"{background.stdout.read()[-3000:]}")
            server.kill9_now()
            background.communicate(timeout=120)
            server.start()
            check = verified_job(server.uri, region, seed, fsync_every, io_bytes, "--verify_only")
            verify = run(check, timeout=300, check=False, cwd=cwd)
            out = verify.stdout + verify.stderr
            assert verify.returncode == 0 and "err= 0" in out and "verify:" not in out, (
                f"{context}: acknowledged writes lost across kill -9:\n{out[-3000:]}")
            if round_index == 0:
                # Negative control: zero part of the region; the same verify must fail.
                run(["qemu-io", "-f", "raw", "-c", f"write -z 0 {region // 2}", server.uri])
                proc = run(check, timeout=300, check=False, cwd=cwd)
                assert proc.returncode != 0 and "verify:" in proc.stdout + proc.stderr, (
                    f"{context}: the verify pass did not notice zeroed data")
            server.wait_idle()
            server.stop()
        start_check_stop(server, f"{name} after {rounds} kill -9 rounds (RAIDKIT_SEED={SEED})")
        print(f"{name}: {rounds} fio kill -9 rounds in {time.monotonic() - started:.1f} s")
    finally:
        server.cleanup()


@pytest.mark.parametrize("level", LEVELS, ids=[f"raid{lv}" for lv in LEVELS])
def test_fio_verify_after_kill9_rounds(level, tmp_path):
    """Every write the verified fio job completed reads back after a kill -9 that interrupted
    other writes; scrub is clean at the end."""
    fio_kill9_rounds(level, tmp_path)


@pytest.mark.parametrize("level", ["5", "6"], ids=["raid5", "raid6"])
def test_fio_verify_after_kill9_rounds_write_back_journal(level, tmp_path):
    """With a write-back journal (acknowledged writes replayed from it at start)."""
    fio_kill9_rounds(level, tmp_path, journal_mode="write-back")
