"""The leak guard under pytest-xdist: each worker guards its own tests and its own session,
and what a worker's end-of-session check finds fails the whole run.

Each case is a pytest of its own (two workers) over a small test file, with this suite's
conftest loaded as a plugin; it owns its run (no ``SUBAGENT_TEST_ROOT`` inherited), so its
controller does the run's final check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A session-scoped daemon exists before every test's snapshot, so only the end-of-session
# check can see it: each worker starts one and never ends it.
SESSION_LEAK = """
import subprocess, sys
import pytest

@pytest.fixture(scope="session")
def daemon():
    yield subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)

def test_one(daemon): pass
def test_two(daemon): pass
"""

TEST_LEAK = """
import subprocess, sys

def test_leaks():
    subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)

def test_clean(): pass
"""

CLEAN = """
import subprocess, sys

def test_one():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_two(): pass
"""


def _pytest(tmp_path: Path, source: str, workers: str = "2") -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_case.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k not in ("SUBAGENT_TEST_ROOT", "PYTEST_ADDOPTS")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            workers,
            "-p",
            "tests.conftest",
            "-q",
            str(tmp_path / "test_case.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.parametrize(("case", "workers"), [("session", "2"), ("test", "2"), ("session", "0")])
def test_a_leak_fails_a_run(tmp_path: Path, case: str, workers: str) -> None:
    proc = _pytest(tmp_path, SESSION_LEAK if case == "session" else TEST_LEAK, workers)
    output = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, output
    if case == "session":  # every test passed; the workers' end-of-session checks fail the run
        assert "2 passed" in proc.stdout, output
        title = "test run" if workers != "0" else "test session"  # the controller's, or the only pytest's
        assert f"processes left behind by the {title}:" in proc.stderr, output
        assert proc.stderr.count("sys.stdin.read()") == (1 if workers == "0" else 2), (
            output
        )  # a daemon a session
    else:
        assert "test left processes behind" in proc.stdout, output
        assert "2 passed, 1 error" in proc.stdout, output  # the guard fails the test's teardown


def test_a_clean_parallel_run_passes(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, CLEAN)
    assert proc.returncode == pytest.ExitCode.OK, proc.stdout + proc.stderr
    assert "left behind" not in proc.stdout + proc.stderr
