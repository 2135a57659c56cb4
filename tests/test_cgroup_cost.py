"""What a cgroup-mode run does to the kernel, kept to what it needs: the v1 out-of-memory watch
armed once (on the group a root child sees as its own), no watch on ``cgroup.events`` when the
leaf is already empty, and a run's groups removed without a walk when nothing else is below them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from anyio.abc import TaskGroup

from supervisor.process import ContainmentMode, ManagedProcess, containment_for, set_subreaper
from supervisor.process._cgroup import AGENT_GROUP, CgroupContainment
from supervisor.process._inotify import watch_file
from supervisor.process._keeper import keeper_pid
from supervisor.process._limit_files import read_file, read_text, remove_group
from supervisor.process._limit_values import MEMORY
from supervisor.process._oom_watch import arm_oom_watch
from tests.conftest import CGROUP_AVAILABLE
from tests.test_process import ready_pids, spec_for, tear_down

needs_cgroups = pytest.mark.skipif(not CGROUP_AVAILABLE, reason="no writable cgroup v2 hierarchy here")


@pytest.fixture
def containment() -> CgroupContainment:
    found = containment_for(ContainmentMode.CGROUP)
    assert isinstance(found, CgroupContainment)
    return found


@needs_cgroups
def test_the_v1_out_of_memory_watch_is_armed_once_where_it_listens(
    containment: CgroupContainment, monkeypatch: pytest.MonkeyPatch
) -> None:
    hierarchy = containment.support.where.get(MEMORY)
    if hierarchy is None or hierarchy.version != 1:
        pytest.skip("the memory controller is not on a cgroup v1 hierarchy here")
    armed: list[Path] = []

    def arming(group: Path) -> Any:
        armed.append(group)
        return arm_oom_watch(group)

    monkeypatch.setattr("supervisor.process._limits.arm_oom_watch", arming)
    enclosure = containment.enclose(f"cost-{os.getpid()}")
    try:
        leaf = enclosure.cgroups.leaves[MEMORY]
        assert armed == [leaf / AGENT_GROUP if os.geteuid() == 0 else leaf]
        assert enclosure.cgroups.watching
    finally:
        enclosure.release()
    assert not enclosure.leaf.exists()
    assert not leaf.exists()


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files the teardown watched (``cgroup.events`` of a leaf still populated)."""
    paths: list[Path] = []

    def watching(path: Path) -> Any:
        paths.append(path)
        return watch_file(path)

    monkeypatch.setattr("supervisor.process._cgroup.watch_file", watching)
    return paths


@needs_cgroups
@pytest.mark.anyio
async def test_an_empty_leaf_is_not_watched_before_it_is_called_gone(
    tmp_path: Path, task_group: TaskGroup, containment: CgroupContainment, watched: list[Path]
) -> None:
    """The teardown waits for the child's exit (its pidfd), then for the leaf: the kernel counts
    an exiting task out of its cgroup before it wakes the task's pidfd, so the leaf whose only
    member was the child is empty by then and needs no watch."""
    proc = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), task_group)
    await ready_pids(proc)
    report, _ = await tear_down(proc)
    assert report.quiescent
    assert watched == []


@needs_cgroups
@pytest.mark.anyio
async def test_a_leaf_still_populated_is_watched_until_it_empties(
    tmp_path: Path, task_group: TaskGroup, containment: CgroupContainment, watched: list[Path]
) -> None:
    proc = await ManagedProcess.spawn(spec_for("daemon", cwd=tmp_path, containment=containment), task_group)
    await ready_pids(proc)
    report, _ = await tear_down(proc, eof=0.2, term=5.0)  # the daemon ignores EOF: it needs SIGTERM
    assert report.quiescent
    assert watched
    assert all(path.name == "cgroup.events" for path in watched)


@needs_cgroups
def test_a_group_is_removed_with_the_one_below_it_and_refused_with_more(
    containment: CgroupContainment,
) -> None:
    group = containment.host_group / f"run-cost-{os.getpid()}"
    (group / AGENT_GROUP).mkdir(parents=True)
    assert remove_group(group, AGENT_GROUP)
    assert not group.exists()
    assert remove_group(group, AGENT_GROUP)  # already gone: gone
    (group / AGENT_GROUP / "nested").mkdir(parents=True)
    (group / "beside").mkdir()
    try:
        assert not remove_group(group, AGENT_GROUP)  # a walk's work: nothing is lost meanwhile
        assert (group / AGENT_GROUP / "nested").is_dir()
        assert (group / "beside").is_dir()
    finally:
        for path in (group / AGENT_GROUP / "nested", group / AGENT_GROUP, group / "beside", group):
            path.rmdir()


def test_a_file_is_read_whole_and_its_odd_bytes_replaced(tmp_path: Path) -> None:
    """cgroup and ``/proc`` files are read unbuffered into bytes: past one read's 64 KiB too
    (a machine's mount table can be longer), and a byte that is no UTF-8 never raises."""
    path = tmp_path / "long"
    path.write_bytes(b"x" * 200_000 + b"\xff\n")
    assert read_text(path) == "x" * 200_000 + "\ufffd\n"
    assert read_file(tmp_path / "missing") is None
    assert read_text(Path("/proc/self/mountinfo")) == Path("/proc/self/mountinfo").read_text()


@needs_cgroups
@pytest.mark.anyio
async def test_the_release_never_asks_whether_the_keeper_is_a_member(
    tmp_path: Path, task_group: TaskGroup, containment: CgroupContainment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the subreaper on, the release reaps its members' zombies among our children; the
    keeper is our child too, and never a member: its cgroup file is not read."""
    proc = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), task_group)
    await ready_pids(proc)
    set_subreaper(True)
    enclosure: Any = proc._enclosure
    holds = enclosure._holds
    asked: list[int] = []

    def holding(pid: int) -> bool:
        asked.append(pid)
        return bool(holds(pid))

    monkeypatch.setattr(enclosure, "_holds", holding)
    report, _ = await tear_down(proc)
    assert report.quiescent
    assert keeper_pid() is not None
    assert keeper_pid() not in asked


@needs_cgroups
def test_the_shim_enters_each_group_by_its_procs_file(containment: CgroupContainment) -> None:
    enclosure = containment.enclose(f"steps-{os.getpid()}")
    try:
        steps = enclosure.shim_steps()
        procs = [step.removeprefix("procs=") for step in steps if step.startswith("procs=")]
        assert procs == [str(group / "cgroup.procs") for group in enclosure.entered]
        assert all(Path(path).is_file() for path in procs)
    finally:
        enclosure.release()
