"""The process layer against real children: spawn, exit facts, the ladder over whole trees."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from anyio.abc import TaskGroup

from machines import AuditTrail, TeardownLadder
from supervisor.process import (
    RUN_TAG_VARIABLE,
    Containment,
    ExitFacts,
    ManagedProcess,
    SpawnFailed,
    SpawnSpec,
    StderrMode,
    TeardownReport,
    child_environment,
    is_scrubbed,
    set_subreaper,
)
from tests.conftest import CHILDREN, PYTHON
from tests.support.unkillable import UnkillableTree, phantom_process

pytestmark = pytest.mark.anyio

BEHAVE = str(CHILDREN / "behave.py")


def spec_for(
    behaviour: str,
    *args: str,
    cwd: Path,
    containment: Containment,
    stderr: StderrMode = StderrMode.DISCARD,
    env: dict[str, str | None] | None = None,
) -> SpawnSpec:
    tag = os.urandom(8).hex()
    return SpawnSpec(
        argv=[PYTHON, BEHAVE, behaviour, *args],
        cwd=cwd,
        env=child_environment(env or {}, run_tag=tag),
        run_tag=tag,
        stderr=stderr,
        containment=containment,
    )


async def ready_pids(proc: ManagedProcess) -> list[int]:
    line = await proc.stdout.readline()
    words = line.decode().split()
    assert words[:1] == ["ready"], line
    return [int(w) for w in words[1:]]


async def tear_down(
    proc: ManagedProcess, *, eof: float = 5.0, term: float = 5.0, kill_wait: float = 5.0
) -> tuple[TeardownReport, AuditTrail]:
    trail = AuditTrail("test")
    ladder = TeardownLadder(listeners=[trail])
    report = await proc.teardown(ladder, eof_grace=eof, term_grace=term, kill_wait=kill_wait)
    return report, trail


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_eof_obeying_child_ends_at_the_first_rung(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), task_group)
    await ready_pids(proc)
    report, trail = await tear_down(proc)
    assert report == TeardownReport(
        quiescent=True, rung="eof-wait", exit=ExitFacts(0, None), containment=containment.mode
    )
    assert [(e.event, e.target) for e in trail.entries] == [
        ("stdin_closed", "eof-wait"),
        ("tree_exited", "gone"),
    ]


async def test_eof_ignoring_child_gets_sigterm(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for("ignore-eof", cwd=tmp_path, containment=containment), task_group
    )
    await ready_pids(proc)
    report, _ = await tear_down(proc, eof=0.2)
    assert report == TeardownReport(
        quiescent=True, rung="term-wait", exit=ExitFacts(None, "SIGTERM"), containment=containment.mode
    )


async def test_term_trapping_child_gets_sigkill(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for("trap-term", cwd=tmp_path, containment=containment), task_group
    )
    await ready_pids(proc)
    report, trail = await tear_down(proc, eof=0.1, term=0.2)
    assert report == TeardownReport(
        quiescent=True, rung="kill-wait", exit=ExitFacts(None, "SIGKILL"), containment=containment.mode
    )
    assert [e.target for e in trail.entries] == ["eof-wait", "term-wait", "kill-wait", "gone"]


@pytest.mark.parametrize("behaviour", ["grandchild", "setsid-grandchild", "daemon"])
async def test_descendants_die_with_the_tree(
    tmp_path: Path, task_group: TaskGroup, containment: Containment, behaviour: str
) -> None:
    proc = await ManagedProcess.spawn(spec_for(behaviour, cwd=tmp_path, containment=containment), task_group)
    (descendant,) = await ready_pids(proc)
    assert alive(descendant)
    report, _ = await tear_down(proc, eof=0.3)
    assert report.quiescent
    assert report.exit == ExitFacts(0, None)  # the child obeyed EOF; its descendant needed the ladder
    assert report.rung == "term-wait"
    assert not alive(descendant)


async def test_term_ignoring_grandchild_is_killed(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for("trap-term-tree", cwd=tmp_path, containment=containment), task_group
    )
    (grandchild,) = await ready_pids(proc)
    report, _ = await tear_down(proc, eof=0.1, term=0.3)
    assert report.quiescent
    assert report.rung == "kill-wait"
    assert report.exit == ExitFacts(None, "SIGTERM")
    assert not alive(grandchild)


@pytest.fixture
def subreaper_off() -> Iterator[None]:
    set_subreaper(False)
    try:
        yield
    finally:
        set_subreaper(True)


@pytest.mark.usefixtures("subreaper_off")
async def test_without_the_subreaper_a_daemon_is_still_ended(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    """Re-parented to PID 1, the daemon is still the run's: by its leaf, or by its run tag."""
    spec = spec_for("daemon", cwd=tmp_path, containment=containment)
    spec = SpawnSpec(**{**spec.__dict__, "subreaper": False})
    proc = await ManagedProcess.spawn(spec, task_group)
    (daemon,) = await ready_pids(proc)
    assert psutil.Process(daemon).ppid() != os.getpid()
    report, _ = await tear_down(proc, eof=0.3)
    assert report.quiescent
    assert not alive(daemon)


