"""A spawn cut off by a cancellation: once the child exists, it still ends up in hands
that wait for its exit; before, nothing of the run (its cgroup leaf) is left behind.

Left to asyncio, a spawn cancelled while asyncio connects the child's pipes kills the
child and gives up waiting for it: nobody waits for its exit, and the child watcher's
thread that reaps it reports to an event loop the CLI may have closed by then (asyncio's
own "Loop ... that handles pid N is closed" on the CLI's stderr).
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskGroup

from machines import TeardownLadder
from supervisor.process import (
    NO_LIMITS,
    Containment,
    ContainmentMode,
    Enclosure,
    ExitFacts,
    Limits,
    ManagedProcess,
    ProcessTreeContainment,
    SpawnSpec,
    StderrMode,
    _sweep,
    child_environment,
    containment_for,
)
from supervisor.process._cshim import prepare_shim
from supervisor.process._sweep import sweep_once
from tests.conftest import CGROUP_AVAILABLE, CHILDREN, PYTHON, clean_up_cgroups, run_cgroups
from tests.support.pidfd import reaped

pytestmark = pytest.mark.anyio


def _spec(cwd: Path, containment: Containment) -> SpawnSpec:
    tag = os.urandom(8).hex()
    return SpawnSpec(
        argv=[PYTHON, str(CHILDREN / "behave.py"), "ignore-eof"],  # slow to go: only SIGTERM ends it
        cwd=cwd,
        env=child_environment({}, run_tag=tag),
        run_tag=tag,
        stderr=StderrMode.DISCARD,
        containment=containment,
    )


async def test_a_spawn_cancelled_after_the_fork_hands_its_child_over(
    tmp_path: Path, task_group: TaskGroup
) -> None:
    # The sweep at the first spawn hops to a worker thread, so do the first shimmed spawn's
    # look at the compiled shim and a cgroup leaf's mkdir: with them out of the way, the
    # spawn's first checkpoint is asyncio's wait for the child's pipes, after the fork.  The
    # scope is cancelled before the spawn begins, so the cancellation lands there, every time.
    await sweep_once()
    await prepare_shim()
    spec = _spec(tmp_path, ProcessTreeContainment())
    proc: ManagedProcess | None = None
    with anyio.CancelScope() as scope:
        scope.cancel()
        proc = await ManagedProcess.spawn(spec, task_group)
    assert proc is not None, "the cancelled spawn dropped its child: nobody waits for its exit"
    report = await proc.teardown(TeardownLadder(), eof_grace=0.0, term_grace=30.0)
    assert report.quiescent
    assert report.exit == ExitFacts(None, "SIGTERM")  # the teardown's own signal: the child was running
    assert reaped(proc.pid)


class _CancelledWhileEnclosing:
    """The real cgroup containment; its caller's scope is cancelled while the leaf is made
    (from the worker thread the spawn makes it in), as a Ctrl-C landing then would."""

    def __init__(self, inner: Containment, scope: anyio.CancelScope) -> None:
        self.inner = inner
        self.scope = scope
        self.mode = inner.mode

    def enclose(self, run_tag: str, limits: Limits = NO_LIMITS) -> Enclosure:
        enclosure = self.inner.enclose(run_tag, limits)
        anyio.from_thread.run_sync(self.scope.cancel)
        return enclosure


@pytest.mark.skipif(not CGROUP_AVAILABLE, reason="no writable cgroup v2 hierarchy here")
async def test_a_spawn_cancelled_while_its_leaf_is_made_leaves_no_leaf(
    tmp_path: Path, task_group: TaskGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the host's first spawn: the sweep of what dead hosts left still has its hop to make
    monkeypatch.setattr(_sweep._Once, "done", False)
    before = run_cgroups()
    proc: ManagedProcess | None = None
    with anyio.CancelScope() as scope:
        containment = _CancelledWhileEnclosing(containment_for(ContainmentMode.CGROUP), scope)
        spec = _spec(tmp_path, containment)
        proc = await ManagedProcess.spawn(spec, task_group)
    try:
        if proc is not None:  # it got as far as the child: the caller's teardown takes it down
            report = await proc.teardown(TeardownLadder(), eof_grace=0.0, term_grace=30.0)
            assert report.quiescent
        assert run_cgroups() == before
    finally:  # what a spawn that dropped its leaf left: the groups below it first
        left = [leaf for leaf in run_cgroups() if leaf not in before]
        clean_up_cgroups([Path(d) for leaf in left for d, _, _ in os.walk(leaf, topdown=False)])
