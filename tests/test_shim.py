"""The spawn shim run by itself, as the supervisor runs it (``python -I -S _shim.py STEP... -- PROGRAM``).

What a root child or a confined child gets from it is tested through real spawns in
``test_confine.py``; here: what it costs to start (the modules it imports), how it finds the
program (``execvp``'s rules, which it keeps without importing ``os``), and how it fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from supervisor.process._confine import shim_command

# What ``python -I -S`` imports before any program of its own, on the interpreters supported.
_STARTUP = {"_io", "marshal", "posix", "_frozen_importlib_external", "time", "zipimport", "_codecs", "codecs"}
_STARTUP |= {"encodings", "encodings.aliases", "encodings.utf_8", "_signal", "_abc", "abc", "io"}


def run_shim(
    steps: list[str], argv: list[str], *, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        shim_command(steps, argv),
        env=env if env is not None else {},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_shim_imports_neither_os_nor_ctypes() -> None:
    """``os`` and ``ctypes`` are pure-Python layers over ``posix`` and ``_ctypes`` that cost a
    spawn ~5 ms of CPU together: the shim imports built-in modules and ``_ctypes`` only."""
    command = shim_command([], ["/bin/true"])
    command.insert(1, "-Ximporttime")
    done = subprocess.run(command, env={}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    imported = {
        line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
    }
    imported.discard("imported package")
    assert imported - _STARTUP <= {"_ctypes"}, sorted(imported - _STARTUP)


def test_a_name_without_a_slash_is_found_along_path(tmp_path: Path) -> None:
    """As ``execvp``: a file there that may not be executed is passed over for a later one."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "prog").write_text("#!/bin/sh\necho first\n")
    (first / "prog").chmod(0o644)
    (second / "prog").write_text('#!/bin/sh\necho second "$@"\n')
    (second / "prog").chmod(0o755)
    done = run_shim([], ["prog", "an argument"], env={"PATH": f"{tmp_path / 'none'}:{first}:{second}/"})
    assert (done.returncode, done.stdout, done.stderr) == (0, "second an argument\n", "")


def test_a_program_that_cannot_be_run_is_126_and_one_that_is_not_there_127(tmp_path: Path) -> None:
    (tmp_path / "prog").write_text("#!/bin/sh\necho no\n")
    (tmp_path / "prog").chmod(0o644)
    denied = run_shim([], ["prog"], env={"PATH": f"{tmp_path / 'none'}:{tmp_path}"})
    assert (denied.returncode, denied.stderr) == (126, "subagent spawn shim: exec: errno 13\n")
    missing = run_shim([], ["prog"], env={"PATH": str(tmp_path / "none")})
    assert (missing.returncode, missing.stderr) == (127, "subagent spawn shim: exec: errno 2\n")
    by_path = run_shim([], [str(tmp_path / "prog")])
    assert (by_path.returncode, by_path.stderr) == (126, "subagent spawn shim: exec: errno 13\n")


def test_without_path_the_default_path_is_searched() -> None:
    done = run_shim([], ["true"], env={})
    assert (done.returncode, done.stderr) == (0, "")


def test_the_program_gets_exactly_the_environment_the_shim_was_given() -> None:
    """Where the locale is C (or none is set) the interpreter's start adds ``LC_CTYPE=C.UTF-8``
    to its own environment: the program must not inherit it (nor lose a variable)."""
    for env in ({}, {"LANG": "C", "PATH": "/usr/bin:/bin", "EMPTY": ""}, {"LC_CTYPE": "C", "X": "a=b"}):
        done = run_shim([], ["/usr/bin/env", "-0"], env=env)
        assert done.returncode == 0, done.stderr
        assert dict(line.split("=", 1) for line in done.stdout.split("\0") if line) == env


def test_a_step_that_fails_ends_the_shim_with_125_before_the_program(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = run_shim([f"procs={tmp_path / 'no-group' / 'cgroup.procs'}"], ["/bin/sh", "-c", f"touch {marker}"])
    assert (done.returncode, done.stdout) == (125, "")
    assert done.stderr == "subagent spawn shim: entering a cgroup: errno 2\n"
    assert not marker.exists()


def test_the_parent_death_signal_step_calls_libc() -> None:
    """A libc call through the shim's own function type: the signal is armed (read back by the
    program the shim became, ``PR_GET_PDEATHSIG``), and a parent already gone ends it at once."""
    read_back = (
        "import ctypes; s = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(s)); print(s.value)"
    )
    done = run_shim([f"pdeathsig={os.getpid()}"], [sys.executable, "-I", "-c", read_back])
    assert (done.returncode, done.stdout) == (0, "9\n"), done.stderr
    unarmed = run_shim([], [sys.executable, "-I", "-c", read_back])
    assert (unarmed.returncode, unarmed.stdout) == (0, "0\n"), unarmed.stderr
    orphan = run_shim(["pdeathsig=1"], ["/bin/sh", "-c", "echo ran"])
    assert (orphan.returncode, orphan.stdout) == (-9, "")
