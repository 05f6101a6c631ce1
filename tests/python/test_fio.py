"""fio's nbd engine: random writes of mixed sizes (4 KiB - 1 MiB) at queue depth 16 with
``verify=crc32c``, verified in the same run and again after the server restarts.

- ``test_fio_verify_after_sigterm``: write + verify, SIGTERM (exit 0), restart from the same member
  files, ``verify_only`` pass.
- ``test_fio_verify_after_kill9``: write + verify ending with a flush (``end_fsync``), then a second
  fio job writes to the other half of the export without flushing and the server is killed with
  SIGKILL in the middle of it; after restart the flushed half must verify.

Run for every level; the transport alternates between levels (both transports are covered by the
cheaper tests for every level), which keeps the suite's run time in check.
"""

import subprocess
import time

import pytest

from conftest import LEVELS, SOAK, SEED, run

MIB = 1024 * 1024
SUBSET = [(level, "unix" if i % 2 == 0 else "tcp") for i, level in enumerate(LEVELS)]
IDS = [f"raid{lv}-{tr}" for lv, tr in SUBSET]


def fio_args(uri, name, offset, size, seed):
    return [
        "fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}",
        "--rw=randwrite", "--bssplit=4k/40:16k/20:64k/20:256k/10:1m/10", "--iodepth=16",
        f"--offset={offset}", f"--size={size}", f"--randseed={seed}",
        "--verify=crc32c", "--verify_state_save=0", "--end_fsync=1",
    ]


def fio(uri, name, offset, size, seed, *extra, cwd):
    proc = run(fio_args(uri, name, offset, size, seed) + list(extra), timeout=300, cwd=cwd)
    assert "err= 0" in proc.stdout, proc.stdout[-3000:]
    assert "verify:" not in proc.stdout + proc.stderr, proc.stdout[-3000:]
    return proc


def region_bytes(export_bytes):
    """Half of the export, at most 48 MiB (192 MiB with RAIDKIT_SOAK), a multiple of 1 MiB."""
    cap = (192 if SOAK else 48) * MIB
    half = (export_bytes // 2) // MIB * MIB
    assert half >= 8 * MIB, f"export too small: {export_bytes}"
    return min(cap, half)


def serve_written(make_server, level, transport, cwd):
    """A server whose first region fio has written and verified: (server, region bytes)."""
    srv = make_server(level, transport)
    size = region_bytes(srv.size())
    fio(srv.uri, "w", 0, size, SEED, "--do_verify=1", cwd=cwd)
    return srv, size


@pytest.mark.slow
@pytest.mark.parametrize("level,transport", SUBSET, ids=IDS)
def test_fio_verify_after_sigterm(make_server, tmp_path, level, transport):
    srv, size = serve_written(make_server, level, transport, tmp_path)
    srv.restart()
    fio(srv.uri, "w", 0, size, SEED, "--verify_only", cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("level,transport", SUBSET, ids=IDS)
def test_fio_verify_after_kill9(make_server, tmp_path, level, transport):
    srv, size = serve_written(make_server, level, transport, tmp_path)

    # Unflushed writes to the other half, interrupted by SIGKILL of the server.
    busy = subprocess.Popen(
        fio_args(srv.uri, "busy", size, size, SEED + 1) + ["--do_verify=0", "--time_based",
                                                           "--runtime=30"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        assert busy.poll() is None, "the unflushed writer ended before the kill"
        srv.kill9()
        busy.wait(timeout=60)
    finally:
        if busy.poll() is None:
            busy.kill()
            busy.wait()

    srv.start()
    fio(srv.uri, "w", 0, size, SEED, "--verify_only", cwd=tmp_path)
