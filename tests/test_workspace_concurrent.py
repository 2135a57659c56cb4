"""Runs on one repository at once each get their worktree, over real git.

``git worktree add`` reads every worktree the repository has (their administrative
files); one being added at the same moment may have its folder but not yet its files,
and git (2.39) then dies (``failed to read .git/worktrees/<id>/commondir: Success``):
a run of a batch on one repository failed to start now and then.  The supervisor adds
and removes one repository's worktrees one at a time: the first test holds that with a git
earlier on ``PATH`` that notes any two worktree commands at once (and runs the real git),
the second adds and removes many at once over the real git.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest

from supervisor.workspace._git import Checkout, add_worktree, remove_worktree
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


async def test_one_repository_has_one_worktree_command_at_a_time(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.which("git")
    assert real is not None
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "git").write_text(STAND_IN)
    (folder / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STAND_IN_MARK", str(tmp_path))
    monkeypatch.setenv("STAND_IN_REAL", real)
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
