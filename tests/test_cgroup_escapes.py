"""Processes that left a cgroup-mode run's leaf, where the kernel lets them (no ``nsdelegate``).

With the child subreaper on, the run looks for them below this process (the run's tree, and
the orphans the kernel handed to us); without it, in every process's cgroup namespace (the
census). Either way they are ended with the run, and a run whose tree is gone with nothing
left below us looks at nothing else. The test itself moves a process of the run out of its
leaf (a root child cannot: its own group is the root of every cgroup mount it sees).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from anyio.abc import TaskGroup

from supervisor.process import ContainmentMode, ManagedProcess, SpawnSpec, containment_for, subreaper_enabled
from supervisor.process._cgroup import CgroupContainment
from supervisor.process._escapes import CENSUS, escape_possible, namespace_prefix
from tests.conftest import CGROUP_AVAILABLE
from tests.test_containment import kill
from tests.test_process import alive, ready_pids, spec_for, subreaper_off, tear_down

__all__ = ["subreaper_off"]  # a fixture, imported for use here

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not CGROUP_AVAILABLE or os.geteuid() != 0 or not escape_possible() or not namespace_prefix(),
        reason="the escape watch: cgroup mode as root, a namespace per run, no nsdelegate",
    ),
]


@pytest.fixture
def containment() -> CgroupContainment:
    found = containment_for(ContainmentMode.CGROUP)
    assert isinstance(found, CgroupContainment)
    return found


@pytest.fixture
def outside(containment: CgroupContainment) -> Iterator[Path]:
    """A group of the test's own beside the host groups, removed afterwards with whatever is in it."""
    group = containment.base / f"test-outside-{os.getpid()}"
    group.mkdir()
    try:
        yield group
    finally:
        with contextlib.suppress(OSError):
            (group / "cgroup.kill").write_text("1")
        for _ in range(1000):
            try:
                group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:  # members still exiting
                os.sched_yield()


def moved_out(pid: int, outside: Path) -> None:
    (outside / "cgroup.procs").write_text(str(pid))
    assert str(pid) in (outside / "cgroup.procs").read_text().split()


def our_zombie(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False


async def test_a_run_whose_tree_is_gone_with_nothing_below_us_reads_no_census(
    tmp_path: Path, task_group: TaskGroup, containment: CgroupContainment
) -> None:
    proc = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), task_group)
    assert subreaper_enabled()  # turned on by a cgroup run that needs the watch
    await ready_pids(proc)
    reads = CENSUS.reads
    report, _ = await tear_down(proc)
    assert report.quiescent
    assert CENSUS.reads == reads


async def test_an_adopted_process_moved_out_of_its_leaf_is_ended_and_reaped(
    tmp_path: Path, task_group: TaskGroup, containment: CgroupContainment, outside: Path
) -> None:
    """A daemon of the run (re-parented to us) is moved out of the leaf: the run finds it below
    us, ends it, and reaps its zombie; no census of the machine's processes is read."""
    proc = await ManagedProcess.spawn(spec_for("daemon", cwd=tmp_path, containment=containment), task_group)
    (daemon,) = await ready_pids(proc)
    try:
        moved_out(daemon, outside)
        reads = CENSUS.reads
        report, _ = await tear_down(proc, eof=0.2, term=5.0)
        assert report.quiescent
        assert not alive(daemon)
        assert not our_zombie(daemon)
        assert CENSUS.reads == reads
    finally:
        kill(daemon)


async def test_a_grandchild_moved_out_while_the_child_lives_is_ended(
    tmp_path: Path, task_group: TaskGroup, containment: CgroupContainment, outside: Path
) -> None:
    """The child ignores EOF, its child (ignoring SIGTERM too) is moved out of the leaf: the
    rungs reach it below the live child, and the run is quiescent once it is gone."""
    spec = spec_for("trap-term-tree", cwd=tmp_path, containment=containment)
    proc = await ManagedProcess.spawn(spec, task_group)
    (sleeper,) = await ready_pids(proc)
    try:
        moved_out(sleeper, outside)
        report, _ = await tear_down(proc, eof=0.2, term=0.2)
        assert report.quiescent
        assert report.rung == "kill-wait"  # the sleeper ignores SIGTERM
        assert not alive(sleeper)
    finally:
        kill(sleeper)


@pytest.mark.usefixtures("subreaper_off")
async def test_without_the_subreaper_the_census_finds_a_process_moved_out(
    tmp_path: Path, task_group: TaskGroup, containment: CgroupContainment, outside: Path
) -> None:
    """Re-parented to PID 1, the daemon is not below us: the census of cgroup namespaces finds it."""
    spec = spec_for("daemon", cwd=tmp_path, containment=containment)
    spec = SpawnSpec(**{**spec.__dict__, "subreaper": False})
    proc = await ManagedProcess.spawn(spec, task_group)
    assert not subreaper_enabled()
    (daemon,) = await ready_pids(proc)
    try:
        moved_out(daemon, outside)
        reads = CENSUS.reads
        report, _ = await tear_down(proc, eof=0.2, term=5.0)
        assert report.quiescent
        assert not alive(daemon)
        assert CENSUS.reads > reads
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon, signal.SIGKILL)
