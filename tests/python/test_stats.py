"""I/O counters end to end (issue 13): ``raidkit iostat`` and the Prometheus metrics of a running
``raidkit serve``, under a real load, against what the client did.

The load is libnbd writes of 4 KiB at random aligned offsets, one at a time, counted by the test.
``raidkit iostat --json 3 2`` takes its first reading (since the start) before the load and its
second after it, so the interval holds every write: the array's write figures must be the
client's exactly, and the members' the level's algorithm (RAID 1: two member writes per client
write; RAID 5 of 5: read-modify-write, two member reads and two member writes).
"""

import json
import random
import subprocess
import time

import nbd
import pytest

import skips
from conftest import (RAIDKIT_BIN, SEED, SERVER_KIND, free_tcp_port, require_tools, run,
                      start_serving, stop_serving)

pytestmark = pytest.mark.skipif(
    SERVER_KIND != "raidkit", reason=skips.env_reason("RAIDKIT_TEST_SERVER: raidkit's own counters"))

MIB = 1024 * 1024
MEMBERS = {"1": 2, "5": 5}


def start(tmp_path, level, extra=()):
    """``raidkit serve --create`` over file members with an admin socket; returns the process,
    the NBD socket and the admin socket."""
    members = [tmp_path / f"m{i}.img" for i in range(MEMBERS[level])]
    sock, admin = tmp_path / "nbd.sock", tmp_path / "admin.sock"
    cmd = [RAIDKIT_BIN, "serve", "--create", "--level", level, "--size", "64M",
           "--chunk", "64K", "--unix", str(sock), "--admin", str(admin), *extra,
           *map(str, members)]
    proc = start_serving(cmd)
    return proc, sock, admin


def write_for(sock, seconds, rng):
    """4 KiB writes at random aligned offsets, one at a time, for `seconds`; returns how many."""
    h = nbd.NBD()
    h.connect_uri(f"nbd+unix:///?socket={sock}")
    blocks = h.get_size() // 4096
    data = bytes(rng.randrange(256) for _ in range(4096))
    done = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        h.pwrite(data, rng.randrange(blocks) * 4096)
        done += 1
    h.shutdown()
    return done


