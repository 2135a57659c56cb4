"""Warm children (spawned and handshaken before their task) against the built-in example agent: real
processes.

A warm child is spawned and handshaken (ACP ``initialize`` and ``session/new``) before
any task exists; a run of the same provider, config and cwd takes it and starts at its
first prompt.  Waits are on conditions (a child ready, a process gone), never on a
short timer racing the machine.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import ClassVar

import psutil
import pytest

from machines import TransitionSink
from supervisor import InvalidRequest, NoProvider, Registry, StartFailed, StopReason, SubagentRequest
from supervisor.process import Limits
from supervisor.process._host_groups import HOST_GROUPS
from supervisor.provider import RunContext, SessionPlan
from supervisor.providers.acp import AcpRun, Config, Provider, example_agent_config
from supervisor.run._warm import WARM_TASK, WarmKey, _digest
from tests.conftest import internals, tagged
from tests.support.waits import until

pytestmark = pytest.mark.anyio


def registry_of(config: Config | None = None, name: str = "acp") -> Registry:
    registry = Registry()
    registry.register(Provider(config or example_agent_config(), name))
    return registry


def key(registry: Registry, cwd: Path, name: str = "acp") -> WarmKey:
    return WarmKey(name, _digest(registry.get(name).config), cwd.resolve())  # type: ignore[attr-defined]


def ready(registry: Registry, cwd: Path, name: str = "acp") -> int:
    pool = registry._warm
    return 0 if pool is None else pool.count(key(registry, cwd, name))


def warm_runs(registry: Registry, cwd: Path) -> list[str]:
    assert registry._warm is not None
    return [run.id for run in registry._warm._slots[key(registry, cwd)].ready]


def request(cwd: Path, task: str = "what is 2+2") -> SubagentRequest:
    return SubagentRequest(task=task, parent_cwd=cwd)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_a_run_takes_a_warm_child_and_it_is_replaced_after_its_first_turn(tmp_path: Path) -> None:
    async with registry_of() as registry:
        await registry.prestart("acp", 2, cwd=tmp_path)
        assert ready(registry, tmp_path) == 2
        waiting = warm_runs(registry, tmp_path)
        assert all(tagged(run_id) for run_id in waiting)  # alive, handshake done
        async with registry.run("acp", request(tmp_path)) as run:
            assert run.id == waiting[0]
            result = await run.result()
        assert result.output == "Hello! You asked: what is 2+2"
        assert result.stop_reason == StopReason.COMPLETED
        assert run.quiescent is True
        assert tagged(run.id) == []
        # the trail: the handshake, the wait (machine "warm"), then the first prompt
        trail = run.audit.as_dicts()
        warm = [(entry["event"], entry["machine"]) for entry in trail if entry["machine"] == "warm"]
        assert warm == [("ready", "warm"), ("taken", "warm")]
        events = [entry["event"] for entry in trail]
        assert events.index("session_created") < events.index("ready") < events.index("taken")
        assert events.index("taken") < events.index("stop_reason_received")
        times = [float(entry["t"]) for entry in trail]
        assert times == sorted(times)  # one clock from the warm spawn on
        await until(lambda: ready(registry, tmp_path) == 2)  # refilled in the background
        assert run.id not in warm_runs(registry, tmp_path)
        refill = warm_runs(registry, tmp_path)[-1]
    assert tagged(refill) == []
    assert all(tagged(run_id) == [] for run_id in waiting)


async def test_a_warm_child_serves_a_conversation_and_no_placeholder_reaches_it(tmp_path: Path) -> None:
    async with registry_of() as registry:
        await registry.prestart("acp", 1, cwd=tmp_path)
        (waiting,) = warm_runs(registry, tmp_path)
        async with registry.run("acp", request(tmp_path), conversation=True) as run:
            assert run.id == waiting
            assert (await run.result()).output == "Hello! You asked: what is 2+2"
            assert (await run.send("and 3+3?")).output == "Hello! You asked: and 3+3?"
            recalled = await run.send("@recall")
            assert recalled.output == "Earlier in this session you asked: what is 2+2; and 3+3?"
        assert run.quiescent is True


async def test_a_dead_warm_child_is_never_handed_out(tmp_path: Path) -> None:
    async with registry_of() as registry:
        await registry.prestart("acp", 1, cwd=tmp_path)
        (dead,) = warm_runs(registry, tmp_path)
        pid = internals_of(registry, tmp_path).process.pid
        os.kill(pid, signal.SIGKILL)
        await until(lambda: gone(pid))
        async with registry.run("acp", request(tmp_path)) as run:
            result = await run.result()
        assert run.id != dead
        assert result.output == "Hello! You asked: what is 2+2"
        await until(lambda: ready(registry, tmp_path) == 1)  # the dead one was replaced
        assert dead not in warm_runs(registry, tmp_path)
        await until(lambda: tagged(dead) == [])


def internals_of(registry: Registry, cwd: Path):  # type: ignore[no-untyped-def]
    assert registry._warm is not None
    return registry._warm._slots[key(registry, cwd)].ready[0]


async def test_runs_of_another_cwd_or_config_start_cold(tmp_path: Path) -> None:
    warm_dir, other_dir = tmp_path / "warm", tmp_path / "other"
    warm_dir.mkdir()
    other_dir.mkdir()
    async with registry_of() as registry:
        await registry.prestart("acp", 1, cwd=warm_dir)
        (waiting,) = warm_runs(registry, warm_dir)
        async with registry.run("acp", request(other_dir)) as run:
            assert run.id != waiting
            assert (await run.result()).stop_reason == StopReason.COMPLETED
        # the same name, another config: another digest
        registry.unregister("acp")
        registry.register(Provider(example_agent_config(idle_timeout_ms=1234), "acp"))
        async with registry.run("acp", request(warm_dir)) as run:
            assert run.id != waiting
            assert (await run.result()).stop_reason == StopReason.COMPLETED
        assert registry._warm is not None
        assert [r.id for slot in registry._warm._slots.values() for r in slot.ready] == [waiting]
        assert tagged(waiting)
    assert tagged(waiting) == []


async def test_a_warm_child_unused_for_warm_idle_ms_is_ended_and_not_replaced(tmp_path: Path) -> None:
    async with registry_of(example_agent_config(warm_idle_ms=200)) as registry:
        await registry.prestart("acp", 1, cwd=tmp_path)
        (waiting,) = warm_runs(registry, tmp_path)
        await until(lambda: ready(registry, tmp_path) == 0 and tagged(waiting) == [])
        assert registry._warm is not None
        slot = registry._warm._slots[key(registry, tmp_path)]
        assert (slot.target, slot.starting) == (0, 0)


async def test_bad_input_is_one_clear_error_before_anything_spawns(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    before = psutil.Process().children(recursive=True)
    async with registry_of() as registry:
        for count in (-1, True, 1.5, "2"):
            with pytest.raises(InvalidRequest, match=r"^warm count must be a non-negative integer$"):
                await registry.prestart("acp", count, cwd=tmp_path)  # type: ignore[arg-type]
        with pytest.raises(NoProvider, match=r'^no subagent provider registered for "nope"$'):
            await registry.prestart("nope", 1, cwd=tmp_path)
        for cwd in (a_file, tmp_path / "missing", None):
            with pytest.raises(InvalidRequest, match=r"^warm cwd: "):
                await registry.prestart("acp", 1, cwd=cwd)
        saved = HOST_GROUPS.ceiling
        HOST_GROUPS.ceiling = Limits(pids_max=3)  # the value only: nothing is written to the kernel
        try:
            with pytest.raises(InvalidRequest, match=r"^warm count 4 is above the host ceiling \(pids_max 3"):
                await registry.prestart("acp", 4, cwd=tmp_path)
        finally:
            HOST_GROUPS.ceiling = saved
        assert psutil.Process().children(recursive=True) == before
        assert registry._warm is None or all(slot.kept == 0 for slot in registry._warm._slots.values())


async def test_the_host_ceiling_counts_every_kept_child(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    saved = HOST_GROUPS.ceiling
    async with registry_of() as registry:
        await registry.prestart("acp", 2, cwd=tmp_path)
        HOST_GROUPS.ceiling = Limits(pids_max=3)
        try:
            with pytest.raises(InvalidRequest, match=r"2 warm children kept for other keys"):
                await registry.prestart("acp", 2, cwd=other)
        finally:
            HOST_GROUPS.ceiling = saved
        assert ready(registry, other) == 0


async def test_a_start_failure_is_raised_by_prestart_and_not_retried(tmp_path: Path) -> None:
    async with registry_of(Config(command=str(tmp_path / "no-such-agent"))) as registry:
        with pytest.raises(StartFailed, match="category: process-start"):
            await registry.prestart("acp", 2, cwd=tmp_path)
        assert registry._warm is not None
        await until(
            lambda: registry._warm is not None and registry._warm._slots[key(registry, tmp_path)].kept == 0
        )


async def test_lowering_the_count_ends_the_extra_children(tmp_path: Path) -> None:
    async with registry_of() as registry:
        await registry.prestart("acp", 2, cwd=tmp_path)
        first, second = warm_runs(registry, tmp_path)
        await registry.prestart("acp", 1, cwd=tmp_path)
        assert warm_runs(registry, tmp_path) == [first]
        await until(lambda: tagged(second) == [])
        await registry.prestart("acp", 0, cwd=tmp_path)
        await until(lambda: tagged(first) == [])


async def test_closing_the_registry_ends_its_warm_children(tmp_path: Path) -> None:
    registry = registry_of()
    await registry.prestart("acp", 2, cwd=tmp_path)
    waiting = warm_runs(registry, tmp_path)
    assert all(tagged(run_id) for run_id in waiting)
    await registry.aclose()
    await registry.aclose()  # idempotent
    assert all(tagged(run_id) == [] for run_id in waiting)
    with pytest.raises(InvalidRequest, match=r"^the registry is closed$"):
        await registry.prestart("acp", 1, cwd=tmp_path)
    async with registry.run("acp", request(tmp_path)) as run:  # runs still start, cold
        assert run.id not in waiting
        assert (await run.result()).stop_reason == StopReason.COMPLETED


async def test_an_aborted_take_ends_the_warm_child(tmp_path: Path) -> None:
    from supervisor import AbortSignal, StartAborted

    async with registry_of() as registry:
        await registry.prestart("acp", 1, cwd=tmp_path)
        (waiting,) = warm_runs(registry, tmp_path)
        signal_ = AbortSignal()
        signal_.abort()
        with pytest.raises(StartAborted, match="before the ACP child started"):
            async with registry.run("acp", request(tmp_path), abort=signal_):
                pass
        assert tagged(waiting) == []


async def test_the_warm_wait_is_in_the_runs_resources(tmp_path: Path) -> None:
    """In cgroup mode the leaf is the warm child's own from its spawn: the kernel's
    counters (read at teardown) cover the wait and the run alike."""
    from supervisor.process import ContainmentMode, containment_for

    if containment_for(ContainmentMode.AUTO, None).mode != "cgroup":
        pytest.skip("cgroup containment is not available here")
    async with registry_of(example_agent_config(containment="cgroup")) as registry:
        await registry.prestart("acp", 1, cwd=tmp_path)
        async with registry.run("acp", request(tmp_path)) as run:
            await run.result()
            assert internals(run).process is not None
        assert run.resources is not None
        assert run.resources.cpu_s is not None
        assert run.resources.cpu_s > 0


async def test_a_local_batch_warms_ahead_of_its_queue_and_ends_what_it_kept(tmp_path: Path) -> None:
    from supervisor import Run, batch
    from supervisor.batching._jobs import BatchEvents, BatchRecord

    class Seen(set[Run]):  # every run the batch had in flight
        def __init__(self) -> None:
            super().__init__()
            self.runs: list[Run] = []

        def add(self, run: Run) -> None:
            self.runs.append(run)
            super().add(run)

    registry = registry_of()
    seen = Seen()
    items = [{"id": f"i{n}", "task": f"task {n}"} for n in range(3)]
    records = [
        record
        async for record in batch(
            items, registry=registry, concurrency=1, cwd=tmp_path, events=BatchEvents(live=seen)
        )
    ]
    assert all(isinstance(record, BatchRecord) for record in records)
    outputs = sorted(record.output for record in records if isinstance(record, BatchRecord))
    assert outputs == [f"Hello! You asked: task {n}" for n in range(3)]
    # every item ran on a warm child: the first prestarted before the queue, each next one
    # refilled after the previous run's first turn (and waited for when still starting)
    assert len(seen.runs) == 3
    for run in seen.runs:
        warm = [entry["event"] for entry in run.audit.as_dicts() if entry["machine"] == "warm"]
        assert warm == ["ready", "taken"]
    assert registry.warm_target("acp", tmp_path) == 0  # back to the caller's count
    assert ready(registry, tmp_path) == 0
    await registry.aclose()


class SetUpAcpRun(AcpRun):
    """An ACP run with setup of its own for a warm child (``warm_up``): it records what
    the child was when the pool called it, or fails."""

    calls: ClassVar[list[tuple[str, str]]] = []
    fails: ClassVar[bool] = False

    async def warm_up(self) -> None:
        type(self).calls.append((self.task, self.stage))
        if type(self).fails:
            raise RuntimeError("the setup request failed")


class SetUpProvider(Provider):
    def create_run(
        self,
        request: SubagentRequest,
        *,
        trace: TransitionSink | None = None,
        session: SessionPlan | None = None,
    ) -> AcpRun:
        return SetUpAcpRun(RunContext(self.name, self.config, request, trace, session=session))


@pytest.mark.parametrize("fails", [False, True])
async def test_a_warm_childs_own_setup_runs_once_before_it_is_ready_and_never_for_a_cold_run(
    tmp_path: Path, fails: bool
) -> None:
    SetUpAcpRun.calls, SetUpAcpRun.fails = [], fails
    other = tmp_path / "other"
    other.mkdir()
    registry = Registry()
    registry.register(SetUpProvider(example_agent_config()))
    async with registry:
        await registry.prestart("acp", 1, cwd=tmp_path)
        # called once, on the handshaken child, before it was ready and with no task yet;
        # a setup that fails is only a lost speed-up: the child is kept and serves a run
        assert SetUpAcpRun.calls == [(WARM_TASK, "prompt")]
        (waiting,) = warm_runs(registry, tmp_path)
        async with registry.run("acp", request(tmp_path)) as run:
            assert run.id == waiting
            result = await run.result()
        assert result.output == "Hello! You asked: what is 2+2"
        async with registry.run("acp", request(other)) as cold:  # no warm child for that cwd
            assert (await cold.result()).stop_reason == StopReason.COMPLETED
        await until(lambda: ready(registry, tmp_path) == 1)  # the refill is set up too
        assert SetUpAcpRun.calls == [(WARM_TASK, "prompt")] * 2


async def test_a_provider_whose_runs_get_a_worktree_cannot_be_prestarted(tmp_path: Path) -> None:
    """Its run's cwd is made when the run starts: a warm child could never match it."""
    before = psutil.Process().children(recursive=True)
    async with registry_of(example_agent_config(workspace="worktree")) as registry:
        with pytest.raises(InvalidRequest, match=r'cannot be prestarted: .*workspace = "worktree"'):
            await registry.prestart("acp", 1, cwd=tmp_path)
        assert registry.warm_target("acp", tmp_path) == 0
    assert psutil.Process().children(recursive=True) == before


async def test_a_local_batch_of_worktree_runs_starts_them_cold_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from supervisor import batch
    from tests.support.git import git

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the runs' worktrees
    git(tmp_path, "init", "-q")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "0")
    caplog.set_level(logging.DEBUG, logger="supervisor")
    async with registry_of(example_agent_config(workspace="worktree")) as registry:
        records = [
            r async for r in batch(['{"id": "a", "task": "say hello"}'], registry=registry, cwd=tmp_path)
        ]
    assert [r.completed for r in records] == [True]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("worktree of their own" in r.getMessage() for r in caplog.records)
