"""The file raidkit keeps in /proc/mdstat's format, read by the real tool people watch md arrays
with: Debian's prometheus-node-exporter, mdadm collector only (``--collector.disable-defaults
--collector.mdadm --path.procfs=DIR``), scraped over loopback.

- ``test_node_exporter_watches_a_daemon_s_arrays``: a daemon with a RAID 5 and a RAID 1, its
  mdstat file where it goes by default (beside the admin socket); ``status --mdstat`` prints
  the file's text; node_exporter reads both arrays active with their disks and blocks; a member
  failed shows as ``node_md_disks{state="failed"} 1`` within a second or two; a spare added
  rebuilds, throttled, and ``node_md_blocks_synced`` rises between scrapes while the state is
  ``recovering``; then the array is active with all its disks again. At SIGTERM the file is
  left listing no array, and node_exporter then reports none.
- ``test_serve_keeps_the_file_it_is_told``: ``raidkit serve --mdstat PATH`` lists its array
  under its name, node_exporter reads it, and the file lists no array after exit.

Every scrape also asserts ``node_scrape_collector_success{collector="mdadm"} 1``: the
collector parsed the whole file.
"""

import json
import re
import subprocess
import time
import urllib.request

import pytest

from conftest import RAIDKIT_BIN, SERVER_KIND, free_tcp_port, require_tools
from test_daemon import Daemon, create, raidkit

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit", reason="raidkit only")

EXPORTER = "prometheus-node-exporter"
NO_ARRAY = ("Personalities : [linear] [raid0] [raid1] [raid10] [raid5] [raid6] \n"
            "unused devices: <none>\n")
SAMPLE = re.compile(r'^(\w+)(?:\{(.*)\})? (\S+)$')


