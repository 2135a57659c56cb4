"""Containment against children that try to escape, in both modes, over real processes.

Where the process-tree fallback genuinely cannot contain a case, the test pins the
honest outcome (no false ``quiescent``, nothing foreign signalled) instead of skipping;
the README's "Containment" section lists those cases.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest
from anyio.abc import TaskGroup

from supervisor.process import (
    Containment,
    ManagedProcess,
    ProcessTreeContainment,
    detect_containment,
    host_group_name,
    parse_host_group,
    set_subreaper,
)
from supervisor.process._escapes import kernel_keeps_namespaces_in, namespace_prefix
from tests.conftest import CHILDREN, PYTHON, tagged
from tests.test_process import alive, ready_pids, spec_for, subreaper_off, tear_down

pytestmark = pytest.mark.anyio
__all__ = ["subreaper_off"]  # a fixture, imported for use here

BEHAVE = str(CHILDREN / "behave.py")


def kill(pid: int) -> None:
    """Clean up a process the leak guard cannot see (no tag, not our descendant)."""
    try:
        proc = psutil.Process(pid)
        proc.kill()
        proc.wait(5)
    except psutil.Error:
        pass
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def fallback(containment: Containment) -> bool:
    return isinstance(containment, ProcessTreeContainment)


async def test_env_cleared_setsid_daemon(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for("env-cleared-daemon", cwd=tmp_path, containment=containment), task_group
    )
    (daemon,) = await ready_pids(proc)
    try:
        report, _ = await tear_down(proc, eof=0.2, term=0.2, kill_wait=0.5)
        if fallback(containment):
            # No tag, no group, no ancestry left: the fallback cannot prove it is the
            # run's, so it neither signals it nor claims quiescence while it lives.
            assert not report.quiescent
            assert daemon in report.survivors
            assert alive(daemon)
        else:
            assert report.quiescent
            assert not alive(daemon)
    finally:
        kill(daemon)


async def test_env_cleared_grandchild_in_the_dead_childs_group(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    spec = spec_for("env-cleared-grandchild", cwd=tmp_path, containment=containment)
    proc = await ManagedProcess.spawn(spec, task_group)
    (grandchild,) = await ready_pids(proc)
    try:
        proc.close_stdin()
        await proc.wait_exit()  # the child is gone first; the grandchild stays in its group
        report, _ = await tear_down(proc, eof=0.2, term=1.0)
        assert report.quiescent
        assert not alive(grandchild)
    finally:
        kill(grandchild)


@pytest.mark.parametrize("escapee", ["daemon", "env-cleared-daemon"])
async def test_two_runs_each_claim_only_their_own(
    tmp_path: Path, task_group: TaskGroup, containment: Containment, escapee: str
) -> None:
    quiet = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), task_group)
    await ready_pids(quiet)
    noisy = await ManagedProcess.spawn(spec_for(escapee, cwd=tmp_path, containment=containment), task_group)
    (daemon,) = await ready_pids(noisy)
    try:
        honest_only = fallback(containment) and escapee == "env-cleared-daemon"
        quiet_report, _ = await tear_down(quiet, eof=5.0, term=0.2, kill_wait=0.3)
        if honest_only:  # it may be either run's: neither claims quiescence, neither kills it
            assert not quiet_report.quiescent
        else:
            assert quiet_report.quiescent
            assert quiet_report.rung == "eof-wait"  # never signalled: the escapee is not its own
        assert alive(daemon)
        noisy_report, _ = await tear_down(noisy, eof=0.2, term=0.5, kill_wait=0.3)
        assert noisy_report.quiescent != honest_only
        assert alive(daemon) == honest_only
    finally:
        kill(daemon)


async def test_pid_churn_is_caught(tmp_path: Path, task_group: TaskGroup, containment: Containment) -> None:
    spec = spec_for("churn", cwd=tmp_path, containment=containment)
    proc = await ManagedProcess.spawn(spec, task_group)
    await ready_pids(proc)
    report, _ = await tear_down(proc, eof=0.2, term=0.3)
    assert report.quiescent
    assert tagged(spec.run_tag) == []
    if fallback(containment):
        # A member that was re-parented to us and exited between two reads was never seen
        # alive, so nothing attributes it: the fallback leaves its zombie alone (README).
        for zombie in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                if zombie.status() == psutil.STATUS_ZOMBIE:
                    kill(zombie.pid)


async def test_stopped_grandchild_is_ended(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for("stopped-grandchild", cwd=tmp_path, containment=containment), task_group
    )
    (grandchild,) = await ready_pids(proc)
    report, _ = await tear_down(proc, eof=0.2, term=2.0)
    assert report.quiescent
    assert report.rung == "term-wait"  # SIGTERM reached it: it was continued
    assert not alive(grandchild)


async def test_child_that_makes_itself_a_subreaper(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for("own-subreaper", cwd=tmp_path, containment=containment), task_group
    )
    (daemon,) = await ready_pids(proc)
    report, _ = await tear_down(proc, eof=0.2, term=1.0)
    assert report.quiescent
    assert not alive(daemon)


async def test_cgroups_made_inside_a_runs_leaf_end_and_go_with_it(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    """A nested supervisor (``subagents mcp`` under a supervised Codex) makes its own groups
    inside the leaf it runs in: the ladder ends their members and removes them with the leaf."""
    if containment.mode != "cgroup":
        pytest.skip("cgroups only")
    set_subreaper(True)  # as an embedder may have it: the killed daemon is then our zombie to reap
    spec = spec_for("nested-cgroup", cwd=tmp_path, containment=containment)
    proc = await ManagedProcess.spawn(spec, task_group)
    line = (await proc.stdout.readline()).decode().split()
    daemon, nested = int(line[1]), Path(line[2])
    enclosure: Any = proc._enclosure
    if enclosure.below:  # a root child: the path is in its own view, rooted at its own group
        nested = enclosure.entered[0] / "nested" / "inner"
    assert (nested / "cgroup.procs").read_text().split() == [str(daemon)]
    report, _ = await tear_down(proc, eof=0.2, term=0.5)
    assert report.quiescent
    assert not alive(daemon)
    assert not nested.exists()
    assert not enclosure.leaf.exists()  # the run's leaf itself


async def test_a_runs_child_starts_in_a_cgroup_namespace_rooted_at_its_leaf(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    if containment.mode != "cgroup" or not namespace_prefix():
        pytest.skip("a cgroup namespace needs cgroup mode and CAP_SYS_ADMIN")
    proc = await ManagedProcess.spawn(
        spec_for("cgroup-view", cwd=tmp_path, containment=containment), task_group
    )
    words = (await proc.stdout.readline()).decode().split()
    assert words[:2] == ["ready", "0::/"]  # its leaf is the root of all it sees
    assert words[2] != os.readlink("/proc/self/ns/cgroup")
    report, _ = await tear_down(proc, eof=5.0)
    assert report.quiescent


@pytest.mark.parametrize("environment", ["kept", "bare"])
async def test_a_root_child_that_moves_itself_out_of_its_leaf_is_ended_with_the_run(
    tmp_path: Path, task_group: TaskGroup, containment: Containment, environment: str
) -> None:
    """A root daemon writes its pid into the cgroup root's ``cgroup.procs`` (with its environment,
    or after an ``execve`` with none).  Where the kernel refuses the move (``nsdelegate``), it stays
    in the leaf; where it lets it out, the run finds it (its cgroup namespace, or its run tag) and
    ends it with the rest of the tree before it claims quiescence."""
    if containment.mode != "cgroup" or os.geteuid() != 0:
        pytest.skip("a root child in cgroup mode")
    args = ["bare"] if environment == "bare" else []
    proc = await ManagedProcess.spawn(
        spec_for("escape-cgroup", *args, cwd=tmp_path, containment=containment), task_group
    )
    words = (await proc.stdout.readline()).decode().split()
    daemon, moved = int(words[1]), words[2]
    try:
        enclosure: Any = proc._enclosure
        if enclosure.below:  # a root child's cgroup root is its own group: the move stays inside it
            assert moved == "moved"
            assert str(daemon) in (enclosure.entered[0] / "cgroup.procs").read_text().split()
        elif kernel_keeps_namespaces_in() and namespace_prefix():
            assert moved == "stayed"
        else:
            assert moved == "moved"
            assert str(daemon) not in proc_members(proc)
        report, _ = await tear_down(proc, eof=0.5, term=1.0)
        assert report.quiescent
        assert not alive(daemon)
    finally:
        kill(daemon)


def proc_members(proc: ManagedProcess) -> list[str]:
    leaf: Path = proc._enclosure.leaf  # type: ignore[attr-defined]
    return (leaf / "cgroup.procs").read_text().split()


async def test_the_embedders_own_zombie_is_untouched(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    own = subprocess.Popen(["sh", "-c", "exit 7"])
    proc = await ManagedProcess.spawn(spec_for("daemon", cwd=tmp_path, containment=containment), task_group)
    await ready_pids(proc)
    report, _ = await tear_down(proc, eof=0.2, term=1.0)
    assert report.quiescent
    assert own.wait(5) == 7


async def test_a_child_that_exits_while_a_grandchild_holds_stdout_ends_its_stream(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    spec = spec_for("hold-stdout", cwd=tmp_path, containment=containment)
    spec = type(spec)(**{**spec.__dict__, "eof_grace": 0.2})
    proc = await ManagedProcess.spawn(spec, task_group)
    await ready_pids(proc)
    assert await proc.stdout.read() == b""  # ends within the EOF grace after the exit
    assert proc.stdout_ended
    assert proc.exit_facts is not None
    report, _ = await tear_down(proc, eof=0.2, term=1.0)
    assert report.quiescent


STORM_HOST = textwrap.dedent(
    """
    import json, resource, sys, anyio
    from pathlib import Path
    from machines import TeardownLadder
    from supervisor.process import ContainmentMode, ManagedProcess, SpawnSpec, StderrMode
    from supervisor.process import child_environment, containment_for

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    behave, mode, tag = sys.argv[1:4]

    async def main():
        async with anyio.create_task_group() as tg:
            spec = SpawnSpec(
                argv=[sys.executable, behave, "storm", "300"], cwd=Path.cwd(),
                env=child_environment({}, run_tag=tag), run_tag=tag, stderr=StderrMode.DISCARD,
                containment=containment_for(ContainmentMode(mode)),
            )
            proc = await ManagedProcess.spawn(spec, tg)
            await proc.stdout.readline()
            # The sleepers die on SIGTERM: a long grace costs nothing, and a loaded machine
            # cannot push the tree past it to SIGKILL.
            report = await proc.teardown(TeardownLadder(), eof_grace=0.3, term_grace=60, kill_wait=10)
            print(json.dumps({"quiescent": report.quiescent, "rung": report.rung}))
            tg.cancel_scope.cancel()

    anyio.run(main)
    """
)


@pytest.mark.usefixtures("subreaper_off")  # the host's orphans must not become pytest's zombies
def test_a_300_process_storm_under_an_fd_limit_of_256(tmp_path: Path, containment: Containment) -> None:
    tag = os.urandom(8).hex()
    host = subprocess.run(
        [PYTHON, "-c", STORM_HOST, BEHAVE, containment.mode, tag],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent.parent,
        check=False,
    )
    assert host.returncode == 0, host.stderr[-2000:]
    assert json.loads(host.stdout) == {"quiescent": True, "rung": "term-wait"}
    assert tagged(tag) == []


def test_cgroup_asked_for_but_unavailable_is_a_configuration_error(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from supervisor.providers.acp import Config

    with pytest.raises(
        ValidationError, match=f"cgroup containment is not available: {tmp_path} is not a cgroup v2"
    ):
        Config.model_validate({"command": "agent", "containment": "cgroup", "cgroup_root": str(tmp_path)})
    assert Config.model_validate({"command": "agent", "cgroup_root": str(tmp_path)}).containment == "auto"


def test_detection_names_the_mode_and_why(tmp_path: Path) -> None:
    found = detect_containment(tmp_path)
    assert found.mode == "process-tree"
    assert found.reason == f"{tmp_path} is not a cgroup v2 directory"
    assert parse_host_group(host_group_name(12, 345)) == (12, 345)
    assert parse_host_group("subagents-x-1") is None


NOBODY_HOST = textwrap.dedent(
    """
    import json, os, sys, anyio
    from pathlib import Path
    from machines import TeardownLadder
    from supervisor.process import ManagedProcess, SpawnSpec, StderrMode, child_environment, containment_for

    behave, tag = sys.argv[1:3]

    def alive(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    async def main():
        async with anyio.create_task_group() as tg:
            spec = SpawnSpec(
                argv=[sys.executable, behave, "nondumpable-daemon"], cwd=Path("/tmp"),
                env=child_environment({}, run_tag=tag), run_tag=tag, stderr=StderrMode.DISCARD,
                containment=containment_for(),
            )
            proc = await ManagedProcess.spawn(spec, tg)
            daemon = int((await proc.stdout.readline()).split()[1])
            report = await proc.teardown(TeardownLadder(), eof_grace=0.2, term_grace=0.3, kill_wait=0.3)
            print(json.dumps({
                "uid": os.getuid(), "containment": report.containment, "quiescent": report.quiescent,
                "daemon": daemon, "survivor": daemon in report.survivors, "alive": alive(daemon),
            }))
            tg.cancel_scope.cancel()

    anyio.run(main)
    """
)
SYSTEM_PYTHON = Path("/usr/bin/python3.11")


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


@pytest.mark.skipif(
    os.geteuid() != 0 or not SYSTEM_PYTHON.exists(), reason="needs root and a system python3.11"
)
def test_non_dumpable_daemon_under_a_non_root_supervisor() -> None:
    """As uid 65534 the daemon's environment is unreadable and cgroups are not writable.

    The fallback cannot attribute the daemon, so the honest outcome is pinned: it is not
    signalled, and the run is not reported quiescent while it lives.
    """
    import site

    root = Path(__file__).resolve().parent.parent
    path = os.pathsep.join([str(root), *site.getsitepackages()])
    tag = os.urandom(8).hex()
    host = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", NOBODY_HOST, BEHAVE, tag],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/tmp",
        env={**os.environ, "PYTHONPATH": path},
        preexec_fn=_as_nobody,
        check=False,
    )
    assert host.returncode == 0, host.stderr[-2000:]
    outcome = json.loads(host.stdout)
    try:
        assert outcome["uid"] == 65534
        assert outcome["containment"] == "process-tree"
        assert outcome["quiescent"] is False
        assert outcome["survivor"] is True
        assert outcome["alive"] is True  # never signalled: it could not be proven the run's
    finally:
        kill(outcome["daemon"])


async def test_a_run_alone_whose_child_left_nothing_is_found_gone_without_a_walk(
    tmp_path: Path, task_group: TaskGroup
) -> None:
    """Process-tree with the subreaper on: when this process has no child but its keeper,
    nothing of any run is alive, and the last look says so from our own children files
    (no walk of our descendants in a worker thread).  With a grandchild left, the look
    walks (the other tests here hold what it then finds)."""
    from supervisor.process._keeper import keeper_pid
    from supervisor.process._proctable import TABLE, own_children

    containment = ProcessTreeContainment()
    proc = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), task_group)
    await ready_pids(proc)
    if set(own_children()) - {proc.pid, keeper_pid()}:
        pytest.skip("this process has children of its own besides the run's (another fixture's)")
    reads = TABLE._reads.reads
    report, _ = await tear_down(proc)
    assert report.quiescent
    assert TABLE._reads.reads == reads

    proc = await ManagedProcess.spawn(
        spec_for("grandchild", cwd=tmp_path, containment=containment), task_group
    )
    (grandchild,) = await ready_pids(proc)
    report, _ = await tear_down(proc, eof=0.2, term=1.0)
    assert report.quiescent
    assert not alive(grandchild)
    assert TABLE._reads.reads > reads


async def test_a_kernel_without_children_files_reads_the_whole_table(
    tmp_path: Path, task_group: TaskGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``CONFIG_PROC_CHILDREN`` a walk of our descendants (or a look at our own
    children files) would find nothing, and a run with a live grandchild would look gone:
    the whole process table is read instead, and the grandchild is found and ended."""
    from supervisor.process import _proctable

    monkeypatch.setattr(_proctable, "CHILDREN_FILES", False)

    def no_children_files(tags: object) -> object:
        raise AssertionError("walked children files this kernel does not have")

    monkeypatch.setattr(_proctable, "read_descendants", no_children_files)
    containment = ProcessTreeContainment()
    proc = await ManagedProcess.spawn(
        spec_for("grandchild", cwd=tmp_path, containment=containment), task_group
    )
    (grandchild,) = await ready_pids(proc)
    reads = _proctable.TABLE._reads.reads
    report, _ = await tear_down(proc, eof=0.2, term=1.0)
    assert report.quiescent
    assert not alive(grandchild)
    assert _proctable.TABLE._reads.reads > reads
