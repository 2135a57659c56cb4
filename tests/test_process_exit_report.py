"""The teardown looks at the tree on the kernel's word that the child exited, not on asyncio's.

asyncio learns of a child's exit from a watcher (a thread per child on Python 3.11) and
reports it through the event loop: on a loaded loop that report comes long after the exit.
The teardown starts its look at the rest of the tree once the child's pidfd says it exited,
and takes the exit status from asyncio's report after that look.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from anyio.abc import TaskGroup

from supervisor.process import Containment, ExitFacts, ManagedProcess, TeardownReport
from tests.test_process import ready_pids, spec_for, tear_down

pytestmark = pytest.mark.anyio


async def test_the_look_at_the_tree_does_not_wait_for_asyncios_exit_report(
    tmp_path: Path, task_group: TaskGroup, containment: Containment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio's exit report is held back until the teardown looks at the tree: the child
    obeys EOF, so the first rung ends it, with its exit status, and no grace runs out."""
    loop_class: Any = type(asyncio.get_running_loop())
    deliver = loop_class._child_watcher_callback
    held: list[tuple[Any, ...]] = []
    looked = False

    def hold(loop: Any, *report: Any) -> None:
        if looked:
            deliver(loop, *report)
        else:
            held.append((loop, *report))

    def release() -> None:
        nonlocal looked
        looked = True
        while held:
            deliver(*held.pop(0))

    monkeypatch.setattr(loop_class, "_child_watcher_callback", hold)
    proc = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), task_group)
    await ready_pids(proc)
    enclosure = proc._enclosure
    wait_empty = enclosure.wait_empty

    async def looking(*args: Any, **kwargs: Any) -> None:
        release()  # the look has begun: now asyncio may report
        await wait_empty(*args, **kwargs)

    monkeypatch.setattr(enclosure, "wait_empty", looking)
    try:
        # a grace no loaded machine runs out: held back until the look, asyncio's report could
        # only come once it had (the rung would then be past eof-wait)
        report, trail = await tear_down(proc, eof=60.0, term=0.5, kill_wait=0.5)
    finally:
        release()
    assert report == TeardownReport(
        quiescent=True, rung="eof-wait", exit=ExitFacts(0, None), containment=containment.mode
    )
    assert [(e.event, e.target) for e in trail.entries] == [
        ("stdin_closed", "eof-wait"),
        ("tree_exited", "gone"),
    ]


async def test_a_cgroup_leaf_is_removed_off_the_event_loop(
    tmp_path: Path, task_group: TaskGroup, containment: Containment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removing a group waits for the kernel's cgroup mutex (other removals, migrations in
    flight): the teardown does it in a worker thread, so no other run's loop work waits."""
    if containment.mode != "cgroup":
        pytest.skip("cgroups only")
    proc = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), task_group)
    await ready_pids(proc)
    enclosure: Any = proc._enclosure
    release = enclosure.release
    threads: list[threading.Thread] = []

    def releasing() -> None:
        threads.append(threading.current_thread())
        release()

    monkeypatch.setattr(enclosure, "release", releasing)
    report, _ = await tear_down(proc)
    assert report.quiescent
    assert threads
    assert threading.main_thread() not in threads
    assert not enclosure.leaf.exists()
