"""bench/plot.py draws the benchmarks' charts from a results file (what bench/fio-compare.py and
bench/choices.py write with --json): a fake two-job result of each kind is plotted into a
temporary directory, and the SVG must exist and name the jobs, servers or arrays and the run.
No benchmark runs here; the bench scripts themselves are not part of the suite."""

import json
import subprocess
import sys
from pathlib import Path

import skips

REPO = Path(__file__).resolve().parents[2]
PLOT = REPO / "bench" / "plot.py"
FORMAT = "raidkit-bench-results/1"


def plot(tmp_path, data, name):
    skips.require_modules("matplotlib:python3-matplotlib")
    results = tmp_path / f"{name}.json"
    results.write_text(json.dumps(data))
    out = tmp_path / "charts"
    done = subprocess.run([sys.executable, str(PLOT), str(results), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout.split()


def test_fio_compare_results_are_plotted_per_job_with_ratios(tmp_path):
    data = {
        "format": FORMAT, "bench": "fio-compare", "date": "2026-01-02 03:04 UTC",
        "commit": "abc1234", "servers": ["raidkit", "nbdkit"],
        "results": [
            {"config": "linear-ram", "job": "seq-write", "unit": "MB/s",
             "figures": {"raidkit": 5000, "nbdkit": 4000}, "cpu_us": {}},
            {"config": "linear-ram", "job": "rand-read", "unit": "IOPS",
             "figures": {"raidkit": 150000, "nbdkit": 200000}, "cpu_us": {}},
        ],
    }
    out, written = plot(tmp_path, data, "fio")
    assert sorted(Path(p).name for p in written) == ["fio.png", "fio.svg"]
    svg = (out / "fio.svg").read_text()
    assert (out / "fio.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # matplotlib keeps each text's string in a comment beside its glyph paths.
    for text in ("seq-write", "rand-read", "raidkit", "nbdkit", "linear-ram", "MB/s", "IOPS",
                 "2026-01-02 03:04 UTC, commit abc1234", "1.25×", "0.75×"):
        assert f"<!-- {text}" in svg, text
    # A re-plot of the same results is the same file (no date or random ids inside).
    plot(tmp_path, data, "fio")
    assert (out / "fio.svg").read_text() == svg


def test_choices_results_are_plotted_per_table(tmp_path):
    data = {
        "format": FORMAT, "bench": "choices", "date": "2026-01-02 03:04 UTC", "commit": "abc1234",
        "jobs": [{"name": "seq-read", "unit": "MB/s"}, {"name": "rand-write", "unit": "IOPS"}],
        "baseline": {"seq-read": 100, "rand-write": 400},
        "tables": [{"key": "levels", "title": "levels", "rows": [
            {"label": "linear x1 (baseline)", "figures": {"seq-read": 100, "rand-write": 400}},
            {"label": "raid5 x4, chunk 64K", "figures": {"seq-read": 250, "rand-write": 410}},
        ]}],
    }
    out, written = plot(tmp_path, data, "choices")
    assert sorted(Path(p).name for p in written) == ["choices-levels.png", "choices-levels.svg"]
    svg = (out / "choices-levels.svg").read_text()
    for text in ("seq-read (MB/s)", "rand-write (IOPS)", "raid5 x4, chunk 64K", "250 MB/s",
                 "410 IOPS", "2.5×"):
        assert f"<!-- {text}" in svg, text


def test_a_file_that_is_not_a_results_file_is_refused(tmp_path):
    skips.require_modules("matplotlib:python3-matplotlib")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"bench": "fio-compare"}))
    done = subprocess.run([sys.executable, str(PLOT), str(bad), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "not a raidkit bench results file" in done.stderr, done.stderr
    assert not (tmp_path / "o").exists()
