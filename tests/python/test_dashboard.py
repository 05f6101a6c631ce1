"""The web dashboard (issue 13) in a real browser: headless Chromium, driven by Selenium through
chromedriver, loads the dashboard of a running RAID 5 (``raidkit serve --metrics``, page at
``/``) under a light load, checks the health and the member grid, runs ``raidkit fail`` on a
member and ``raidkit add`` of a spare with a throttled rebuild, and sees the grid cell turn
faulty, then rebuilding, and the rebuild's progress bar appear, without a reload. The action
buttons exist only once the page is unlocked with the token. At a phone's size nothing is
wider than the screen. Screenshots go to the test's directory; with
``RAIDKIT_UPDATE_SCREENSHOT=1`` the laptop one is also written to docs/images/dashboard.png,
which the README shows.
"""

import json
import os
import random
import shutil
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbd
import pytest

import skips
from conftest import (RAIDKIT_BIN, REPO, SEED, SERVER_KIND, free_tcp_port, require_tools, run,
                      start_serving, stop_serving)

try:  # a missing module fails the test that needs it (require_browser), not the collection
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
except ImportError:
    pass

pytestmark = pytest.mark.skipif(
    SERVER_KIND != "raidkit", reason=skips.env_reason("RAIDKIT_TEST_SERVER: raidkit's dashboard"))

TOKEN = "dashboard-test-token-0123456789"
MEMBERS = 4
SCREENSHOT = REPO / "docs" / "images" / "dashboard.png"


def require_browser():
    require_tools("chromium", "chromedriver")
    skips.require_modules("selenium:python3-selenium")


def start(tmp_path, token=True):
    """``raidkit serve`` of a new RAID 5 with the admin socket and the metrics listener (and
    the dashboard's token); returns the process, NBD socket, admin socket, page URL, members."""
    members = [tmp_path / f"disk{i}.img" for i in range(MEMBERS)]
    sock, admin = tmp_path / "nbd.sock", tmp_path / "admin.sock"
    port = free_tcp_port()
    extra = []
    if token:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        extra = ["--dashboard-token-file", str(token_file)]
    cmd = [RAIDKIT_BIN, "serve", "--create", "--level", "5", "--size", "96M", "--chunk", "64K",
           "--name", "home", "--unix", str(sock), "--admin", str(admin),
           "--metrics", f"127.0.0.1:{port}", *extra, *map(str, members)]
    proc = start_serving(cmd)
    return proc, sock, admin, f"http://127.0.0.1:{port}/", members


class Load(threading.Thread):
    """4 KiB reads and writes at random offsets, a few hundred a second, until stopped: the
    graphs have something to draw."""

    def __init__(self, sock, rng):
        super().__init__(daemon=True)
        self.sock, self.rng, self.stopped, self.done = sock, rng, threading.Event(), 0

    def run(self):
        h = nbd.NBD()
        h.connect_uri(f"nbd+unix:///?socket={self.sock}")
        blocks = h.get_size() // 4096
        data = bytes(self.rng.randrange(256) for _ in range(4096))
        while not self.stopped.is_set():
            offset = self.rng.randrange(blocks) * 4096
            if self.rng.random() < 0.6:
                h.pread(4096, offset)
            else:
                h.pwrite(data, offset)
            self.done += 1
            time.sleep(0.002)
        h.shutdown()


def browser(width, height):
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.set_page_load_timeout(30)
    return driver


def wait_for(what, check, timeout=30):
    """Polls `check` until it returns something true; fails naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as e:  # the page between two renders
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {timeout} s (last: {last!r})")


def grid(driver):
    """{role: state} of the member grid's cells (spares by name)."""
    cells = driver.find_elements(By.CSS_SELECTOR, ".array .grid .cell")
    return {c.get_attribute("data-role") if c.get_attribute("data-role") != "spare"
            else c.get_attribute("data-member"): c.get_attribute("data-state") for c in cells}


def health(driver):
    return driver.find_element(By.CSS_SELECTOR, ".array .health").get_attribute("data-health")


