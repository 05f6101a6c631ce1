"""Shared pieces of the fio benchmarks in bench/: servers as processes (ready detection, CPU time,
peak memory, SIGTERM stop), fio runs over the nbd engine, sizes and medians, and a run's results
file and charts (--json, --plot: bench/plot.py)."""

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import plot

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
RESULTS_FORMAT = plot.FORMAT


def parse_size(text):
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = text[-1] if text[-1] in units else ""
    return int(text[: len(text) - len(unit)]) * units[unit]


class Proc:
    """A server process; ready when its socket accepts (and, for raidkit, it printed its line)."""

    def __init__(self, cmd, sock, ready_line=None, env=None):
        """`env`: variables added to this environment for the server."""
        self.cmd = cmd
        self.sock = sock
        if os.path.exists(sock):
            os.unlink(sock)
        self.lines = []
        self.ready = threading.Event()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True,
                                     env={**os.environ, **env} if env else None)
        threading.Thread(target=self._pump, args=(ready_line,), daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited {self.proc.returncode}: {''.join(self.lines)}")
            if (ready_line is None or self.ready.is_set()) and os.path.exists(sock):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{' '.join(cmd)} not ready after 60 s")

    def _pump(self, ready_line):
        for line in self.proc.stdout:
            self.lines.append(line)
            if ready_line is None or ready_line in line:
                self.ready.set()

    def peak_rss_bytes(self):
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def cpu_seconds(self):
        """utime + stime of the whole process (all threads, exited ones too)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        # Fields 14 and 15 of stat(5); fields[0] is field 3 (state).
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def fio(uri, args, runtime, size, extra, prefix=()):
    """One fio job on `uri`; `prefix` runs fio under another command (`nice`, `taskset`)."""
    cmd = [*prefix, "fio", "--name=bench", "--ioengine=nbd", f"--uri={uri}", f"--size={size}",
           "--output-format=json", *args, *extra]
    if runtime:
        cmd += ["--time_based", f"--runtime={runtime}", "--ramp_time=1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=runtime * 3 + 600)
    if out.returncode != 0:
        raise RuntimeError(f"fio failed: {' '.join(cmd)}\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    text = out.stdout[out.stdout.index("{"):]
    return json.loads(text)["jobs"][0]


def run_job(uri, job, runtime, size, server=None):
    """Runs one fio job; returns (figure, server CPU microseconds per request or None).
    `direction` is "read", "write" or "both" (a mixed job: the two sides added)."""
    name, args, direction, unit = job
    cpu_before = server.cpu_seconds() if server else None
    result = fio(uri, args, runtime, size, [])
    cpu_after = server.cpu_seconds() if server else None
    if direction == "both":
        side = {key: result["read"][key] + result["write"][key]
                for key in ("bw_bytes", "iops", "total_ios")}
    else:
        side = result[direction]
    figure = side["bw_bytes"] / 1e6 if unit == "MB/s" else side["iops"]
    cpu_us = None
    if cpu_before is not None and cpu_after is not None and side["total_ios"] > 0:
        requests = side["total_ios"] * ((runtime + 1) / runtime if runtime else 1)
        cpu_us = (cpu_after - cpu_before) * 1e6 / requests
    return figure, cpu_us


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def run_identity():
    """(date, commit) naming a run in its results file and charts: UTC start time and the
    repository's short commit (+ '-dirty' with uncommitted changes; 'unknown' outside git)."""
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True).stdout
        commit += "-dirty" if dirty.strip() else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return date, commit


def save_results(data, json_path, plot_dir, default_stem):
    """Writes the results file (--json) and the charts (--plot DIR); with --plot alone the
    results file goes into DIR too, so the charts can be re-plotted (bench/plot.py)."""
    stem = Path(json_path).stem if json_path else default_stem
    if plot_dir and not json_path:
        json_path = Path(plot_dir) / f"{stem}.json"
    if json_path:
        plot.write_results(data, json_path)
        print(f"results: {json_path}", file=sys.stderr)
    if plot_dir:
        for path in plot.plot(data, plot_dir, stem):
            print(f"chart: {path}", file=sys.stderr)


def check_plotting(plot_dir):
    """Fails before a long run, not after it, if --plot cannot draw (matplotlib missing)."""
    if plot_dir:
        plot.pyplot()
