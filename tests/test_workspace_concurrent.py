"""Runs on one repository at once each get their worktree, over real git.

``git worktree add`` reads every worktree the repository has (their administrative
files); one being added at the same moment may have its folder but not yet its files,
and git (2.39) then dies (``failed to read .git/worktrees/<id>/commondir: Success``):
a run of a batch on one repository failed to start now and then.  The supervisor adds
and removes one repository's worktrees one at a time, in one process and across processes
(a lock file in the repository's git directory): tests hold that with a git earlier on
``PATH`` that notes any two worktree commands at once (and runs the real git), with a
process that waits while the test holds the lock, and by adding and removing many at once
over the real git, in one process and in several.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.process._keeper_main import worktree_lock
from supervisor.workspace._git import Checkout, add_worktree, remove_worktree
from tests.conftest import PYTHON
from tests.support.git import git

pytestmark = pytest.mark.anyio

AT_ONCE = 6
ROUNDS = 2


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("one\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


async def _add_at_once(repo: Path, folder: Path, at_once: int = AT_ONCE) -> list[Checkout]:
    made: list[Checkout] = []

    async def add(n: int) -> None:
        made.append(await add_worktree(repo, "HEAD", folder / f"wt-{n}"))

    async with anyio.create_task_group() as group:  # a git failure fails the test
        for n in range(at_once):
            group.start_soon(add, n)
    return made


async def _remove_at_once(made: list[Checkout]) -> None:
    async with anyio.create_task_group() as group:
        for checkout in made:
            group.start_soon(remove_worktree, checkout)


# While one worktree command runs (and half a second more, so that a second one started at
# the same time is seen however loaded the machine is), another is written down.
STAND_IN = """#!/bin/sh
case " $* " in
  *" worktree "*)
    if mkdir "$STAND_IN_MARK/busy" 2>/dev/null; then
      "$STAND_IN_REAL" "$@"; status=$?
      sleep 0.5; rmdir "$STAND_IN_MARK/busy"; exit $status
    fi
    echo "$*" >> "$STAND_IN_MARK/overlapped";;
esac
exec "$STAND_IN_REAL" "$@"
"""


def stand_in_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put :data:`STAND_IN` first on ``PATH`` (of this process and the ones it starts)."""
    real = shutil.which("git")
    assert real is not None
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "git").write_text(STAND_IN)
    (folder / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STAND_IN_MARK", str(tmp_path))
    monkeypatch.setenv("STAND_IN_REAL", real)


async def test_one_repository_has_one_worktree_command_at_a_time(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_git(tmp_path, monkeypatch)
    made = await _add_at_once(repo, tmp_path / "worktrees", at_once=3)
    await _remove_at_once(made)
    assert not (tmp_path / "overlapped").exists(), (tmp_path / "overlapped").read_text()
    assert len(made) == 3
    assert not any(checkout.path.exists() for checkout in made)


async def test_worktrees_added_and_removed_at_once_on_one_repository_all_succeed(
    repo: Path, tmp_path: Path
) -> None:
    for round_ in range(ROUNDS):
        made = await _add_at_once(repo, tmp_path / str(round_))
        assert len(made) == AT_ONCE
        assert all((checkout.path / "README").is_file() for checkout in made)
        await _remove_at_once(made)
        assert not any(checkout.path.exists() for checkout in made)


# -- across processes ------------------------------------------------------------------------

# A supervisor process of its own: loaded, it says "ready" and waits for its stdin to end
# (so that every one of them starts at the same moment), then adds COUNT worktrees one
# after the other, says "added <path>" for each, and removes them unless KEEP is set.
ADDER = """
import logging, sys
from pathlib import Path

import anyio

from supervisor.workspace import _admin_lock
from supervisor.workspace._git import add_worktree, remove_worktree

logging.basicConfig(stream=sys.stderr, level=logging.DEBUG, format="%(name)s: %(message)s")
_admin_lock.PATIENCE = 3600.0  # waits as long as the test holds the lock

async def main(repo: str, folder: str, count: str, keep: str) -> None:
    print("ready", flush=True)
    sys.stdin.read()
    made = []
    for n in range(int(count)):
        made.append(await add_worktree(Path(repo), "HEAD", Path(folder) / f"wt-{n}"))
        print("added", made[-1].path, flush=True)
    if not keep:
        for checkout in made:
            await remove_worktree(checkout)

anyio.run(main, *sys.argv[1:])
"""


@contextlib.contextmanager
def adders(
    repo: Path, tmp_path: Path, count: int, at_once: int, keep: bool = False
) -> Iterator[list[subprocess.Popen[str]]]:
    """``at_once`` loaded :data:`ADDER` processes, all "ready"; the test ends their stdin."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for n in range(at_once):
            proc = subprocess.Popen(
                [
                    PYTHON,
                    "-c",
                    ADDER,
                    str(repo),
                    str(tmp_path / f"process-{n}"),
                    str(count),
                    "1" if keep else "",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    """Let every adder go at once; (status, stdout, stderr) of each."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()
    done = []
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stderr is not None
        out, err = proc.stdout.read(), proc.stderr.read()
        done.append((proc.wait(timeout=120), out, err))
    return done


def test_processes_take_turns_at_one_repositorys_worktrees(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in_git(tmp_path, monkeypatch)
    with adders(repo, tmp_path, count=2, at_once=3) as procs:
        done = finish(procs)
    assert [status for status, _out, _err in done] == [0, 0, 0], [err[-2000:] for _s, _o, err in done]
    assert not (tmp_path / "overlapped").exists(), (tmp_path / "overlapped").read_text()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_process_waits_while_another_holds_the_repositorys_worktree_lock(
    repo: Path, tmp_path: Path
) -> None:
    """The lock is a file lock in the git directory: the test holds it (as the keeper and the
    sweep take it), and an adder says it waits, adds nothing until the test lets go, then adds."""
    common = git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
    with adders(repo, tmp_path, count=1, at_once=1, keep=True) as [proc]:
        assert proc.stderr is not None
        assert proc.stdout is not None
        with worktree_lock(common):
            assert proc.stdin is not None
            proc.stdin.close()
            for line in proc.stderr:  # the adder's log, until it says it waits (or ends)
                if line.endswith("another process holds it; waiting\n"):
                    break
            else:
                pytest.fail(f"the adder did not wait: {proc.stdout.read()!r}")
            assert line == f"supervisor: worktree lock of {common}: another process holds it; waiting\n"
            assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
        assert proc.stdout.readline() == f"added {tmp_path / 'process-0' / 'wt-0'}\n"
        assert proc.wait(timeout=120) == 0
    assert (tmp_path / "process-0" / "wt-0" / "README").is_file()
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 2


def test_worktrees_added_and_removed_by_several_processes_on_one_repository_all_succeed(
    repo: Path, tmp_path: Path
) -> None:
    with adders(repo, tmp_path, count=4, at_once=4) as procs:
        done = finish(procs)
    assert [status for status, _out, _err in done] == [0] * 4, [err[-2000:] for _s, _o, err in done]
    assert [out.count("added ") for _status, out, _err in done] == [4] * 4
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