def severe_logs(driver):
    """The browser's errors (scripts, content security policy, failed loads), but the 401 the
    wrong token got on purpose."""
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"
            and not ("/api/unlock" in entry["message"] and "401" in entry["message"])]


def test_dashboard_follows_a_failure_and_a_rebuild_without_reloading(tmp_path):
    require_browser()
    rng = random.Random(f"{SEED}:dashboard")
    proc, sock, admin, url, members = start(tmp_path)
    load = Load(sock, rng)
    driver = None
    try:
        load.start()
        driver = browser(1280, 1000)
        driver.get(url)
        roles = {str(r): "active" for r in range(MEMBERS)}
        wait_for("four active members in the grid", lambda: grid(driver) == roles)
        assert health(driver) in ("clean", "active")
        name = driver.find_element(By.CSS_SELECTOR, ".array .array-name").text
        assert name == "home"
        meta = driver.find_element(By.CSS_SELECTOR, ".array .array-meta").text
        assert "RAID5" in meta.replace(" ", "").upper() and "4 members" in meta, meta
        assert driver.find_element(By.CSS_SELECTOR, ".array .mdstat").text == "[4/4] [UUUU]"
        # The graphs fill as the load runs (a point a second).
        wait_for("the throughput graph's current figures",
                 lambda: "B/s" in driver.find_element(By.CSS_SELECTOR, "[data-chart=throughput] .now").text)
        assert len(driver.find_elements(By.CSS_SELECTOR, ".array .chart canvas")) == 3
        wait_for("the NewArray event", lambda: driver.find_elements(By.CSS_SELECTOR, '.event[data-event="NewArray"]'))
        # Locked: no action buttons until the token is given.
        assert driver.find_element(By.ID, "mode-badge").text == "locked"
        assert not driver.find_elements(By.CSS_SELECTOR, ".cell-action")
        driver.find_element(By.ID, "token-input").send_keys("not-the-token-at-all")
        driver.find_element(By.CSS_SELECTOR, "#token-form button").click()
        wait_for("a refused token's message", lambda: "token" in driver.find_element(By.ID, "toast").text)
        assert not driver.find_elements(By.CSS_SELECTOR, ".cell-action")
        driver.find_element(By.ID, "token-input").clear()
        driver.find_element(By.ID, "token-input").send_keys(TOKEN)
        driver.find_element(By.CSS_SELECTOR, "#token-form button").click()
        wait_for("the Fail buttons once unlocked",
                 lambda: len(driver.find_elements(By.CSS_SELECTOR, ".cell-action")) == MEMBERS)
        assert driver.find_element(By.ID, "mode-badge").text == "actions on"

        # A marker that a reload would lose.
        driver.execute_script("window.__notReloaded = true;")
        run([RAIDKIT_BIN, "speed-limit", "--admin", str(admin), "--min", "1M", "--max", "3M"])
        run([RAIDKIT_BIN, "fail", "--admin", str(admin), str(members[1])])
        wait_for("role 1 faulty in the grid", lambda: grid(driver).get("1") == "faulty")
        wait_for("health degraded", lambda: health(driver) == "degraded")
        assert driver.find_element(By.CSS_SELECTOR, ".array .mdstat").text == "[4/3] [U_UU]"
        wait_for("the Fail event", lambda: driver.find_elements(By.CSS_SELECTOR, '.event[data-event="Fail"]'))

        spare = tmp_path / "spare.img"
        run([RAIDKIT_BIN, "add", "--admin", str(admin), str(spare)])
        wait_for("role 1 rebuilding in the grid", lambda: grid(driver).get("1") == "rebuilding")
        wait_for("health rebuilding", lambda: health(driver) == "rebuilding")
        task = driver.find_element(By.CSS_SELECTOR, ".array .task")
        assert task.get_attribute("data-kind") == "rebuild"
        bar = driver.find_element(By.CSS_SELECTOR, ".array .task .bar")
        first = wait_for("the rebuild's progress bar",
                         lambda: bar.is_displayed() and float(bar.get_attribute("data-percent")) > 0
                         and float(bar.get_attribute("data-percent")))
        later = wait_for("the rebuild's progress moving",
                         lambda: float(bar.get_attribute("data-percent")) > first
                         and float(bar.get_attribute("data-percent")))
        assert 0 < first < later < 100, (first, later)
        # The rate (and so the ETA) is shown once the volume has measured one; the first
        # samples of a rebuild may have progress without it.
        wait_for("the rebuild's rate and ETA", lambda: (
            figures := driver.find_element(By.CSS_SELECTOR, ".array .task-figures").text)
            and "ETA" in figures and "/s" in figures and figures)
        wait_for("the RebuildStarted event",
                 lambda: driver.find_elements(By.CSS_SELECTOR, '.event[data-event="RebuildStarted"]'))
        assert driver.execute_script("return window.__notReloaded === true;"), "the page reloaded"
        assert load.done > 100, f"the load did only {load.done} requests"

        # Laptop screenshot during the rebuild, the whole page, once the graphs have a few
        # dozen points and the rebuild a fifth.
        wait_for("the Rebuild20 event",
                 lambda: driver.find_elements(By.CSS_SELECTOR, '.event[data-event="Rebuild20"]'), 90)
        assert grid(driver).get("1") == "rebuilding" and bar.is_displayed()
        height = driver.execute_script("return document.documentElement.scrollHeight;")
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": False})
        time.sleep(1.2)
        laptop = tmp_path / "dashboard.png"
        assert driver.save_screenshot(str(laptop))
        assert laptop.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("RAIDKIT_UPDATE_SCREENSHOT") == "1":
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(laptop, SCREENSHOT)

        # A phone: the same page, nothing wider than the screen.
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
        time.sleep(1.2)
        widths = driver.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth];")
        assert widths[0] <= widths[1], f"horizontal scroll on a phone: {widths}"
        assert grid(driver).get("1") in ("rebuilding", "active")
        assert driver.save_screenshot(str(tmp_path / "dashboard-phone.png"))
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                               {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        time.sleep(1.2)
        assert driver.save_screenshot(str(tmp_path / "dashboard-phone-dark.png"))
        assert driver.execute_script("return window.__notReloaded === true;"), "the page reloaded"
        assert not severe_logs(driver), severe_logs(driver)
    finally:
        if driver is not None:
            driver.quit()
        load.stopped.set()
        load.join(timeout=10)
        stop_serving(proc)


def post(url, body, token=None):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    if token is not None:
        request.add_header("X-Raidkit-Token", token)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_dashboard_is_read_only_without_a_token(tmp_path):
    proc, _sock, admin, url, members = start(tmp_path, token=False)
    try:
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200
            assert page.headers["x-frame-options"] == "DENY"
            assert "script-src 'self'" in page.headers["content-security-policy"]
            assert b"/assets/dashboard.js" in page.read()
        status, answer = post(f"{url}api/arrays/home/fail", {"member": str(members[0])}, TOKEN)
        assert status == 403 and "--dashboard-token-file" in answer["error"], answer
        with urllib.request.urlopen(f"{url}api/dashboard", timeout=10) as polled:
            state = json.load(polled)
        assert state["actions"] is False
        assert [m["state"] for m in state["arrays"][0]["status"]["members"]] == ["active"] * MEMBERS
        # The metrics still answer on the same listener.
        with urllib.request.urlopen(f"{url}metrics", timeout=10) as metrics:
            assert b"raidkit_" in metrics.read()
        status = json.loads(run([RAIDKIT_BIN, "status", "--admin", str(admin), "--json"]).stdout)
        assert all(m["state"] == "active" for m in status["members"]), "nothing was failed"
    finally:
        stop_serving(proc)


def test_a_request_naming_another_host_is_refused(tmp_path):
    """DNS rebinding: a page of another site whose name resolves to the listener sends its own
    name as Host; the listener answers only requests addressed to itself (its address,
    localhost on loopback, or this machine's host name, as a Prometheus scraping `HOSTNAME:PORT`
    sends), on the dashboard's paths and /metrics alike."""
    proc, _sock, _admin, url, _members = start(tmp_path, token=False)
    port = url.rsplit(":", 1)[1].strip("/")

    def get(path, host=None):
        headers = {} if host is None else {"Host": host}
        request = urllib.request.Request(f"{url}{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    try:
        for path in ("", "api/dashboard", "metrics"):
            for host in (f"evil.example:{port}", f"127.0.0.1.nip.io:{port}", "127.0.0.1:80"):
                status, body = get(path, host)
                assert status == 421, (path, host, status, body)
                assert "DNS rebinding" in body and f"127.0.0.1:{port}" in body, body
            machine = Path("/proc/sys/kernel/hostname").read_text().strip()
            for host in (None, f"localhost:{port}", f"127.0.0.1:{port}", f"{machine}:{port}"):
                status, body = get(path, host)
                assert status == 200, (path, host, status, body)
        assert '"arrays"' in get("api/dashboard", f"localhost:{port}")[1]
    finally:
        stop_serving(proc)


def test_the_daemons_dashboard_shows_every_array_and_acts_on_the_one_named(tmp_path):
    """The daemon's `[daemon] metrics` listener serves the dashboard of all its arrays; with
    `dashboard_token_file`, an action on one array (fail a member) changes that array only, and
    the page's JSON follows it with its events. The events are the daemon's alerts, each once:
    `raidkit monitor --test` (an alert only the daemon raises) shows a TestMessage for each
    array, and the failed member one Fail, not a second from the status change."""
    from test_daemon import Daemon, create
    entries = []
    for name in ("home", "media"):
        create(tmp_path, "1", name, 2)
        entries.append(run([RAIDKIT_BIN, "examine", "--scan", f"{tmp_path}/{name}0",
                            f"{tmp_path}/{name}1"]).stdout)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    port = free_tcp_port()
    config = tmp_path / "raidkit.toml"
    config.write_text(f'[daemon]\nunix = "{tmp_path}/nbd.sock"\nadmin = "{tmp_path}/a.sock"\n'
                      f'metrics = "127.0.0.1:{port}"\ndashboard_token_file = "{token_file}"\n\n'
                      + "\n".join(entries))
    url = f"http://127.0.0.1:{port}/"
    daemon = Daemon(config, 2)

    def polled():
        with urllib.request.urlopen(f"{url}api/dashboard", timeout=10) as answer:
            return json.load(answer)

    def when(state, holds):
        return state if holds(state) else None

    def states(state, name):
        array = next(a for a in state["arrays"] if a["name"] == name)
        return [m["state"] for m in array["status"]["members"]]

    try:
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200 and b"/assets/dashboard.js" in page.read()
        state = wait_for("both arrays on the dashboard", lambda: when(polled(), lambda s: len(
            s["arrays"]) == 2))
        assert state["actions"] is True
        assert sorted(a["name"] for a in state["arrays"]) == ["home", "media"]
        status, answer = post(f"{url}api/arrays/media/fail", {"member": f"{tmp_path}/media1"})
        assert status == 401, answer  # no token: refused, nothing failed
        status, answer = post(f"{url}api/arrays/media/fail", {"member": f"{tmp_path}/media1"},
                              TOKEN)
        assert status == 200, answer
        state = wait_for("media's member shown faulty", lambda: when(
            polled(), lambda s: "faulty" in states(s, "media")))
        assert states(state, "media") == ["active", "faulty"], state
        assert states(state, "home") == ["active", "active"], state
        fails = [e for e in state["events"] if e["event"] == "Fail" and e["array"] == "media"]
        assert len(fails) == 1 and fails[0]["member"] == f"{tmp_path}/media1", state["events"]

        run([RAIDKIT_BIN, "monitor", "--test", "--admin", f"{tmp_path}/a.sock"])
        state = wait_for("a TestMessage for each array", lambda: when(polled(), lambda s: sorted(
            e["array"] for e in s["events"] if e["event"] == "TestMessage") == ["home", "media"]))
        time.sleep(2.5)  # two more samples: the status changes add no event of their own
        events = polled()["events"]
        fails = [e for e in events if e["event"] == "Fail"]
        assert len(fails) == 1 and fails[0]["array"] == "media", events
        assert sum(e["event"] == "TestMessage" for e in events) == 2, events
    finally:
        daemon.stop()
        daemon.kill()
