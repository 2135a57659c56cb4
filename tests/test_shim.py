"""The spawn shim run by itself, as the supervisor runs it (``SHIM STEP... -- PROGRAM``): the
compiled one (``_shim.c``) and the Python one (``python -I -S _shim.py``), each test of both.

What a root child or a confined child gets from it is tested through real spawns in
``test_confine.py``; here: what the Python one costs to start (the modules it imports), how
both find the program (``execvp``'s rules, which both keep), how they fail (status 125 and
one line naming the step and the errno; 126 and 127 for the program), and what the program
gets (the environment as given, the signals at their default).  The compiled shim's cache is
``test_cshim.py``'s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from supervisor.process._confine import is_root, landlock_support, shim_command
from supervisor.process._cshim import FORCE_VARIABLE
from tests.support.shims import either_shim

__all__ = ["either_shim"]  # the fixture, used by name

# What ``python -I -S`` imports before any program of its own, on the interpreters supported.
_STARTUP = {"_io", "marshal", "posix", "_frozen_importlib_external", "time", "zipimport", "_codecs", "codecs"}
_STARTUP |= {"encodings", "encodings.aliases", "encodings.utf_8", "_signal", "_abc", "abc", "io"}
SYSTEM_PYTHON = Path("/usr/bin/python3.11")
ROOT = os.geteuid() == 0
needs_landlock = pytest.mark.skipif(
    not landlock_support().enforceable, reason=f"no Landlock here: {landlock_support().reason}"
)


def run_shim(
    steps: list[str],
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    command: list[str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command or shim_command(steps, argv),
        env=env if env is not None else {},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        preexec_fn=preexec_fn,
    )


def test_the_python_shim_imports_neither_os_nor_ctypes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``os`` and ``ctypes`` are pure-Python layers over ``posix`` and ``_ctypes`` that cost a
    spawn ~5 ms of CPU together: the shim imports built-in modules and ``_ctypes`` only."""
    monkeypatch.setenv(FORCE_VARIABLE, "python")
    command = shim_command([], ["/bin/true"])
    command.insert(1, "-Ximporttime")
    done = subprocess.run(command, env={}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    imported = {
        line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
    }
    imported.discard("imported package")
    assert imported - _STARTUP <= {"_ctypes"}, sorted(imported - _STARTUP)


def test_a_name_without_a_slash_is_found_along_path(either_shim: str, tmp_path: Path) -> None:
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


def test_a_program_that_cannot_be_run_is_126_and_one_that_is_not_there_127(
    either_shim: str, tmp_path: Path
) -> None:
    (tmp_path / "prog").write_text("#!/bin/sh\necho no\n")
    (tmp_path / "prog").chmod(0o644)
    denied = run_shim([], ["prog"], env={"PATH": f"{tmp_path / 'none'}:{tmp_path}"})
    assert (denied.returncode, denied.stderr) == (126, "subagent spawn shim: exec: errno 13\n")
    missing = run_shim([], ["prog"], env={"PATH": str(tmp_path / "none")})
    assert (missing.returncode, missing.stderr) == (127, "subagent spawn shim: exec: errno 2\n")
    by_path = run_shim([], [str(tmp_path / "prog")])
    assert (by_path.returncode, by_path.stderr) == (126, "subagent spawn shim: exec: errno 13\n")
    # only "not a directory" along the way: the last error is the one reported
    not_a_folder = run_shim([], ["prog"], env={"PATH": f"{tmp_path / 'prog'}:{tmp_path / 'prog'}"})
    assert (not_a_folder.returncode, not_a_folder.stderr) == (126, "subagent spawn shim: exec: errno 20\n")


def test_an_empty_path_entry_is_the_working_directory(either_shim: str, tmp_path: Path) -> None:
    (tmp_path / "prog").write_text("#!/bin/sh\necho here\n")
    (tmp_path / "prog").chmod(0o755)
    for path in ("", f"{tmp_path / 'none'}:"):
        done = run_shim([], ["prog"], env={"PATH": path}, cwd=tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (0, "here\n", ""), path


def test_without_path_the_default_path_is_searched(either_shim: str) -> None:
    done = run_shim([], ["true"], env={})
    assert (done.returncode, done.stderr) == (0, "")


def test_the_program_gets_exactly_the_environment_the_shim_was_given(either_shim: str) -> None:
    """Where the locale is C (or none is set) the interpreter's start adds ``LC_CTYPE=C.UTF-8``
    to its own environment: the program must not inherit it (nor lose a variable)."""
    for env in ({}, {"LANG": "C", "PATH": "/usr/bin:/bin", "EMPTY": ""}, {"LC_CTYPE": "C", "X": "a=b"}):
        done = run_shim([], ["/usr/bin/env", "-0"], env=env)
        assert done.returncode == 0, done.stderr
        assert dict(line.split("=", 1) for line in done.stdout.split("\0") if line) == env


def test_a_step_that_fails_ends_the_shim_with_125_before_the_program(
    either_shim: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    done = run_shim([f"procs={tmp_path / 'no-group' / 'cgroup.procs'}"], ["/bin/sh", "-c", f"touch {marker}"])
    assert (done.returncode, done.stdout) == (125, "")
    assert done.stderr == "subagent spawn shim: entering a cgroup: errno 2\n"
    assert not marker.exists()


def test_the_parent_death_signal_step_calls_libc(either_shim: str) -> None:
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


def test_the_program_gets_sigpipe_and_sigxfsz_at_their_default(either_shim: str) -> None:
    """The interpreter's start ignores both, and an ignored signal stays ignored across
    ``execve``: a program (a shell's ``yes | head``) would see EPIPE instead of dying."""
    read = ["/bin/sh", "-c", "grep SigIgn /proc/self/status"]
    direct = subprocess.run(read, env={}, capture_output=True, text=True, timeout=60, check=True)
    done = run_shim([], read)
    assert (done.returncode, done.stdout, done.stderr) == (0, direct.stdout, "")


def test_a_command_line_the_supervisor_never_builds_is_125(either_shim: str) -> None:
    malformed = "subagent spawn shim: a malformed step: errno 22\n"
    for steps, argv in (
        (["pdeathsig=1"], []),  # no program after "--"
        (["ns=cgroup,bogus"], ["/bin/true"]),
        (["ns="], ["/bin/true"]),
        (["view=cgroup2"], ["/bin/true"]),
        (["drop=1,x"], ["/bin/true"]),
        (["pdeathsig=me"], ["/bin/true"]),
    ):
        done = run_shim(steps, argv)
        assert (done.returncode, done.stdout, done.stderr) == (125, "", malformed), steps
    no_separator = shim_command([], ["/bin/true"])
    no_separator.remove("--")
    done = run_shim([], [], command=no_separator)
    assert (done.returncode, done.stderr) == (125, malformed)


@pytest.mark.skipif(not is_root(), reason="a root supervisor (the mount namespace's steps)")
def test_a_view_step_that_fails_names_its_kind(either_shim: str, tmp_path: Path) -> None:
    """In a private mount namespace of the shim's own (nothing reaches the machine's mounts)."""
    point = tmp_path / "point"
    point.mkdir()
    done = run_shim(["ns=mount", f"view=hide::{point}"], ["/bin/true"])
    assert (done.returncode, done.stderr) == (
        125,
        "subagent spawn shim: unmounting the host's hide mount: errno 22\n",
    )
    done = run_shim(["ns=mount", f"shm={point}", f"view=nosuchfs::{point}"], ["/bin/true"])
    assert (done.returncode, done.stderr) == (
        125,
        "subagent spawn shim: mounting the nosuchfs view: errno 19\n",
    )


@pytest.fixture
def unprivileged(either_shim: str) -> Iterator[tuple[list[str], Callable[[], None] | None]]:
    """The shim's command as a user without capabilities can run it (uid 65534 where the tests
    run as root: the compiled shim copied out of root's cache, the Python one run by the
    system's interpreter), and how to become that user."""
    if not ROOT:
        yield shim_command([], []), None
        return
    folder = Path(tempfile.mkdtemp(prefix="subagent-shim-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        command = shim_command([], [])
        if either_shim == "compiled":
            copy = folder / "shim"
            shutil.copy2(command[0], copy)
            copy.chmod(0o755)
            command[0] = str(copy)
        elif SYSTEM_PYTHON.exists():
            command[0] = str(SYSTEM_PYTHON)
        else:
            pytest.skip("needs a system python3.11 (uid 65534 cannot reach this interpreter)")
        yield command, _as_nobody
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def test_steps_without_the_capability_fail_with_eperm(
    unprivileged: tuple[list[str], Callable[[], None] | None], tmp_path: Path
) -> None:
    shim, become = unprivileged
    separator = shim.index("--")
    for step, line in (
        ("ns=cgroup,mount", "unshare: errno 1"),
        ("ro=/usr", "binding a read-only path: errno 1"),
        ("shm=/tmp", "mounting a private tmpfs: errno 1"),
        ("drop=21", "dropping a capability: errno 1"),
        ("view=hide::/proc", "unmounting the host's hide mount: errno 1"),
    ):
        command = [*shim[:separator], step, "--", "/bin/true"]
        done = run_shim([], [], command=command, preexec_fn=become, cwd=Path("/"))
        assert (done.returncode, done.stdout, done.stderr) == (125, "", f"subagent spawn shim: {line}\n"), (
            step
        )


def test_a_path_that_is_not_there_is_skipped_by_ro_and_shm(either_shim: str, tmp_path: Path) -> None:
    """Nothing is mounted (not even as root): the program runs."""
    absent = tmp_path / "absent"
    (tmp_path / "file").write_text("")
    done = run_shim([f"ro={absent}", f"shm={absent}", f"shm={tmp_path / 'file'}"], ["/bin/true"])
    assert (done.returncode, done.stderr) == (0, "")


@needs_landlock
def test_landlock_steps_restrict_the_program_and_fail_with_one_line(either_shim: str, tmp_path: Path) -> None:
    """Writing and making files is handled (2 | 256) and granted nowhere but ``tmp_path/open`` (a
    rule for a path that is not there is skipped); with the signal scope (2, a 24-byte ruleset)
    and without (the 8-byte one an older kernel takes)."""
    (tmp_path / "open").mkdir()
    (tmp_path / "shut").mkdir()
    script = "echo a > open/f && (echo b > shut/f || echo denied) && grep NoNewPrivs /proc/self/status"
    for handled in ("258:0", "258:2", "258:"):
        steps = [f"landlock={handled}", f"rule=258:{tmp_path / 'absent'}", f"rule=258:{tmp_path / 'open'}"]
        done = run_shim(steps, ["/bin/sh", "-c", script], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["denied", "NoNewPrivs:\t1"], handled
        assert "Permission denied" in done.stderr
        assert not (tmp_path / "shut" / "f").exists()
    nothing = run_shim(["landlock=0:0"], ["/bin/true"])  # a ruleset that handles nothing: ENOMSG
    assert (nothing.returncode, nothing.stderr) == (125, "subagent spawn shim: landlock ruleset: errno 42\n")
    unhandled = run_shim(["landlock=2:0", "rule=4:/"], ["/bin/true"])  # a right the ruleset does not handle
    assert (unhandled.returncode, unhandled.stderr) == (125, "subagent spawn shim: landlock rule: errno 22\n")
