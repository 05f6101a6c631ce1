"""``raidkit daemon``'s scheduled scrubs and background window, with real time.

- ``test_a_scheduled_scrub_runs_reports_mismatches_and_skips_a_degraded_array``: a RAID 5 with
  one byte of a member changed behind its back and ``scrub_schedule = "every 2s"``: the daemon
  starts a scrub by itself (log line), it finds the mismatch, the alert program is called with
  ``MismatchesFound``, the finish is logged; once a member has failed the next runs are skipped
  ("the array is degraded") and no scrub starts.
- ``test_a_reload_applies_the_window_and_the_schedule_at_once``: both keys are live on reload:
  taking the window away lets a paused scrub go on at once, and the new schedule is followed.
- ``test_the_window_pauses_a_scrub_where_it_is_and_it_goes_on_from_there``: a slow scrub
  (speed_max 128K: one stripe a second) inside ``background_window``; the window closes for a
  few seconds and opens again. To make a daily window close and open within seconds, the daemon
  runs with a ``TZ`` whose daylight saving time starts a few seconds after the start and ends a
  few seconds later (clocks forward one hour, then back): the local time leaves the window and
  comes back. Meanwhile ``status`` shows the scrub paused "outside the background window" at a
  position that does not move; afterwards it goes on from that position (never from the
  start) and checks every stripe once.
"""

import json
import os
import time

import pytest

from conftest import SERVER_KIND
from test_daemon import Daemon, alert_program, create, raidkit, wait_for_line

pytestmark = pytest.mark.skipif(SERVER_KIND != "raidkit", reason="raidkit only")


def config_for(tmp_path, entries, alerts_program=None):
    admin = tmp_path / "admin.sock"
    config = tmp_path / "raidkit.toml"
    alerts = f'[alerts]\nprogram = "{alerts_program}"\n\n' if alerts_program else ""
    config.write_text(f'[daemon]\nunix = "{tmp_path}/nbd.sock"\nadmin = "{admin}"\n\n'
                      f"{alerts}{entries}")
    return config, admin


def status(admin):
    return json.loads(raidkit("status", "--admin", admin, "--array", "media", "--json").stdout)


def stripes(member):
    sb = json.loads(raidkit("examine", "--json", member).stdout)[0]
    return sb["data_bytes"] // sb["chunk_bytes"]


def test_a_scheduled_scrub_runs_reports_mismatches_and_skips_a_degraded_array(tmp_path):
    # No used-regions map: the scrub is to check every stripe, written or not.
    files = create(tmp_path, "5", "media", 3, "--no-used-map")
    sb = json.loads(raidkit("examine", "--json", files[0]).stdout)[0]
    # One byte of member 0's data area (data or parity of some stripe) changed: a mismatch.
    with open(files[0], "r+b") as f:
        at = sb["data_offset_bytes"] + 3 * sb["chunk_bytes"] + 17
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    program, alerts = alert_program(tmp_path)
    scanned = raidkit("examine", "--scan", f"{tmp_path}/media*").stdout
    config, admin = config_for(tmp_path, scanned + 'scrub_schedule = "every 2s"\n', program)
    daemon = Daemon(config, 1)
    try:
        since = time.monotonic()
        wait_for_line(daemon.log, 'array "media": scrub schedule "every 2s": next at ', since, 5)
        wait_for_line(daemon.log, 'array "media": scheduled scrub started (check only', since,
                      10)
        units = stripes(files[0])
        wait_for_line(daemon.log, f"scheduled scrub finished: {units} stripes checked, "
                      "1 mismatches", since, 30)
        wait_for_line(alerts, "MismatchesFound media", since, 30)
        report = status(admin)["last_scrub"]
        assert report["mismatches"] == 1 and report["stripes_checked"] == units, report

        raidkit("fail", "--admin", admin, files[1])
        since = time.monotonic()
        wait_for_line(daemon.log, "scheduled scrub skipped: the array is degraded; next at ",
                      since, 10)
        started = daemon.log.read_text().count("scheduled scrub started")
        time.sleep(4.5)
        log = daemon.log.read_text()
        assert log.count("scheduled scrub started") == started, log
        assert log.count("scheduled scrub skipped: the array is degraded") >= 2, log
    finally:
        log = daemon.stop()
        daemon.kill()
    assert 'array "media" closed cleanly' in log, log


def posix_tz_jumping(t1, t2, std_offset=0):
    """A TZ whose standard time is UTC + ``std_offset`` (seconds, whole hours) and whose daylight
    saving time (one hour ahead) starts at ``t1`` and ends at ``t2`` (Unix seconds, within the
    same local year): local time jumps an hour ahead at t1 and back at t2."""
    def rule(t, offset):
        tm = time.gmtime(t + offset)
        return f"{tm.tm_yday - 1}/{tm.tm_hour:02}:{tm.tm_min:02}:{tm.tm_sec:02}"
    # POSIX counts the offset west of Greenwich. The start is in standard time, the end in
    # daylight saving time.
    return f"RKS{-std_offset // 3600}RKD,{rule(t1, std_offset)},{rule(t2, std_offset + 3600)}"


