"""``raidkit plan`` end to end: a whole sweep in seconds with its JSON and SVG, the refusals of
bad input, and its predictions checked against ``raidkit bench`` on the same ``sim:`` members
in real time (DESIGN "raidkit plan", Validation): the same case, the same seed (so the very
same offsets), the same stack (serve's read cache in front)."""

import json
import os
import time
import xml.etree.ElementTree as ET

import pytest

from conftest import RAIDKIT_BIN, SEED, run

MEMBERS = ["sim:hdd7200:1G"] * 4
LEVELS = ["raid0", "raid10", "raid5"]
# Plan's prediction and bench's measurement agree within this (issue 16).
BOUND = 0.15
# Runs of bench's sequential case, of which the median is compared.
SEQ_RUNS = 3



def plan(tmp_path, *args, check=True):
    out = tmp_path / f"plan-{time.monotonic_ns()}.json"
    proc = run([RAIDKIT_BIN, "plan", *args, "--json", str(out)], check=check, timeout=600)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_a_whole_sweep_runs_in_seconds_and_recommends_a_redundant_array(tmp_path):
    svg = tmp_path / "plan.svg"
    start = time.monotonic()
    proc, p = plan(tmp_path, "--disks", "4xhdd7200", "--workload", "database",
                   "--capacity", "6T", "--plot", str(svg), "--seed", str(SEED))
    took = time.monotonic() - start
    load = os.getloadavg()[0]
    # 225 configurations x 10 s of disk time, twice (healthy, degraded): ~3 s of CPU; the
    # bound allows a loaded machine (two cores, several engineers).
    assert took < 120, f"the sweep took {took:.0f} s (load {load:.1f})"
    assert p["workload"] == "database" and p["goal"] == "iops" and p["seed"] == SEED
    rows = p["rows"]
    assert len(rows) == 225, len(rows)
    r = rows[p["recommended"]]
    assert r["fits"] and r["risk"]["usable_bytes"] >= 6 << 40
    assert r["risk"]["failures_survived"] >= 1
    assert r["risk"]["rebuild_loss_chance"] <= 0.01, r
    for row in rows:
        lat = row["figures"]["latency"]
        assert row["figures"]["iops"] > 0 and 0 < lat["p50_ms"] <= lat["p99_ms"], row
        level = row["config"]["level"]
        assert (row["degraded"] is None) == (level in ("linear", "raid0")), row
        assert row["fits"] == (row["risk"]["usable_bytes"] >= 6 << 40), row
    # RAID 5 of 4 TB desktop disks: ~62 % chance that a rebuild meets an unreadable sector.
    r5 = next(x for x in rows if x["config"]["level"] == "raid5" and x["config"]["members"] == 4)
    assert 0.55 < r5["risk"]["rebuild_loss_chance"] < 0.70, r5["risk"]
    assert "recommended:" in proc.stdout and "measure it: raidkit bench" in proc.stdout
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert "recommended" in svg.read_text()


def test_bad_input_is_refused_with_what_to_give(tmp_path):
    cases = [
        (["--disks", "4hdd7200", "-w", "video"], "COUNTxCLASS"),
        (["--disks", "4xfloppy", "-w", "video"], "unknown disk model"),
        (["--disks", "40xssd", "-w", "video"], "1 to 16 disks"),
        (["--disks", "4xssd", "-w", "nope"], "file-server"),
        (["--disks", "4xssd", "-w", "video", "--qd", "4"], "bench workload"),
        (["--disks", "4xssd", "-w", "rand-read", "--qd", "65"], "queue depth 65"),
        (["--disks", "4xssd", "-w", "video", "--plot", "x.png"], ".svg"),
        (["--disks", "4xssd", "-w", "video", "--level", "raid6", "--members", "3"],
         "no configuration is left"),
        (["--disks", "4xssd", "-w", "video", "--journal-disk", "2xssd"], "one device"),
    ]
    for args, want in cases:
        proc, p = plan(tmp_path, *args, check=False)
        assert proc.returncode != 0 and p is None, args
        assert want in proc.stderr, (args, proc.stderr)


def bench_levels(tmp_path, *args):
    out = tmp_path / f"bench-{time.monotonic_ns()}.json"
    cmd = [RAIDKIT_BIN, "bench", "--members", *MEMBERS]
    for level in LEVELS:
        cmd += ["--level", level]
    cmd += ["--compare", *args, "--seed", str(SEED), "--json", str(out)]
    run(cmd, timeout=600)
    return json.loads(out.read_text())["results"]


def predicted(tmp_path, *args):
    _, p = plan(tmp_path, "--disks", "4xhdd7200:1G", "--level", ",".join(LEVELS),
                "--members", "4", "--chunk", "128K", "--read-ahead", "adaptive",
                "--member-io", "threads", "--seed", str(SEED), *args)
    return {r["config"]["level"]: r["figures"] for r in p["rows"]}


