"""Hypothesis stateful tests of the supervisor over real processes.

1. ``TreeMachine``: random children (EOF-obeying, EOF-ignoring, TERM-trapping, with
   grandchildren, escaping with setsid, double-fork daemons, exiting, crashing) are
   spawned and torn down in random order.  Invariants: the tree is gone after
   teardown (checked by scanning every process on the machine for the run tag), exit
   facts match the behaviour, and the ladder went no further than it had to.
2. ``RunMachine``: runs of a scripted provider are started, cancelled and disposed in
   random interleavings.  Invariants: the result settles exactly once, local
   cancellation gives ``aborted`` without a diagnostic, dispose is idempotent and ends
   quiescent, and no child text reaches anything reported.

Switching the subreaper off makes ``TreeMachine`` find the daemon leak; a test below
pins that it does.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from anyio.abc import TaskGroup
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from machines import TeardownLadder
from supervisor import Registry, StopReason, SubagentRequest, SubagentResult
from supervisor._run import ProviderRun
from supervisor.process import (
    RUN_TAG_VARIABLE,
    ExitFacts,
    ManagedProcess,
    SpawnSpec,
    StderrMode,
    TeardownReport,
    child_environment,
    set_subreaper,
)
from tests.conftest import CHILDREN, PYTHON, internals, tagged
from tests.support.scripted import scripted

BEHAVE = str(CHILDREN / "behave.py")
SECRET = "sk-stateful-" + uuid.uuid4().hex

# behaviour -> (argv tail, prints "ready", exit facts after teardown, deepest rung it needs)
BEHAVIOURS: dict[str, tuple[list[str], bool, ExitFacts | None, str]] = {
    "eof": (["eof"], True, ExitFacts(0, None), "eof-wait"),
    "ignore-eof": (["ignore-eof"], True, ExitFacts(None, "SIGTERM"), "term-wait"),
    "trap-term": (["trap-term"], True, ExitFacts(None, "SIGKILL"), "kill-wait"),
    "grandchild": (["grandchild"], True, ExitFacts(0, None), "term-wait"),
    "setsid-grandchild": (["setsid-grandchild"], True, ExitFacts(0, None), "term-wait"),
    "daemon": (["daemon"], True, ExitFacts(0, None), "term-wait"),
    "trap-term-tree": (["trap-term-tree"], True, ExitFacts(None, "SIGTERM"), "kill-wait"),
    "exit-3": (["exit", "3"], False, ExitFacts(3, None), "eof-wait"),
    "segv": (["signal", "SIGSEGV"], False, ExitFacts(None, "SIGSEGV"), "eof-wait"),
}
RUNGS = ("eof-wait", "term-wait", "kill-wait")


def kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)


@contextlib.contextmanager
def portal_with_task_group() -> Iterator[tuple[BlockingPortal, TaskGroup, Callable[[], None]]]:
    """A blocking portal on asyncio and a task group living in it across rules."""
    with start_blocking_portal(backend="asyncio") as portal:
        closed = portal.call(anyio.Event)

        async def host(*, task_status: Any) -> None:
            async with anyio.create_task_group() as tg:
                task_status.started(tg)
                await closed.wait()
                tg.cancel_scope.cancel()

        future, task_group = portal.start_task(host)
        try:
            yield portal, task_group, lambda: portal.call(closed.set)
        finally:
            portal.call(closed.set)
            future.result(timeout=30)


@dataclass
class Child:
    behaviour: str
    tag: str
    process: ManagedProcess


class TreeMachine(RuleBasedStateMachine):
    subreaper = True
    children = Bundle("children")

    def __init__(self) -> None:
        super().__init__()
        set_subreaper(self.subreaper)
        self._stack = contextlib.ExitStack()
        self.portal, self.task_group, _ = self._stack.enter_context(portal_with_task_group())
        self.live: list[Child] = []
        self.tags: list[str] = []

    @rule(target=children, behaviour=st.sampled_from(sorted(BEHAVIOURS)))
    def spawn(self, behaviour: str) -> Child:
        tail, says_ready, _, _ = BEHAVIOURS[behaviour]
        tag = uuid.uuid4().hex
        spec = SpawnSpec(
            argv=[PYTHON, "-I", BEHAVE, *tail],
            cwd=Path.cwd(),
            env=child_environment({}, run_tag=tag),
            run_tag=tag,
            stderr=StderrMode.DISCARD,
            subreaper=self.subreaper,
        )

        async def start() -> ManagedProcess:
            process = await ManagedProcess.spawn(spec, self.task_group)
            if says_ready:
                await process.stdout.readline()
            return process

        child = Child(behaviour, tag, self.portal.call(start))
        self.live.append(child)
        self.tags.append(tag)
        return child

    @rule(child=consumes(children))
    def tear_down(self, child: Child) -> None:
        self.live.remove(child)
        report: TeardownReport = self.portal.call(self._teardown, child.process)
        _, _, facts, deepest = BEHAVIOURS[child.behaviour]
        assert report.quiescent
        assert report.exit == facts
        assert RUNGS.index(report.rung) <= RUNGS.index(deepest)
        assert tagged(child.tag) == [], f"{child.behaviour} left processes behind"

    @staticmethod
    async def _teardown(process: ManagedProcess) -> TeardownReport:
        return await process.teardown(TeardownLadder(), eof_grace=0.2, term_grace=0.2, kill_wait=5)

    @invariant()
    def exit_facts_are_consistent(self) -> None:
        for child in self.live:
            facts = child.process.exit_facts
            if facts is not None:
                assert (facts.exit_code is None) != (facts.signal is None)

    def teardown(self) -> None:
        try:
            for child in self.live:
                self.portal.call(self._teardown, child.process)
            self._stack.close()
        finally:
            leaked = [p for tag in self.tags for p in tagged(tag)]
            kill_all(leaked)
            set_subreaper(True)


class RunMachine(RuleBasedStateMachine):
    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        self._stack = contextlib.ExitStack()
        self.portal, self.task_group, _ = self._stack.enter_context(portal_with_task_group())
        self.registry = Registry()
        self.registry.register(scripted({"LINE_AGENT_STDERR": SECRET}, stderr="log"))
        self.open: list[ProviderRun[Any]] = []
        self.settled: dict[str, SubagentResult] = {}

    @rule(
        target=runs,
        answer=st.sampled_from(["echo", "hang", "exit:5", "signal:SIGKILL"]),
        ignore_eof=st.booleans(),
    )
    def start(self, answer: str, ignore_eof: bool) -> ProviderRun[Any]:
        env: dict[str, str | None] = {"LINE_AGENT_ANSWER": answer, "LINE_AGENT_STDERR": SECRET}
        if ignore_eof:
            env["LINE_AGENT_IGNORE_EOF"] = "1"
        provider = scripted(env, stderr="log", dispose_eof_grace_ms=100, dispose_grace_ms=100)
        self.registry.unregister("scripted")
        self.registry.register(provider)
        request = SubagentRequest(task=f"task {SECRET}", parent_cwd=Path.cwd())
        run = internals(
            self.portal.call(lambda: self.registry.start("scripted", request, task_group=self.task_group))
        )
        self.open.append(run)
        return run

    @rule(run=runs)
    def cancel(self, run: ProviderRun[Any]) -> None:
        async def cancel_now() -> tuple[bool, SubagentResult]:
            was_settled = run.settled
            run.cancel()
            return was_settled, await run.result()

        was_settled, result = self.portal.call(cancel_now)
        if not was_settled:
            assert result == SubagentResult(output=result.output, stop_reason=StopReason.ABORTED)

    @rule(run=runs)
    def dispose(self, run: ProviderRun[Any]) -> None:
        self.portal.call(run.dispose)
        self.portal.call(run.dispose)  # idempotent
        assert run.quiescent is True
        assert run.state == "quiescent"
        assert tagged(run.id) == []
        result = self.portal.call(run.result)
        first = self.settled.setdefault(run.id, result)
        assert first is result, "a result settles exactly once"

    @staticmethod
    async def _settled_now(run: ProviderRun[Any]) -> SubagentResult | None:
        with anyio.move_on_after(0):
            return await run.result()
        return None

    @invariant()
    def nothing_reported_carries_child_text(self) -> None:
        for run in self.open:
            for entry in run.audit.entries:
                assert SECRET not in repr(entry)
            settled = self.portal.call(self._settled_now, run)
            if settled is not None:
                assert SECRET not in (settled.diagnostic or "")
                if settled.stop_reason == StopReason.ABORTED and run.cancelled_locally:
                    assert settled.diagnostic is None

    def teardown(self) -> None:
        try:
            for run in self.open:
                self.portal.call(run.dispose)
            self._stack.close()
        finally:
            kill_all([p for run in self.open for p in tagged(run.id)])


FAST = settings(max_examples=8, stateful_step_count=6, deadline=None, derandomize=True, database=None)

TestTree = TreeMachine.TestCase
TestTree.settings = FAST
TestRuns = RunMachine.TestCase
TestRuns.settings = FAST


class TreeMachineWithoutSubreaper(TreeMachine):
    subreaper = False


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_without_the_subreaper_the_fuzzer_finds_the_daemon_leak() -> None:
    finding = settings(
        max_examples=40,
        stateful_step_count=4,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
    )
    with pytest.raises(AssertionError, match="daemon left processes behind"):
        run_state_machine_as_test(TreeMachineWithoutSubreaper, settings=finding)
    assert os.environ.get(RUN_TAG_VARIABLE) is None