@pytest.mark.parametrize("level", ["1", "5"])
def test_iostat_figures_are_what_the_client_did(tmp_path, level):
    rng = random.Random(SEED)
    proc, sock, admin = start(tmp_path, level)
    try:
        iostat = subprocess.Popen([RAIDKIT_BIN, "iostat", "--admin", str(admin), "--json", "3", "2"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = json.loads(iostat.stdout.readline())
        writes = write_for(sock, 1.5, rng)
        second = json.loads(iostat.stdout.readline())
        assert iostat.wait(timeout=30) == 0, iostat.stderr.read()
        assert writes > 50, f"only {writes} writes in 1.5 s"
        assert first["arrays"][0]["since_start"] and not second["arrays"][0]["since_start"]
        array = second["arrays"][0]
        client = array["client"]
        interval = client["interval_secs"]
        assert 2.5 < interval < 4.0, interval
        # Every write of the load and nothing else, to the operation and the byte.
        assert client["write"]["ops_per_sec"] * interval == pytest.approx(writes, rel=1e-6)
        assert client["write"]["bytes_per_sec"] * interval == pytest.approx(writes * 4096, rel=1e-6)
        assert client["write"]["avg_size_bytes"] == 4096
        assert client["read"]["ops_per_sec"] == 0
        assert 0 < client["util_percent"] <= 100 and client["write"]["await_ms"] > 0
        # Each device's rates are over its own reading's interval.
        member_writes = sum(m["rates"]["write"]["ops_per_sec"] * m["rates"]["interval_secs"]
                            for m in array["members"])
        member_reads = sum(m["rates"]["read"]["ops_per_sec"] * m["rates"]["interval_secs"]
                           for m in array["members"])
        amp = array["amplification"]
        if level == "1":
            assert member_writes == pytest.approx(2 * writes, rel=1e-6)
            assert member_reads == pytest.approx(0, abs=1e-6)
            assert amp["write"] == pytest.approx(2.0) and amp["read"] == 0
        else:
            # RAID 5 of 5, 4 KiB inside one chunk: read-modify-write (old data and parity
            # read, new data and parity written) beats reading the three other data chunks.
            assert member_writes >= 2 * writes * (1 - 1e-9)
            assert amp["write"] == pytest.approx(2.0) and amp["read"] == pytest.approx(2.0)
        # The text report: the array's line and one per member, with the histograms asked for.
        text = run([RAIDKIT_BIN, "iostat", "--admin", str(admin), "--latency", "--sizes"]).stdout
        lines = text.splitlines()
        assert "r/s" in lines[1] and "%util" in lines[1] and "mw/op" in lines[1], text
        array_line = next(line for line in lines if line.startswith("e2e") or line.startswith("raidkit"))
        assert float(array_line.split()[2]) > 0, text
        for role in range(MEMBERS[level]):
            assert any(line.startswith(f"  {role} ") and f"m{role}.img" in line for line in lines), text
        # Since the start every client write is 4 KiB: the size histogram's 4K row holds the
        # members' writes (and RAID 5's reads), nothing else is bigger.
        row = next(line.split() for line in lines if line.split()[:1] == ["4K"])
        per_member_writes = [int(x) for x in row[2::2]]
        assert sum(per_member_writes) >= 2 * writes, text
    finally:
        stop_serving(proc)


def test_iostat_refuses_a_bad_interval_and_an_unknown_array(tmp_path):
    proc, sock, admin = start(tmp_path, "1")
    try:
        bad = run([RAIDKIT_BIN, "iostat", "--admin", str(admin), "0"], check=False)
        assert bad.returncode != 0 and "INTERVAL" in bad.stderr, bad.stderr
        unknown = run([RAIDKIT_BIN, "iostat", "--admin", str(admin), "--array", "nope"], check=False)
        assert unknown.returncode != 0 and "nope" in unknown.stderr, unknown.stderr
    finally:
        stop_serving(proc)


def scrape(port):
    """The metrics text, and its samples by name and labels."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = reply.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return text, samples


def promtool_check(text):
    """``promtool check metrics`` accepts the exposition ``text`` (lint problems included)."""
    checked = run(["promtool", "check", "metrics"], check=False, input=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_metrics_move_under_load_and_pass_promtool(tmp_path):
    require_tools("promtool")
    rng = random.Random(SEED)
    port = free_tcp_port()
    # A port alone: loopback.
    proc, sock, admin = start(tmp_path, "1", extra=["--metrics", str(port)])
    try:
        before_text, before = scrape(port)
        writes = write_for(sock, 1.0, rng)
        after_text, after = scrape(port)
        for text in (before_text, after_text):
            promtool_check(text)
        name = "raidkit"
        writes_key = f'raidkit_array_requests_total{{array="{name}",op="write"}}'
        assert after[writes_key] - before[writes_key] == writes
        bytes_key = f'raidkit_array_bytes_total{{array="{name}",op="write"}}'
        assert after[bytes_key] - before[bytes_key] == writes * 4096
        member_writes = sum(
            after[k] - before.get(k, 0) for k in after
            if k.startswith("raidkit_member_requests_total{") and 'op="write"' in k)
        assert member_writes == 2 * writes, "RAID 1: every write to both members"
        count_key = f'raidkit_array_request_duration_seconds_count{{array="{name}",op="write"}}'
        assert after[count_key] - before[count_key] == writes
        assert after[f'raidkit_array_busy_seconds_total{{array="{name}"}}'] > \
            before[f'raidkit_array_busy_seconds_total{{array="{name}"}}']
        # Health and member states are gauges of a state set.
        assert after[f'raidkit_array_health{{array="{name}",health="active"}}'] == 1
        assert after[f'raidkit_array_health{{array="{name}",health="degraded"}}'] == 0
        for i in range(2):
            member = tmp_path / f"m{i}.img"
            key = f'raidkit_member_state{{array="{name}",member="{member}",role="{i}",state="active"}}'
            assert after[key] == 1, after_text
        # A failed member shows as such.
        run([RAIDKIT_BIN, "fail", "--admin", str(admin), str(tmp_path / "m1.img")])
        _, failed = scrape(port)
        key = f'raidkit_member_state{{array="{name}",member="{tmp_path / "m1.img"}",role="1",state="faulty"}}'
        assert failed[key] == 1
        assert failed[f'raidkit_array_health{{array="{name}",health="degraded"}}'] == 1
        # /metrics and the dashboard's pages (test_dashboard.py); nothing else.
        import urllib.error
        import urllib.request
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing-here", timeout=10)
        assert e.value.code == 404
    finally:
        stop_serving(proc)


def test_metrics_address_is_checked_before_the_array_is_touched(tmp_path):
    members = [tmp_path / f"m{i}.img" for i in range(2)]
    bad = run([RAIDKIT_BIN, "serve", "--create", "--level", "1", "--size", "64M",
               "--unix", str(tmp_path / "nbd.sock"), "--metrics", "no-such-host.invalid:9",
               *map(str, members)], check=False)
    assert bad.returncode != 0 and "metrics address" in bad.stderr, bad.stderr
    assert not any(m.exists() for m in members), "nothing created"


def test_the_daemon_serves_every_arrays_metrics(tmp_path):
    require_tools("promtool")
    from test_daemon import Daemon, create
    entries = []
    for name in ("home", "media"):
        create(tmp_path, "1", name, 2)
        entries.append(run([RAIDKIT_BIN, "examine", "--scan", f"{tmp_path}/{name}0",
                            f"{tmp_path}/{name}1"]).stdout)
    port = free_tcp_port()
    config = tmp_path / "raidkit.toml"
    config.write_text(f'[daemon]\nunix = "{tmp_path}/nbd.sock"\nadmin = "{tmp_path}/a.sock"\n'
                      f'metrics = "127.0.0.1:{port}"\n\n' + "\n".join(entries))
    daemon = Daemon(config, 2)
    try:
        text, samples = scrape(port)
        for name in ("home", "media"):
            assert samples[f'raidkit_array_health{{array="{name}",health="clean"}}'] == 1, text
            assert f'raidkit_member_requests_total{{array="{name}",member="{tmp_path}/{name}1",role="1",op="write"}}' in samples
        promtool_check(text)
    finally:
        daemon.stop()
        daemon.kill()


def test_a_read_only_array_has_metrics_too(tmp_path):
    proc, sock, admin = start(tmp_path, "1")
    stop_serving(proc)
    port = free_tcp_port()
    members = [str(tmp_path / f"m{i}.img") for i in range(2)]
    ro = subprocess.Popen([RAIDKIT_BIN, "serve", "--read-only", "--unix", str(sock), "--metrics",
                           str(port), *members], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    try:
        line = ro.stdout.readline()
        assert "raidkit: serving" in line, line + ro.stderr.read()
        h = nbd.NBD()
        h.connect_uri(f"nbd+unix:///?socket={sock}")
        h.pread(4096, 0)
        h.shutdown()
        text, samples = scrape(port)
        assert samples['raidkit_array_requests_total{array="raidkit",op="read"}'] >= 1, text
    finally:
        stop_serving(ro)


def test_counters_with_a_write_back_journal(tmp_path):
    """With a write-back journal the client's writes are counted as the client sent them (acked
    from the journal), and the members' as the appliers wrote them once the journal drained:
    RAID 5 of 5, 4 KiB writes, each applied as at most a read-modify-write (two member reads,
    two member writes) and at least one member write per client write's stripe."""
    rng = random.Random(SEED)
    journal = tmp_path / "journal.img"
    proc, sock, admin = start(tmp_path, "5", extra=[
        "--journal", str(journal), "--journal-mode", "write-back", "--journal-size", "64M"])
    try:
        writes = write_for(sock, 1.5, rng)
        assert writes > 50, f"only {writes} writes in 1.5 s"
        h = nbd.NBD()
        h.connect_uri(f"nbd+unix:///?socket={sock}")
        h.flush()
        h.shutdown()
        deadline = time.monotonic() + 60
        while True:
            status = json.loads(run([RAIDKIT_BIN, "status", "--admin", str(admin), "--json"]).stdout)
            if status["journal"]["unapplied_bytes"] == 0:
                break
            assert time.monotonic() < deadline, status["journal"]
            time.sleep(0.1)
        report = json.loads(run([RAIDKIT_BIN, "iostat", "--admin", str(admin), "--json"]).stdout)
        array = report["arrays"][0]
        interval = array["client"]["interval_secs"]
        assert array["client"]["write"]["ops_per_sec"] * interval == pytest.approx(writes, rel=1e-6)
        member_writes = sum(m["rates"]["write"]["ops_per_sec"] * m["rates"]["interval_secs"]
                            for m in array["members"])
        # Applies merge writes to one stripe, so fewer than 2 per client write may reach the
        # members, but every written stripe gets its data and parity written.
        assert 0 < member_writes <= 2 * writes * (1 + 1e-9), (member_writes, writes)
        assert array["amplification"]["write"] <= 2.0 + 1e-9, array["amplification"]
        # At most a read-modify-write's two member reads per client write (a reconstruct-write
        # is chosen only when it reads fewer).
        member_reads = sum(m["rates"]["read"]["ops_per_sec"] * m["rates"]["interval_secs"]
                           for m in array["members"])
        print(f"write-back journal: {writes} client writes, {member_reads:.0f} member reads, "
              f"{member_writes:.0f} member writes")
        assert member_reads <= 2 * writes * (1 + 1e-9), (member_reads, writes)
        assert array["amplification"]["read"] <= 2.0 + 1e-9, array["amplification"]
    finally:
        stop_serving(proc)
