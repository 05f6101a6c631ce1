"""fio with ``verify=crc32c`` and a flush every few writes against ``raidkit serve``, ``kill -9`` at
a random moment, restart, verify: ``ROUNDS`` rounds per redundant level.

Each round (on the same member files):

1. start ``raidkit serve --admin`` (created in round 0) and wait for the resync the last kill
   left to finish;
2. fio's nbd engine writes random blocks of 4 KiB - 256 KiB at queue depth 16 over a region of
   the export, ``fsync=N`` (an NBD flush every N writes, N random from 2 to 8),
   ``verify=crc32c``, ``verify_state_save=1`` (fio records which writes completed);
3. after a random 0.3 - 1.2 s the server gets SIGKILL (fio then fails on the lost connection and
   saves its verify state);
4. restart, then fio ``verify_only`` with ``verify_state_load=1`` checks every write fio saw
   complete. ``kill -9`` ends the process, not the machine: what reached the members' page
   cache stays, so every acknowledged write must read back whether or not a flush covered it
   (what only a completed flush guarantees across power loss is test_crash.py's libnbd model
   and the simtest power-cut suite); a negative control with part of the region zeroed shows
   that the verify pass does fail on missing data.
5. after the last round: ``raidkit scrub --wait`` finds no parity or mirror mismatch.

The same with a write-back journal on RAID 5 and 6 (acknowledged writes are replayed from it).
Seeded by ``RAIDKIT_SEED``; ``RAIDKIT_SOAK=1`` runs ``ROUNDS_SOAK`` rounds.
"""

import random
import subprocess
import time

import pytest

from conftest import SEED, SOAK, require_tools, run
from test_crash import AdminServer, scrub_clean

MIB = 1024 * 1024
REGION_BYTES = 24 * MIB
ROUNDS = 20
ROUNDS_JOURNAL = 10
ROUNDS_SOAK = 60
LEVELS = ["1", "5", "6", "10"]


def fio_cmd(uri, region, seed, fsync_every, *extra):
    return ["fio", "--name=crash", "--ioengine=nbd", f"--uri={uri}", "--rw=randwrite",
            "--bssplit=4k/50:16k/20:64k/20:256k/10", "--iodepth=16", f"--size={region}",
            f"--randseed={seed}", f"--fsync={fsync_every}", "--verify=crc32c", *extra]


def write_until_killed(server, region, rng, seed, fsync_every, cwd):
    """Starts the fio writer, kills the server under it; returns fio's output."""
    cmd = fio_cmd(server.uri, region, seed, fsync_every, "--verify_state_save=1", "--do_verify=0",
                  "--time_based", "--runtime=60")
    writer = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    time.sleep(rng.uniform(0.3, 1.2))
    assert writer.poll() is None, f"fio ended before the kill:\n{writer.stdout.read()[-3000:]}"
    server.kill9_now()
    out = writer.communicate(timeout=120)[0]
    assert writer.returncode != 0, f"fio did not notice the kill:\n{out[-3000:]}"
    assert "verify:" not in out, out[-3000:]
    return out


def verify(server, region, seed, fsync_every, cwd, context):
    cmd = fio_cmd(server.uri, region, seed, fsync_every, "--verify_state_load=1", "--verify_only")
    proc = run(cmd, timeout=300, check=False, cwd=cwd)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "err= 0" in out and "verify:" not in out, (
        f"{context}: fio verify after kill -9 failed:\n{out[-3000:]}")


def fio_kill9_rounds(level, tmp_path, journal_mode=None):
    require_tools("fio")
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
            # Half the export, at most REGION_BYTES, whole MiB.
            region = min(REGION_BYTES, server.size() // 2 // MIB * MIB)
            seed = rng.randrange(2**31)
            fsync_every = rng.randint(2, 8)
            write_until_killed(server, region, rng, seed, fsync_every, cwd)
            assert any(cwd.glob("*verify.state")), f"{context}: fio saved no verify state"
            server.start()
            verify(server, region, seed, fsync_every, cwd, context)
            if round_index == 0:
                # Negative control: zero part of the region; the same verify must fail.
                run(["qemu-io", "-f", "raw", "-c", f"write -z 0 {4 * MIB}", server.uri])
                proc = run(fio_cmd(server.uri, region, seed, fsync_every,
                                   "--verify_state_load=1", "--verify_only"),
                           timeout=300, check=False, cwd=cwd)
                assert proc.returncode != 0 and "verify:" in proc.stdout + proc.stderr, (
                    f"{context}: the verify pass did not notice zeroed data")
            server.wait_idle()
            server.stop()
        server.start()
        server.wait_idle()
        scrub_clean(server, f"{name} after {rounds} kill -9 rounds (RAIDKIT_SEED={SEED})")
        server.stop()
        print(f"{name}: {rounds} fio kill -9 rounds in {time.monotonic() - started:.1f} s")
    finally:
        server.cleanup()


@pytest.mark.parametrize("level", LEVELS, ids=[f"raid{lv}" for lv in LEVELS])
def test_fio_verify_after_kill9_rounds(level, tmp_path):
    """Every write fio saw complete reads back after kill -9; scrub is clean at the end."""
    require_tools("qemu-io")
    fio_kill9_rounds(level, tmp_path)


@pytest.mark.parametrize("level", ["5", "6"], ids=["raid5", "raid6"])
def test_fio_verify_after_kill9_rounds_write_back_journal(level, tmp_path):
    """With a write-back journal (acknowledged writes replayed from it at start)."""
    require_tools("qemu-io")
    fio_kill9_rounds(level, tmp_path, journal_mode="write-back")
