"""Skips in the end-to-end tests: a skip is never a silent pass.

- A missing tool or Python module fails the test (``require_tools``, ``require_modules``),
  naming it and how to install it, unless
  ``RAIDKIT_ALLOW_MISSING_TOOLS=1``: then it is a skip.
- A test that cannot run on this machine for a reason no package fixes (not root, no FUSE, a
  reference server chosen with ``RAIDKIT_TEST_SERVER``) calls ``environment(reason)`` (or uses
  ``env_reason(reason)`` in a ``skipif`` marker): an *environment-dependent* skip.
- Every skip is listed with its reason at the end of the run, and appended to the file named by
  ``RAIDKIT_SKIP_LOG`` (``kind<TAB>test<TAB>reason``; scripts/test.sh counts them in its
  summary, with the Rust tests' skips).
- With ``CI=true`` any skip that is not environment-dependent fails the run.

Loaded by conftest.py (``pytest_plugins``); ``tests/python/test_skips.py`` tests it on a fixture
directory.
"""

import importlib.util
import os
import shutil

import pytest

ENV_PREFIX = "environment-dependent: "
ALLOW_MISSING_TOOLS_VAR = "RAIDKIT_ALLOW_MISSING_TOOLS"
SKIP_LOG_VAR = "RAIDKIT_SKIP_LOG"

_skips = []  # (test id, reason) in the order they happened


def env_reason(reason):
    """The reason of an environment-dependent skip, for ``pytest.mark.skipif(reason=...)``."""
    return ENV_PREFIX + reason


def environment(reason):
    """Skips the running test: this machine cannot run it (``reason`` says why)."""
    pytest.skip(env_reason(reason))


def require_tools(*tools):
    """Fails the running test if a tool is not on PATH (skips it with the opt-out)."""
    _require([t for t in tools if shutil.which(t) is None])


def require_modules(*modules):
    """Fails the running test if this Python cannot import a module, named with its
    Debian package as ``"matplotlib:python3-matplotlib"`` (skips it with the opt-out)."""
    missing = []
    for entry in modules:
        module, _, package = entry.partition(":")
        if importlib.util.find_spec(module) is None:
            missing.append(f"python module {module} ({package or module})")
    _require(missing)


def _require(missing):
    if not missing:
        return
    message = (f"{', '.join(missing)} missing: install with scripts/install-deps.sh "
               f"(or set {ALLOW_MISSING_TOOLS_VAR}=1 to skip)")
    if os.environ.get(ALLOW_MISSING_TOOLS_VAR) == "1":
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


def is_environment(reason):
    return reason.startswith(ENV_PREFIX)


def in_ci():
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _reason(report):
    if isinstance(report.longrepr, tuple):
        reason = report.longrepr[2]
    else:
        reason = str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def _note(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips.append((report.nodeid, _reason(report)))


def pytest_runtest_logreport(report):
    _note(report)


def pytest_collectreport(report):
    _note(report)


def _refused():
    return [(t, r) for t, r in _skips if not is_environment(r)] if in_ci() else []


def pytest_sessionfinish(session, exitstatus):
    log = os.environ.get(SKIP_LOG_VAR)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            for test, reason in _skips:
                kind = "environment" if is_environment(reason) else "skip"
                f.write(f"{kind}\t{test}\t{reason.replace(chr(9), ' ').splitlines()[0]}\n")
    if _refused() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if not _skips:
        return
    tr = terminalreporter
    env = [(t, r) for t, r in _skips if is_environment(r)]
    tr.section(f"skipped: {len(_skips)} ({len(env)} environment-dependent)")
    for test, reason in _skips:
        tr.write_line(f"SKIPPED {test}: {reason}")
    refused = _refused()
    if refused:
        tr.write_line(f"CI=true: {len(refused)} skip(s) not marked environment-dependent "
                      "fail the run (a missing tool is installed by scripts/install-deps.sh)",
                      red=True)