@pytest.mark.parametrize(
    ("behaviour", "arg", "facts"),
    [
        ("exit", "3", ExitFacts(3, None)),
        ("exit", "0", ExitFacts(0, None)),
        ("signal", "SIGSEGV", ExitFacts(None, "SIGSEGV")),
        ("signal", "SIGKILL", ExitFacts(None, "SIGKILL")),
    ],
)
async def test_exit_code_and_signal_are_observed_separately(
    tmp_path: Path,
    task_group: TaskGroup,
    containment: Containment,
    behaviour: str,
    arg: str,
    facts: ExitFacts,
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for(behaviour, arg, cwd=tmp_path, containment=containment), task_group
    )
    assert await proc.wait_exit() == facts
    report, _ = await tear_down(proc)
    assert report.exit == facts
    assert report.quiescent


async def test_missing_command_fails_to_spawn(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    spec = SpawnSpec(
        argv=[str(tmp_path / "no-such-program")], cwd=tmp_path, env={}, run_tag="x", containment=containment
    )
    with pytest.raises(SpawnFailed):
        await ManagedProcess.spawn(spec, task_group)


async def test_vanished_cwd_fails_to_spawn(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    with pytest.raises(SpawnFailed):
        await ManagedProcess.spawn(
            spec_for("eof", cwd=tmp_path / "gone", containment=containment), task_group
        )


async def test_stderr_flood_is_drained_with_a_bounded_tail(
    tmp_path: Path, task_group: TaskGroup, containment: Containment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="supervisor")
    spec = spec_for(
        "stderr-flood", str(50 * 1024 * 1024), cwd=tmp_path, containment=containment, stderr=StderrMode.LOG
    )
    proc = await ManagedProcess.spawn(spec, task_group)
    await ready_pids(proc)  # the child got all 50 MiB out: nothing blocked it
    report, _ = await tear_down(proc)
    assert report.quiescent
    assert 0 < len(proc.stderr_tail) <= spec.stderr_tail_bytes
    assert any("stderr: xxxx" in r.getMessage() for r in caplog.records)


async def test_environment_is_scrubbed_and_layered(
    tmp_path: Path, task_group: TaskGroup, containment: Containment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMBIENT_API_KEY", "ambient-secret")
    monkeypatch.setenv("DSH_HOME", "/ambient")
    monkeypatch.setenv("PLAIN_SETTING", "kept")
    monkeypatch.setenv("DROP_ME", "x")
    names = "AMBIENT_API_KEY,DSH_HOME,PLAIN_SETTING,DROP_ME,CHILD_TOKEN," + RUN_TAG_VARIABLE
    spec = spec_for(
        "print-env",
        names,
        cwd=tmp_path,
        containment=containment,
        env={"CHILD_TOKEN": "explicit", "DROP_ME": None},
    )
    proc = await ManagedProcess.spawn(spec, task_group)
    lines = [(await proc.stdout.readline()).decode().strip() for _ in range(6)]
    await ready_pids(proc)
    assert lines == [
        "AMBIENT_API_KEY=<unset>",
        "DSH_HOME=<unset>",
        "PLAIN_SETTING=kept",
        "DROP_ME=<unset>",
        "CHILD_TOKEN=explicit",
        f"{RUN_TAG_VARIABLE}={spec.run_tag}",
    ]
    await tear_down(proc)


async def test_child_runs_in_the_given_cwd(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(spec_for("pwd", cwd=tmp_path, containment=containment), task_group)
    assert (await proc.stdout.readline()).decode().strip() == str(tmp_path)
    await ready_pids(proc)
    await tear_down(proc)


async def test_force_kill_skips_the_graces(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for("trap-term", cwd=tmp_path, containment=containment), task_group
    )
    await ready_pids(proc)

    async def second_ctrl_c() -> None:  # runs once teardown waits in its first grace
        proc.force_kill()

    task_group.start_soon(second_ctrl_c)
    report, trail = await tear_down(proc, eof=3600, term=3600)
    assert report == TeardownReport(
        quiescent=True, rung="kill-wait", exit=ExitFacts(None, "SIGKILL"), containment=containment.mode
    )
    assert [e.event for e in trail.entries] == ["stdin_closed", "kill_forced", "tree_exited"]


async def test_a_tree_that_survives_sigkill_is_reported(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    with phantom_process() as phantom:
        tree = UnkillableTree(phantom, containment)
        proc = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=tree), task_group)
        await ready_pids(proc)
        report, trail = await tear_down(proc, eof=0.1, term=0.1, kill_wait=0.2)
        assert not report.quiescent
        assert report.survivors == (phantom,)
        assert report.exit == ExitFacts(0, None)
        assert trail.entries[-1].target == "survived"


@pytest.mark.parametrize("size", [1000, 5 * 1024 * 1024])
async def test_a_frame_over_the_bound_ends_stdout_after_the_lines_before_it(
    tmp_path: Path, task_group: TaskGroup, containment: Containment, size: int
) -> None:
    spec = spec_for("frames", str(size), cwd=tmp_path, containment=containment)
    spec = SpawnSpec(**{**spec.__dict__, "max_frame_bytes": 100})
    proc = await ManagedProcess.spawn(spec, task_group)
    assert await proc.stdout.readline() == b"short\n"
    assert await proc.stdout.read() == b""  # cut: the oversized line and what follows never arrive
    assert proc.frame_too_large
    assert proc.stdout_ended
    report, _ = await tear_down(proc)
    assert report.quiescent


async def test_frames_within_the_bound_pass_untouched(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    spec = spec_for("frames", "100", cwd=tmp_path, containment=containment)
    spec = SpawnSpec(**{**spec.__dict__, "max_frame_bytes": 100})
    proc = await ManagedProcess.spawn(spec, task_group)
    assert await proc.stdout.readline() == b"short\n"
    assert await proc.stdout.readline() == b"x" * 100 + b"\n"
    assert await proc.stdout.readline() == b"after\n"
    assert not proc.frame_too_large
    await tear_down(proc)


def test_the_ambient_environment_is_read_again_whenever_it_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each spawn's scrubbed copy of ``os.environ`` is reused only while ``os.environ`` and
    the removed names are what they were: a set, a change, a delete or another removal shows."""
    monkeypatch.delenv("SUBAGENT_TEST_AMBIENT", raising=False)
    first = child_environment({}, run_tag="t")
    assert "SUBAGENT_TEST_AMBIENT" not in first
    second = child_environment({}, run_tag="t")
    for given in (first, second):  # a copy each time: never the one remembered
        given["SUBAGENT_TEST_AMBIENT"] = "a caller's own change"
    assert "SUBAGENT_TEST_AMBIENT" not in child_environment({}, run_tag="t")
    monkeypatch.setenv("SUBAGENT_TEST_AMBIENT", "one")
    assert child_environment({}, run_tag="t")["SUBAGENT_TEST_AMBIENT"] == "one"
    monkeypatch.setenv("SUBAGENT_TEST_AMBIENT", "two")
    assert child_environment({}, run_tag="t")["SUBAGENT_TEST_AMBIENT"] == "two"
    assert "SUBAGENT_TEST_AMBIENT" not in child_environment({}, remove=["SUBAGENT_TEST_AMBIENT"], run_tag="t")
    assert child_environment({}, run_tag="t")["SUBAGENT_TEST_AMBIENT"] == "two"
    monkeypatch.setenv("SUBAGENT_TEST_API_KEY", "secret")  # credential-shaped: scrubbed as before
    assert "SUBAGENT_TEST_API_KEY" not in child_environment({}, run_tag="t")
    monkeypatch.delenv("SUBAGENT_TEST_AMBIENT")
    assert "SUBAGENT_TEST_AMBIENT" not in child_environment({}, run_tag="t")
    assert child_environment({}, run_tag="t") == {
        **{k: v for k, v in os.environ.items() if not is_scrubbed(k)},
        "SUBAGENT_SUPERVISOR_RUN": "t",
    }


def test_a_program_is_refused_before_the_spawn_with_the_error_execve_would_give(tmp_path: Path) -> None:
    """Missing, a directory, not executable, not a program: the errno ``execve`` gives; a
    program (ELF or script, through a symlink too) and one we may run but not read: none."""
    import errno
    import sys

    from supervisor.process._spawn_command import _exec_error

    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    text = tmp_path / "text"
    text.write_text("hello\n")
    text.chmod(0o755)
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(script)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert _exec_error(None) == errno.ENOENT
    assert _exec_error(str(tmp_path / "missing")) == errno.ENOENT
    assert _exec_error(str(dangling)) == errno.ENOENT
    assert _exec_error(str(tmp_path)) == errno.EACCES
    assert _exec_error(str(text)) == errno.ENOEXEC
    assert _exec_error(str(script)) is None
    assert _exec_error(str(link)) is None
    assert _exec_error(sys.executable) is None
    if os.geteuid() != 0:  # root may execute any file with an execute bit, and read all
        assert _exec_error(str(plain)) == errno.EACCES
        unreadable = tmp_path / "unreadable"
        unreadable.write_text("#!/bin/sh\n")
        unreadable.chmod(0o111)
        assert _exec_error(str(unreadable)) is None
    else:
        assert _exec_error(str(plain)) == (None if os.access(plain, os.X_OK) else errno.EACCES)


def test_a_proc_file_is_read_whole_with_the_system_calls_alone(tmp_path: Path) -> None:
    """What ``open(path, "rb").read()`` gives, across chunks too; ``OSError`` as ``open``
    raises it; no descriptor left behind either way."""
    from supervisor.process._keeper_main import read_bytes, start_time

    big = tmp_path / "big"
    big.write_bytes(bytes(range(256)) * 1000)  # 256,000 bytes: several reads
    fds = len(os.listdir("/proc/self/fd"))
    for path in (str(big), "/proc/self/environ", f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        with open(path, "rb") as f:
            assert read_bytes(path) == f.read()
    with pytest.raises(FileNotFoundError):
        read_bytes(str(tmp_path / "missing"))
    with pytest.raises(IsADirectoryError):
        read_bytes(str(tmp_path))
    assert len(os.listdir("/proc/self/fd")) == fds
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        assert start_time(os.getpid()) == int(f.read().rsplit(b")", 1)[1].split()[19])
