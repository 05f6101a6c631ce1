"""``raidkit bench`` end to end: its built-in workloads over raidkit's own NBD client against
nbdkit's memory plugin and against arrays it builds and serves itself (``--members --level``),
with the JSON report parsed and its figures checked for sense and consistency, the disk model's
QD1 rate, a ``--compare`` run's ratios, the plot files, and the refusals that keep writes off a
target the user did not mean to overwrite."""

import json
import os
import socket
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

from conftest import RAIDKIT_BIN, SEED, require_tools, run

# diskmodel's virtual-time figure for hdd7200 4 KiB random reads at QD1 (DESIGN "Disk
# models"); the bound is test_sim_members.py's, for the same stack (real-time sleeps, NBD and
# RAID work on a loaded machine below, a missing sleep above).
PREDICTED_HDD7200_QD1_IOPS = 80.9


@pytest.fixture
def nbdkit_memory(tmp_path):
    """nbdkit's memory plugin (64 MiB) on a Unix socket; yields its URI."""
    require_tools("nbdkit")
    sock = tmp_path / "nbdkit.sock"
    proc = subprocess.Popen(["nbdkit", "--foreground", "-U", str(sock), "memory", "64M"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            pytest.fail(f"nbdkit exited {proc.returncode}: {proc.stderr.read()}")
        if sock.exists():
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(sock))
                break
            except OSError:
                pass
        assert time.monotonic() < deadline, "nbdkit did not listen within 30 s"
        time.sleep(0.05)
    yield f"nbd+unix:///?socket={sock}"
    proc.terminate()
    proc.wait(timeout=30)


def bench(tmp_path, *args, check=True, timeout=300):
    """Runs ``raidkit bench ARGS --json FILE``; returns (process, report or None)."""
    out = tmp_path / f"report-{time.monotonic_ns()}.json"
    proc = run([RAIDKIT_BIN, "bench", *args, "--seed", str(SEED), "--json", str(out)],
               check=check, timeout=timeout)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc, report


def check_sane(result):
    """The figures agree with the counts behind them."""
    f, c, case = result["figures"], result["counts"], result["case"]
    ops = c["reads"] + c["writes"]
    assert ops > 0, result
    assert c["bytes"] == ops * case["size"], result
    assert f["iops"] == pytest.approx(ops / c["elapsed_s"], rel=1e-6), result
    assert f["mb_s"] == pytest.approx(c["bytes"] / c["elapsed_s"] / 1e6, rel=1e-6), result
    lat = f["latency"]
    assert 0 < lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"] <= lat["p999_ms"] <= lat["max_ms"]
    # Each slot does one operation at a time: a slot's rate is at most 1 / its mean latency.
    slots = case["queue_depth"] * case["clients"]
    assert f["iops"] <= slots * 1000 / lat["mean_ms"] * 1.05, result


def test_writes_to_a_uri_need_allow_writes(tmp_path, nbdkit_memory):
    proc, report = bench(tmp_path, nbdkit_memory, "-w", "rand-write", "--runtime", "1",
                         check=False)
    assert proc.returncode != 0 and report is None
    assert "--allow-writes" in proc.stderr and "overwrites the export's data" in proc.stderr, \
        proc.stderr
    # Building an array over files overwrites them too.
    member = tmp_path / "m.img"
    member.write_bytes(b"precious" * 512)
    proc, report = bench(tmp_path, "--members", str(member), "--level", "1", "--runtime", "1",
                         check=False)
    assert proc.returncode != 0 and "--allow-writes" in proc.stderr, proc.stderr
    assert member.read_bytes() == b"precious" * 512


def test_bench_against_nbdkit_memory_gives_consistent_figures(tmp_path, nbdkit_memory):
    proc, report = bench(tmp_path, nbdkit_memory, "--allow-writes",
                         "-w", "rand-rw,seq-write,database", "--sizes", "4K,64K",
                         "--qd", "1,4", "--clients", "2", "--runtime", "0.5")
    assert report["format"] == 1 and report["source"] == "bench" and report["seed"] == SEED
    assert report["targets"][0]["bytes"] == 64 << 20
    results = report["results"]
    assert len(results) == 3 * 2 * 2
    for r in results:
        check_sane(r)
        c = r["counts"]
        if r["case"]["workload"] == "seq-write":
            assert c["reads"] == 0 and c["flushes"] == 0
        if r["case"]["workload"] == "rand-rw":
            # 70 % reads, of at least a few hundred operations.
            assert 0.55 < c["reads"] / (c["reads"] + c["writes"]) < 0.85, r
        if r["case"]["workload"] == "database":
            assert c["flushes"] == c["writes"] > 0, r
        assert r["ratio"] is None
    # The table names every case.
    assert proc.stdout.count("rand-rw") == 4 and "p99.9 ms" in proc.stdout


def test_an_operation_count_and_working_set_are_kept(tmp_path, nbdkit_memory):
    _, report = bench(tmp_path, nbdkit_memory, "-w", "rand-read", "--ops", "300",
                      "--working-set", "1M", "--qd", "3", "--runtime", "60")
    (r,) = report["results"]
    assert r["counts"]["reads"] == 300 and r["case"]["working_set"] == 1 << 20
    proc, _ = bench(tmp_path, nbdkit_memory, "--working-set", "1G", "--runtime", "1",
                    check=False)
    assert proc.returncode != 0 and "larger than the target" in proc.stderr, proc.stderr


def test_hdd7200_raid5_qd1_random_reads_run_at_the_modelled_rate(tmp_path):
    members = ["sim:hdd7200:1G"] * 4
    proc, report = bench(tmp_path, "--members", *members, "--level", "5",
                         "-w", "rand-read", "--sizes", "4K", "--qd", "1", "--runtime", "10")
    (r,) = report["results"]
    check_sane(r)
    iops = r["figures"]["iops"]
    print(f"RAID 5 of 4 x sim:hdd7200:1G, bench QD1 4 KiB: {iops:.1f} IOPS, "
          f"p50 {r['figures']['latency']['p50_ms']:.2f} ms, load {os.getloadavg()[0]:.1f}")
    assert 0.65 * PREDICTED_HDD7200_QD1_IOPS <= iops <= 1.15 * PREDICTED_HDD7200_QD1_IOPS, \
        f"{iops:.1f} IOPS, model {PREDICTED_HDD7200_QD1_IOPS} (seed {SEED})"
    # A disk's random read waits for a seek and half a turn: never below a few ms.
    assert r["figures"]["latency"]["p50_ms"] > 3, r
    assert report["targets"][0]["name"] == "raid5"


def test_random_writes_on_members_with_their_write_cache_on_finish_and_the_arrays_stop(tmp_path):
    """RAID 5 and RAID 10 of 4 x sim:hdd7200:1G with the drives' write cache on (the default):
    4 KiB random writes at QD8. bench stops each array it built at the end and fails if one
    does not stop within 60 s; a drive model's cache, full of random writes, used to destage
    them oldest first, a seek each (~100 s for 64 MiB), and bench failed 'served array did not
    stop in 60 s'. Caches now destage in elevator order (diskmodel test
    a_full_write_cache_drains_in_elevator_order): the run ends a few seconds after its
    cases."""
    members = ["sim:hdd7200:1G"] * 4
    runtime = 5
    start = time.monotonic()
    proc, report = bench(tmp_path, "--members", *members, "--level", "5", "--level", "10",
                         "--compare", "-w", "rand-write", "--sizes", "4K", "--qd", "8",
                         "--runtime", str(runtime))
    took = time.monotonic() - start
    load = os.getloadavg()[0]
    lines = []
    for r in report["results"]:
        check_sane(r)
        lines.append(f"{r['target']}: {r['figures']['iops']:.1f} IOPS, "
                     f"p99 {r['figures']['latency']['p99_ms']:.1f} ms")
    print(f"{took:.1f} s for 2 x {runtime} s of cases, load {load:.1f}: " + "; ".join(lines))
    assert sorted(r["target"] for r in report["results"]) == ["raid10", "raid5"], report
    # Two cases, two array starts and two stops (each stop flushes the drives' caches).
    assert took < 2 * runtime + 45, f"bench took {took:.0f} s (load {load:.1f})"


def test_compare_interleaves_targets_and_gives_ratios_and_plots(tmp_path, nbdkit_memory):
    svg = tmp_path / "bench.svg"
    png = tmp_path / "bench.png"
    proc, report = bench(tmp_path, nbdkit_memory, "--members", "sim:ssd:256M", "sim:ssd:256M",
                         "--level", "1", "--serve-arg=--cache-size=0",
                         "--compare", "--rounds", "2", "-w", "rand-read",
                         "--qd", "1,4", "--working-set", "32M", "--runtime", "0.5",
                         "--plot", str(svg))
    names = [t["name"] for t in report["targets"]]
    assert names[1] == "raid1" and names[0].startswith("nbd+unix://") and report["rounds"] == 2
    by = {(r["target"], r["case"]["queue_depth"]): r for r in report["results"]}
    assert len(by) == 4
    for qd in (1, 4):
        first, second = by[(names[0], qd)], by[(names[1], qd)]
        check_sane(first)
        check_sane(second)
        assert first["ratio"]["iops"] == pytest.approx(1.0)
        assert second["ratio"]["iops"] == pytest.approx(
            second["figures"]["iops"] / first["figures"]["iops"], rel=1e-9)
        # Two rounds of 0.5 s each, added up.
        assert second["counts"]["elapsed_s"] >= 1.0
    # Without the read cache (a 32 MiB working set would sit in serve's 64 MiB one) sim:ssd
    # reads take the model's 0.1 ms at least; nbdkit's RAM does not, so it is faster at QD1.
    assert by[(names[1], 1)]["figures"]["latency"]["p50_ms"] >= 0.1
    assert by[(names[1], 1)]["ratio"]["iops"] < 1.0
    assert "IOPS ratio" in proc.stdout
    # Each target's result names its own working set (the one given here).
    assert {r["case"]["working_set"] for r in report["results"]} == {32 << 20}
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    text = svg.read_text()
    assert "queue depth" in text and "raid1" in text
    # A PNG, of targets of different sizes without --working-set: each runs over its whole size.
    _, report = bench(tmp_path, nbdkit_memory, "--members", "mem:32M", "mem:32M", "--level", "0",
                      "--compare", "--ops", "200", "--qd", "1,2", "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sizes = {t["name"]: t["bytes"] for t in report["targets"]}
    assert sizes["raid0"] != 64 << 20
    for r in report["results"]:
        assert r["case"]["working_set"] == sizes[r["target"]], r
        assert r["ratio"] is not None


def test_file_tests_need_allow_writes_on_a_uri(tmp_path, nbdkit_memory):
    proc, report = bench(tmp_path, nbdkit_memory, "--files", check=False)
    assert proc.returncode != 0 and report is None
    assert "--allow-writes" in proc.stderr and "ext4" in proc.stderr, proc.stderr


def test_file_tests_on_a_built_array_write_read_and_delete(tmp_path):
    from test_filesystem import require_fuse_and_loop
    require_fuse_and_loop()
    proc, report = bench(tmp_path, "--members", "mem:256M", "mem:256M", "--level", "1",
                         "--serve-arg=--cache-size=0", "--files", "--large-file", "32M",
                         "--small-files", "300", "--small-size", "8K")
    phases = {f["phase"]: f for f in report["files"]}
    assert list(phases) == ["large-write", "large-read", "small-create", "small-read",
                            "small-delete"], report["files"]
    assert report["results"] == []
    for f in phases.values():
        assert f["target"] == "raid1" and f["elapsed_s"] > 0
        assert f["mb_s"] == pytest.approx(f["bytes"] / f["elapsed_s"] / 1e6, rel=1e-6)
        assert f["files_per_s"] == pytest.approx(f["files"] / f["elapsed_s"], rel=1e-6)
    assert phases["large-write"]["bytes"] == phases["large-read"]["bytes"] == 32 << 20
    assert phases["small-create"]["files"] == phases["small-read"]["files"] == 300
    assert phases["small-read"]["bytes"] == 300 * 8192
    assert "small-delete" in proc.stdout
    # Nothing of the run is left mounted.
    mounts = open("/proc/mounts").read()
    assert "raidkit-bench" not in mounts, mounts