def test_plan_predicts_bench_on_the_same_sim_members(tmp_path):
    """RAID 0, 10 and 5 of 4 x sim:hdd7200:1G, bench's serve defaults (128 KiB chunk, 64 MiB
    read cache, adaptive read-ahead). Random 4 KiB reads at QD1 and QD8 and sequential 1 MiB
    reads at QD1: IOPS within 15 % both ways. The sequential case is bench's median of
    SEQ_RUNS runs: each of its requests is four member reads served from the drives' read-ahead
    in ~0.6 ms, and a loaded machine that wakes the server or the client late (a few ms, a few
    times a second) costs a run more than the drives' read-ahead can make up, now and then; the
    median leaves out such a run, not a model off by 15 % or more. Before the engine started
    disk models' calls from the request's thread (no thread spawned per member call), bench was
    0.58-0.80 x plan on RAID 0 at load 4-11 (DESIGN "raidkit plan", Validation)."""
    load = os.getloadavg()[0]
    measured = bench_levels(tmp_path, "-w", "rand-read", "--qd", "1,8", "--runtime", "3")
    runs = [bench_levels(tmp_path, "-w", "seq-read", "--qd", "1", "--runtime", "2")
            for _ in range(SEQ_RUNS)]
    measured += median_of(runs)
    plans = {}
    for workload, qd in [("rand-read", 1), ("rand-read", 8), ("seq-read", 1)]:
        plans[(workload, qd)] = predicted(tmp_path, "-w", workload, "--qd", str(qd),
                                          "--runtime", "3" if workload == "rand-read" else "2")
    check_within(measured, lambda m: plans[(m["case"]["workload"],
                                            m["case"]["queue_depth"])][m["target"]], 9, load)


def median_of(runs):
    """Per target, the result of the run with the median IOPS (each run: bench's results, one per
    target); prints every run's IOPS."""
    out = []
    for target in LEVELS:
        results = sorted((r for run in runs for r in run if r["target"] == target),
                         key=lambda r: r["figures"]["iops"])
        assert len(results) == len(runs), (target, runs)
        print(f"{target} {results[0]['case']['workload']}: IOPS of the {len(runs)} runs "
              + ", ".join(f"{r['figures']['iops']:.1f}" for r in results))
        out.append(results[len(results) // 2])
    return out


def check_within(measured, predicted_for, count, load):
    """Each bench result's IOPS within BOUND of plan's prediction for it (``predicted_for``:
    result -> plan's figures); prints every ratio with the load average."""
    lines, bad = [], []
    for m in measured:
        case = m["case"]
        want = predicted_for(m)
        got = m["figures"]
        iops = got["iops"] / want["iops"]
        p50 = got["latency"]["p50_ms"] / want["latency"]["p50_ms"]
        lines.append(f"{m['target']:7} {case['workload']:10} qd{case['queue_depth']}: bench "
                     f"{got['iops']:7.1f} IOPS p50 {got['latency']['p50_ms']:6.2f} ms, plan "
                     f"{want['iops']:7.1f} IOPS p50 {want['latency']['p50_ms']:6.2f} ms: "
                     f"IOPS x{iops:.2f}, p50 x{p50:.2f}")
        if not 1 - BOUND <= iops <= 1 + BOUND:
            bad.append(lines[-1])
    report = "\n".join(lines)
    print(f"load average {load:.1f}, seed {SEED}\n{report}")
    assert len(lines) == count, report
    assert not bad, (f"outside {BOUND:.0%} (load average {load:.1f}, seed {SEED}):\n"
                     + "\n".join(bad) + f"\nall:\n{report}")


def test_plan_predicts_bench_random_writes_on_the_same_sim_members(tmp_path):
    """RAID 5 and RAID 10 of 4 x sim:hdd7200:1G:cache=off (the disks' own speed, as
    docs/ANSWERS.md's RAID 5 or 10 question runs them), 4 KiB random writes at QD8 for 5 s:
    IOPS within 15 %. What bench pays beyond the member writes is modelled: the write-intent
    bitmap's first write to each 64 MiB region (a bitmap block written and flushed on every
    member, one region at a time, the region's writers waiting); without it plan was 1.20 x
    (RAID 10) and 1.28 x (RAID 5) bench's IOPS (23:01 UTC, load 10.3). Stripe locks (8 writes
    in flight over 8,192 stripes rarely meet) and group commit (no journal here) are not."""
    load = os.getloadavg()[0]
    members = ["sim:hdd7200:1G:cache=off"] * 4
    out = tmp_path / "bench-writes.json"
    run([RAIDKIT_BIN, "bench", "--members", *members, "--level", "raid5", "--level", "raid10",
         "--compare", "-w", "rand-write", "--sizes", "4K", "--qd", "8", "--runtime", "5",
         "--seed", str(SEED), "--json", str(out)], timeout=600)
    measured = json.loads(out.read_text())["results"]
    _, p = plan(tmp_path, "--disks", "4xhdd7200:1G:cache=off", "--level", "raid5,raid10",
                "--members", "4", "--chunk", "128K", "--read-ahead", "adaptive",
                "--journal-mode", "none", "--member-io", "threads", "--seed", str(SEED),
                "-w", "rand-write", "--qd", "8", "--runtime", "5")
    plans = {r["config"]["level"]: r["figures"] for r in p["rows"]}
    check_within(measured, lambda m: plans[m["target"]], 2, load)