def test_the_window_pauses_a_scrub_where_it_is_and_it_goes_on_from_there(tmp_path):
    # No used-regions map: the scrub is to check every stripe, written or not.
    files = create(tmp_path, "5", "media", 3, "--no-used-map")
    now = time.time()
    # The rule must fall within one local year: in the last hour of a UTC year, local standard
    # time is put two hours behind UTC.
    std = 0 if time.gmtime(now).tm_year == time.gmtime(now + 3700).tm_year else -7200
    t1, t2 = int(now) + 12, int(now) + 20
    # The window: the half hour either side of now (local); an hour ahead is outside it.
    lo, hi = time.gmtime(now + std - 1800), time.gmtime(now + std + 1800)
    window = f"{lo.tm_hour:02}:{lo.tm_min:02}-{hi.tm_hour:02}:{hi.tm_min:02}"
    scanned = raidkit("examine", "--scan", f"{tmp_path}/media*").stdout
    config, admin = config_for(tmp_path, scanned + f'background_window = "{window}"\n'
                               'speed_min = "128K"\nspeed_max = "128K"\n')
    env = dict(os.environ, TZ=posix_tz_jumping(t1, t2, std))
    daemon = Daemon(config, 1, env=env)
    try:
        raidkit("scrub", "--admin", admin)
        # Inside the window: it runs, one 128 KiB stripe a second.
        while time.time() < t1 - 1:
            task = status(admin)["task"]
            assert task is None or "paused" not in task, task
            time.sleep(0.2)
        # The clocks jump an hour ahead: outside the window. The scrub pauses where it is.
        while time.time() < t1 + 2:
            time.sleep(0.1)
        paused = status(admin)["task"]
        assert paused["kind"] == "scrub", paused
        assert paused["paused"] == f"outside the background window {window}", paused
        assert 0 < paused["done_bytes"] < paused["total_bytes"], paused
        shown = raidkit("status", "--admin", admin).stdout
        assert f"paused: outside the background window {window}" in shown, shown
        time.sleep(3)
        assert status(admin)["task"] == paused, "no progress outside the window"
        # The clocks go back: inside again. The first progress is past the pause, not a
        # restart from the first stripe.
        while time.time() < t2:
            time.sleep(0.05)
        while True:
            task = status(admin)["task"]
            assert task is not None, "the scrub ended or vanished"
            if "paused" not in task:
                break
            assert time.time() < t2 + 10, task
            time.sleep(0.05)
        assert task["done_bytes"] > paused["done_bytes"], (task, paused)
        raidkit("speed-limit", "--admin", admin, "--max", "1G", "--min", "1G")
        deadline = time.monotonic() + 60
        while (status(admin)["last_scrub"] or {}).get("finished") is not True:
            assert time.monotonic() < deadline, status(admin)
            time.sleep(0.2)
        report = status(admin)["last_scrub"]
        assert report["stripes_checked"] == stripes(files[0]), report
        assert report["mismatches"] == 0, report
    finally:
        log = daemon.stop()
        daemon.kill()
    assert f'array "media": outside the background window {window}: scrubs and resyncs ' \
           "pause where they are (rebuilds go on)" in log, log
    assert f'array "media": inside the background window {window}: scrubs and resyncs go on' \
        in log, log


def test_a_reload_applies_the_window_and_the_schedule_at_once(tmp_path):
    """``scrub_schedule`` and ``background_window`` are live keys: a reload that takes the
    window away lets the paused scrub go on at once, and the new schedule is followed."""
    create(tmp_path, "5", "media", 3)
    now = time.gmtime()
    window = f"{(now.tm_hour + 2) % 24:02}:00-{(now.tm_hour + 3) % 24:02}:00"  # not now (UTC)
    scanned = raidkit("examine", "--scan", f"{tmp_path}/media*").stdout
    tunables = 'speed_min = "128K"\nspeed_max = "128K"\n'
    config, admin = config_for(tmp_path, scanned + tunables + f'background_window = "{window}"\n')
    daemon = Daemon(config, 1, env=dict(os.environ, TZ="UTC"))
    try:
        # `scrub --wait` returns at once: the scrub waits for the window, and it says so.
        out = raidkit("scrub", "--admin", admin, "--wait", timeout=30).stdout
        assert f"the scrub is paused (outside the background window {window}); it goes on " \
               "by itself when the window opens" in out, out
        task = status(admin)["task"]
        assert task["paused"] == f"outside the background window {window}", task
        config.write_text(config.read_text().replace(f'background_window = "{window}"\n',
                                                     'scrub_schedule = "every 1h"\n'))
        out = raidkit("reload", "--admin", admin).stdout
        assert 'array "media": changed: scrub_schedule, background_window applied' in out, out
        deadline = time.monotonic() + 10
        while "paused" in (status(admin)["task"] or {"paused": True}):
            assert time.monotonic() < deadline, status(admin)
            time.sleep(0.1)
        wait_for_line(daemon.log, 'array "media": scrub schedule "every 1h": next at ',
                      time.monotonic(), 5)
    finally:
        log = daemon.stop()
        daemon.kill()
    assert f'array "media": outside the background window {window}' in log, log
