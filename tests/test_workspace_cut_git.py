"""A git command cut off by a cancellation: the child is killed and waited for before the
cancellation goes on, whether it came while git was being spawned or while it ran.

Left to asyncio, a spawn cancelled while asyncio connects the child's pipes kills the child
and gives up waiting for it: nobody waits for its exit, and the child watcher that reaps it
reports to an event loop the CLI may have closed by then (asyncio's own "Loop ... that
handles pid N is closed" on the CLI's stderr).  The git here is a stand-in earlier on
``PATH`` that never ends by itself (git is not the supervisor's own OS work; the spawn and
the wait are real).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import anyio
import anyio.lowlevel
import psutil
import pytest

from supervisor.workspace._git import git
from tests.support.pidfd import reaped

pytestmark = pytest.mark.anyio


@pytest.fixture
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``git`` that says it started (on the FIFO returned) and then sleeps."""
    folder = tmp_path / "bin"
    folder.mkdir()
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    stand_in = folder / "git"
    stand_in.write_text(f"#!/bin/sh\necho up > {fifo}\nexec sleep 600\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return fifo


def _children() -> set[int]:
    return {child.pid for child in psutil.Process().children()}


def _release(fifo: Path) -> None:
    """Let a reader still waiting on ``fifo`` go (when git never got to write to it)."""
    with contextlib.suppress(OSError):  # ENXIO: nobody is reading
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


async def _cancel_at_the_fork(cwd: Path) -> int:
    """Run git in a scope cancelled as soon as git's process exists; git's pid."""
    before = _children()
    spawned: list[int] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:

            async def cancel_at_the_fork() -> None:
                # no event says "forked": look at every turn of the loop (no timeout)
                while not (new := _children() - before):
                    await anyio.lowlevel.checkpoint()
                spawned.extend(new)
                scope.cancel()

            group.start_soon(cancel_at_the_fork)
            await git(cwd, "status")
    assert scope.cancelled_caught
    assert len(spawned) == 1
    return spawned[0]


async def test_a_git_cancelled_while_it_is_spawned_is_killed_and_waited_for(
    tmp_path: Path, started: Path
) -> None:
    # asyncio connects a new child's pipes over several turns of the event loop, after the
    # fork; a task that looks for the child at every turn sees it during those turns and
    # cancels there: the cancellation lands inside the spawn, every time.  Whether a child
    # nobody waits for is already reaped by asyncio's watcher when the check below looks is
    # up to the kernel: a few rounds make the check see it.
    for _ in range(5):
        pid = await _cancel_at_the_fork(tmp_path)
        assert reaped(pid), "the cancelled git was left for nobody to wait for"


async def test_a_git_cancelled_while_it_runs_is_killed_and_waited_for(tmp_path: Path, started: Path) -> None:
    before = _children()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:

            async def cancel_once_it_runs() -> None:
                await anyio.to_thread.run_sync(started.read_text)  # until the stand-in writes
                scope.cancel()

            group.start_soon(cancel_once_it_runs)
            try:
                await git(tmp_path, "status")
            finally:
                _release(started)
    assert scope.cancelled_caught
    assert _children() <= before, "the cancelled git is still running or unreaped"