class Exporter:
    """node_exporter reading ``procfs/mdstat``, on a free loopback port."""

    def __init__(self, procfs, log):
        self.port = free_tcp_port()
        self.log = log
        self.proc = subprocess.Popen(
            [EXPORTER, "--collector.disable-defaults", "--collector.mdadm",
             f"--path.procfs={procfs}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        deadline = time.monotonic() + 20
        while True:
            try:
                self.scrape()
                return
            except OSError:
                assert self.proc.poll() is None, f"{EXPORTER} ended:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"{EXPORTER} not answering:\n{log.read_text()}"
                time.sleep(0.1)

    def scrape(self):
        """Every sample: {(name, ((label, value), ...)): value}; the mdadm collector must have
        succeeded."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            text = r.read().decode()
        samples = {}
        for line in text.splitlines():
            m = SAMPLE.match(line)
            if not m or line.startswith("#"):
                continue
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
            samples[(m.group(1), labels)] = float(m.group(3))
        ok = samples.get(("node_scrape_collector_success", (("collector", "mdadm"),)))
        assert ok == 1.0, f"the mdadm collector failed:\n{text}\n{self.log.read_text()}"
        return samples

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def md(samples, name, device, state=None):
    """The value of ``name{device=..., state=...}`` (None if absent)."""
    labels = [("device", device)] + ([("state", state)] if state else [])
    return samples.get((name, tuple(sorted(labels))))


def scrape_until(exporter, check, what, bound_s=10):
    """Scrapes until ``check(samples)``; returns the samples."""
    deadline = time.monotonic() + bound_s
    while True:
        samples = exporter.scrape()
        if check(samples):
            return samples
        relevant = {k: v for k, v in samples.items() if k[0].startswith("node_md")}
        assert time.monotonic() < deadline, f"not {what} after {bound_s} s: {relevant}"
        time.sleep(0.1)


def wait_for_file(path, check, bound_s=10):
    deadline = time.monotonic() + bound_s
    while True:
        text = path.read_text() if path.exists() else ""
        if check(text):
            return text
        assert time.monotonic() < deadline, f"{path}:\n{text}"
        time.sleep(0.05)


def test_node_exporter_watches_a_daemon_s_arrays(tmp_path):
    require_tools(EXPORTER)
    # No used-regions map: the rebuild below is to copy every byte (long enough to be seen).
    media = create(tmp_path, "5", "media", 4, "--no-used-map")
    create(tmp_path, "1", "home", 2)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    admin = run_dir / "admin.sock"
    mdstat = run_dir / "mdstat"  # the default: beside the admin socket
    config = tmp_path / "raidkit.toml"
    config.write_text(f'[daemon]\nunix = "{tmp_path}/nbd.sock"\nadmin = "{admin}"\n\n'
                      + raidkit("examine", "--scan", f"{tmp_path}/*").stdout)
    daemon = Daemon(config, 2)
    exporter = None
    try:
        text = wait_for_file(mdstat, lambda t: "media : " in t and "home : " in t)
        assert text.startswith("Personalities : [linear] "), text
        assert text.endswith("unused devices: <none>\n"), text
        assert "\nhome : active raid1 " in text and " [2/2] [UU]\n" in text, text
        assert f"\nmedia : active raid5 {media[0]}[0] {media[1]}[1] " in text, text
        assert " 46080 blocks super external:raidkit level 5, 128k chunk, algorithm 2 " \
               "[4/4] [UUUU]\n" in text, text
        assert raidkit("status", "--admin", admin, "--mdstat").stdout == text
        only = raidkit("status", "--admin", admin, "--array", "home", "--mdstat").stdout
        assert "home : " in only and "media" not in only, only

        exporter = Exporter(run_dir, tmp_path / "exporter.log")
        s = exporter.scrape()
        for device, disks, blocks in (("media", 4, 46080), ("home", 2, 15360)):
            assert md(s, "node_md_state", device, "active") == 1, s
            assert md(s, "node_md_state", device, "recovering") == 0, s
            assert md(s, "node_md_disks", device, "active") == disks, s
            assert md(s, "node_md_disks", device, "failed") == 0, s
            assert md(s, "node_md_disks_required", device) == disks, s
            assert md(s, "node_md_blocks", device) == blocks, s
            assert md(s, "node_md_blocks_synced", device) == blocks, s

        raidkit("fail", "--admin", admin, "--array", "media", media[1])
        failed = time.monotonic()
        s = scrape_until(exporter, lambda s: md(s, "node_md_disks", "media", "failed") == 1,
                         "failed")
        assert time.monotonic() - failed < 3, "the failure took too long to show"
        assert md(s, "node_md_disks", "media", "active") == 3, s
        assert md(s, "node_md_disks", "home", "failed") == 0, s

        # A spare added rebuilds, throttled so that several scrapes see it run.
        raidkit("speed-limit", "--admin", admin, "--array", "media", "--min", "1M",
                "--max", "2M")
        spare = tmp_path / "spare"
        with open(spare, "wb") as f:
            f.truncate(16 << 20)
        raidkit("add", "--admin", admin, "--array", "media", spare)
        synced = []
        deadline = time.monotonic() + 120
        while True:
            s = exporter.scrape()
            if md(s, "node_md_state", "media", "recovering") == 1:
                synced.append(md(s, "node_md_blocks_synced", "media"))
            elif synced:
                break
            assert time.monotonic() < deadline, f"rebuild not over: {synced}"
            time.sleep(0.7)
        rising = [b for a, b in zip(synced, synced[1:]) if b > a]
        assert len(rising) >= 2, f"node_md_blocks_synced did not rise: {synced}"
        # The member's KiB rebuilt: never past its data area (16 MiB less the metadata).
        assert 0 <= min(synced) and max(synced) < 16384, synced
        s = scrape_until(exporter, lambda s: md(s, "node_md_disks", "media", "active") == 4,
                         "healthy again")
        assert md(s, "node_md_state", "media", "active") == 1, s
        assert md(s, "node_md_disks", "media", "failed") == 0, s
        assert md(s, "node_md_blocks_synced", "media") == 46080, s
        assert f"{spare}[1]" in mdstat.read_text()

        log = daemon.stop()
        assert 'array "media" closed cleanly' in log, log
        # Stopped: the file stays and lists no array, and node_exporter says so.
        assert mdstat.read_text() == NO_ARRAY
        s = exporter.scrape()
        assert not [k for k in s if k[0].startswith("node_md")], s
    finally:
        daemon.kill()
        if exporter is not None:
            exporter.stop()


def test_serve_keeps_the_file_it_is_told(tmp_path):
    require_tools(EXPORTER)
    procfs = tmp_path / "proc"
    procfs.mkdir()
    mdstat = procfs / "mdstat"
    members = [tmp_path / f"m{i}" for i in range(2)]
    admin = tmp_path / "admin.sock"
    log = tmp_path / "serve.log"
    serve = subprocess.Popen(
        [RAIDKIT_BIN, "serve", "--unix", str(tmp_path / "nbd.sock"), "--admin", str(admin),
         "--mdstat", str(mdstat), "--create", "--level", "1", "--size", "8M",
         "--name", "scratch disk", *map(str, members)],
        stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    exporter = None
    try:
        assert "raidkit: serving" in serve.stdout.readline(), log.read_text()
        # A space cannot be in one field: the parsers read "scratch_disk".
        text = wait_for_file(mdstat, lambda t: "scratch_disk : " in t)
        assert f"scratch_disk : active raid1 {members[0]}[0] {members[1]}[1]\n" in text, text
        assert raidkit("status", "--admin", admin, "--mdstat").stdout == text
        size = json.loads(raidkit("status", "--admin", admin, "--json").stdout)["size_bytes"]
        exporter = Exporter(procfs, tmp_path / "exporter.log")
        s = exporter.scrape()
        assert md(s, "node_md_state", "scratch_disk", "active") == 1, s
        assert md(s, "node_md_disks", "scratch_disk", "active") == 2, s
        assert md(s, "node_md_blocks", "scratch_disk") == size // 1024, s

        serve.terminate()
        assert serve.wait(timeout=60) == 0, log.read_text()
        assert mdstat.read_text() == NO_ARRAY
        s = exporter.scrape()
        assert not [k for k in s if k[0].startswith("node_md")], s
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        if exporter is not None:
            exporter.stop()
