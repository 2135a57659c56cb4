"""A spawn cut off by a cancellation once the child exists: the child still ends up in
hands that wait for its exit.

Left to asyncio, a spawn cancelled while asyncio connects the child's pipes kills the
child and gives up waiting for it: nobody waits for its exit, and the child watcher's
thread that reaps it reports to an event loop the CLI may have closed by then (asyncio's
own "Loop ... that handles pid N is closed" on the CLI's stderr).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskGroup

from machines import TeardownLadder
from supervisor.process import (
    ExitFacts,
    ManagedProcess,
    ProcessTreeContainment,
    SpawnSpec,
    StderrMode,
    child_environment,
)
from supervisor.process._sweep import sweep_once
from tests.conftest import CHILDREN, PYTHON

pytestmark = pytest.mark.anyio


@pytest.fixture
async def task_group() -> AsyncIterator[TaskGroup]:
    async with anyio.create_task_group() as tg:
        yield tg
        tg.cancel_scope.cancel()


def _reaped(pid: int) -> bool:
    """Whether ``pid`` is no longer a child of ours waiting to be reaped (it was reaped)."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


async def test_a_spawn_cancelled_after_the_fork_hands_its_child_over(
    tmp_path: Path, task_group: TaskGroup
) -> None:
    # The sweep at the first spawn hops to a worker thread, so does a cgroup leaf's mkdir:
    # with both out of the way, the spawn's first checkpoint is asyncio's wait for the
    # child's pipes, after the fork.  The scope is cancelled before the spawn begins, so the
    # cancellation lands there, every time.
    await sweep_once()
    tag = os.urandom(8).hex()
    spec = SpawnSpec(
        argv=[PYTHON, str(CHILDREN / "behave.py"), "ignore-eof"],  # slow to go: only SIGTERM ends it
        cwd=tmp_path,
        env=child_environment({}, run_tag=tag),
        run_tag=tag,
        stderr=StderrMode.DISCARD,
        containment=ProcessTreeContainment(),
    )
    proc: ManagedProcess | None = None
    with anyio.CancelScope() as scope:
        scope.cancel()
        proc = await ManagedProcess.spawn(spec, task_group)
    assert proc is not None, "the cancelled spawn dropped its child: nobody waits for its exit"
    report = await proc.teardown(TeardownLadder(), eof_grace=0.0, term_grace=30.0)
    assert report.quiescent
    assert report.exit == ExitFacts(None, "SIGTERM")  # the teardown's own signal: the child was running
    assert _reaped(proc.pid)
