"""The skip machinery itself (skips.py): a skip is never a silent pass.

Runs pytest on a tiny fixture directory with ``-p skips`` and checks the exit code and the skip
log: a plain skip passes locally but fails under ``CI=true``; an environment-dependent skip passes
in both, with its reason listed; a missing tool fails unless ``RAIDKIT_ALLOW_MISSING_TOOLS=1``,
and then it is a skip that CI refuses.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

CASES = {
    "plain": "import pytest\n\ndef test_x():\n    pytest.skip('not today')\n",
    "environment": "import skips\n\ndef test_x():\n    skips.environment('needs root')\n",
    "tool": "import skips\n\ndef test_x():\n    skips.require_tools('raidkit-no-such-tool-7f3a')\n",
    "module": "import skips\n\ndef test_x():\n"
              "    skips.require_modules('raidkit_no_such_module_7f3a:python3-nope')\n",
}


def run_case(tmp_path, case, ci=False, allow=False):
    d = tmp_path / case
    d.mkdir()
    (d / "test_case.py").write_text(CASES[case])
    log = tmp_path / f"{case}-{ci}-{allow}.log"
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "RAIDKIT_ALLOW_MISSING_TOOLS", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(HERE), RAIDKIT_SKIP_LOG=str(log))
    if ci:
        env["CI"] = "true"
    if allow:
        env["RAIDKIT_ALLOW_MISSING_TOOLS"] = "1"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "skips", "-c", os.devnull, "--rootdir", str(d), str(d)],
                         env=env, capture_output=True, text=True, timeout=60)
    kinds = [line.split("\t")[0] for line in log.read_text().splitlines()] if log.exists() else []
    return out.returncode, out.stdout + out.stderr, kinds


@pytest.mark.parametrize("ci", [False, True])
def test_plain_skip_is_listed_and_fails_in_ci(tmp_path, ci):
    code, out, kinds = run_case(tmp_path, "plain", ci=ci)
    assert code == (1 if ci else 0), out
    assert "SKIPPED" in out and "not today" in out, out
    assert kinds == ["skip"]


def test_environment_skip_passes_in_ci_with_its_reason(tmp_path):
    code, out, kinds = run_case(tmp_path, "environment", ci=True)
    assert code == 0, out
    assert "environment-dependent: needs root" in out, out
    assert kinds == ["environment"]


def test_missing_tool_fails(tmp_path):
    code, out, kinds = run_case(tmp_path, "tool")
    assert code == 1, out
    assert "raidkit-no-such-tool-7f3a missing" in out and "install-deps.sh" in out, out
    assert kinds == []


@pytest.mark.parametrize("ci", [False, True])
def test_missing_tool_with_the_opt_out_is_a_skip_ci_refuses(tmp_path, ci):
    code, out, kinds = run_case(tmp_path, "tool", ci=ci, allow=True)
    assert code == (1 if ci else 0), out
    assert kinds == ["skip"]


def test_missing_python_module_fails_naming_its_package(tmp_path):
    code, out, kinds = run_case(tmp_path, "module")
    assert code == 1, out
    assert "python module raidkit_no_such_module_7f3a (python3-nope) missing" in out, out
    assert kinds == []
    (tmp_path / "allowed").mkdir()
    code, out, kinds = run_case(tmp_path / "allowed", "module", allow=True)
    assert code == 0, out
    assert kinds == ["skip"]
