"""The base run keeps every promise of the seam for every kind, even against a provider's bug.

The provider here is written the way a third party writes one (``supervisor.provider``
only).  Its child starts a grandchild, so "the tree is gone" is checked for both.  Each
test switches on one bug: a task on the run's task group that raises (during the start
and after publication), a ``StepFailed`` raised in ``drive()``, ``partial_output()`` that
raises (so ``cancel()`` does), output over ``max_output_bytes``.
"""

from __future__ import annotations

import enum
from pathlib import Path

import anyio
import psutil
import pytest

from supervisor import Registry, StartFailed, StopReason, SubagentRequest
from supervisor.provider import (
    NO_CAPABILITIES,
    SETTLED,
    TRUNCATED_MARK,
    ProviderConfig,
    ProviderRun,
    Run,
    RunContext,
    StepFailed,
    SubagentResult,
    TransitionSink,
    Vocabulary,
    build_lifecycle,
    common_rows,
)
from tests.conftest import CHILDREN, PYTHON

pytestmark = pytest.mark.anyio


class BugEvent(enum.StrEnum):
    READY = "ready"
    ANSWERED = "answered"


BugLifecycle = build_lifecycle(
    "BugLifecycle",
    stages=("greet", "work", "teardown"),
    events=BugEvent,
    table=(
        (BugEvent.READY, "greet", "work"),
        (BugEvent.ANSWERED, "work", SETTLED),
        *common_rows(startup=("greet",), running=("work",), teardown="teardown", late=(BugEvent.ANSWERED,)),
    ),
    doc="A provider with bugs on demand.",
    module=__name__,
)

VOCABULARY = Vocabulary(
    label="Buggy", stages=BugLifecycle.STAGES, categories=frozenset({"configuration", "transport", "unknown"})
)


BASE_EXCEPTIONS: dict[str, type[BaseException]] = {
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
}
"""Exceptions that are not a cancellation (``BaseException`` only), raised by a hook as a provider's bug."""


class BugConfig(ProviderConfig):
    bug: str = "none"
    answer_bytes: int = 0


class BuggyRun(ProviderRun[BugConfig]):
    vocabulary = VOCABULARY
    lifecycle = BugLifecycle

    def __init__(self, context: RunContext[BugConfig]) -> None:
        super().__init__(context)
        self.pids: list[int] = []

    async def handshake(self) -> None:
        spec = self.spawn_spec([PYTHON, str(CHILDREN / "tree.py")], self.resolve_cwd())
        process = await self.spawn_child(spec, failed_as="transport")
        self.pids = [int(pid) for pid in (await process.stdout.readline()).split()[1:]]
        if self.config.bug == "task-during-start":
            self.task_group.start_soon(self._crash)
            await anyio.sleep_forever()  # without the base's guard the start never ends
        if self.config.bug.startswith("handshake-raises:"):
            raise BASE_EXCEPTIONS[self.config.bug.partition(":")[2]]()
        self.fact(BugEvent.READY)

    async def drive(self) -> SubagentResult:
        bug = self.config.bug
        if bug == "task-after-publication":
            self.task_group.start_soon(self._crash)
            await anyio.sleep_forever()  # the failed task settles the run
        if bug.startswith("drive-raises:"):
            raise BASE_EXCEPTIONS[bug.partition(":")[2]]()
        if bug.startswith("task-raises:"):
            self.task_group.start_soon(self._crash_with, BASE_EXCEPTIONS[bug.partition(":")[2]])
            await anyio.sleep_forever()
        if bug == "step-failed":
            raise StepFailed(self.failure("transport"), extra_line="Buggy extra line")
        if bug in ("partial-output", "hang"):
            await anyio.sleep_forever()
        self.fact(BugEvent.ANSWERED)
        return SubagentResult(output="é" * self.config.answer_bytes, stop_reason=StopReason.COMPLETED)

    async def _crash(self) -> None:
        raise RuntimeError("a provider's bug")

    async def _crash_with(self, exc_type: type[BaseException]) -> None:
        raise exc_type()

    def partial_output(self) -> str:
        if self.config.bug == "partial-output":
            raise RuntimeError("another bug")
        return "partial"


class BuggyProvider:
    inherits_parent_context = False
    capabilities = NO_CAPABILITIES

    def __init__(self, config: BugConfig) -> None:
        self.config = config
        self.name = "buggy"
        self.runs: list[BuggyRun] = []

    def create_run(self, request: SubagentRequest, *, trace: TransitionSink | None = None) -> Run:
        run = BuggyRun(RunContext(self.name, self.config, request, trace))
        self.runs.append(run)
        return run


def registry(**keys: object) -> tuple[Registry, BuggyProvider]:
    provider = BuggyProvider(BugConfig(dispose_eof_grace_ms=2000, dispose_grace_ms=2000, **keys))  # type: ignore[arg-type]
    registry = Registry()
    registry.register(provider)
    return registry, provider


def assert_gone(pids: list[int]) -> None:
    assert len(pids) == 2, "the child and its grandchild"
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def request(tmp_path: Path) -> SubagentRequest:
    return SubagentRequest(task="t", parent_cwd=tmp_path)


async def test_a_task_that_raises_after_publication_settles_unknown_and_the_tree_goes(tmp_path: Path) -> None:
    registry_, provider = registry(bug="task-after-publication")
    with anyio.fail_after(60):
        async with registry_.run("buggy", request(tmp_path)) as run:  # no ExceptionGroup leaves this
            result = await run.result()
    assert result == SubagentResult(
        output="partial",
        stop_reason=StopReason.ERROR,
        diagnostic="Subagent failure (provider: Buggy; stage: work; category: unknown)",
    )
    assert run.state == "quiescent"
    assert provider.runs[0].failure_category == "unknown"
    assert_gone(provider.runs[0].pids)


async def test_a_task_that_raises_during_the_start_fails_it_and_rolls_back(tmp_path: Path) -> None:
    registry_, provider = registry(bug="task-during-start")
    with anyio.fail_after(60), pytest.raises(StartFailed) as info:
        async with registry_.run("buggy", request(tmp_path)):
            pytest.fail("must not publish")
    assert str(info.value) == "Subagent failure (provider: Buggy; stage: greet; category: unknown)"
    assert info.value.quiescent
    assert provider.runs[0].state == "quiescent"
    assert_gone(provider.runs[0].pids)


async def test_step_failed_in_drive_keeps_its_category(tmp_path: Path) -> None:
    registry_, provider = registry(bug="step-failed")
    async with registry_.run("buggy", request(tmp_path)) as run:
        result = await run.result()
    assert result.stop_reason == StopReason.ERROR
    assert result.output == "partial"
    assert result.diagnostic == (
        "Subagent failure (provider: Buggy; stage: work; category: transport)\nBuggy extra line"
    )
    assert provider.runs[0].failure_category == "transport"


async def test_dispose_reaches_the_teardown_when_cancel_fails(tmp_path: Path) -> None:
    """``partial_output()`` raises, so the local cancellation inside ``dispose()`` does."""
    registry_, provider = registry(bug="partial-output")
    with anyio.fail_after(60):
        async with registry_.run("buggy", request(tmp_path)) as run:
            pass  # leaving in flight: a local cancellation, then the teardown
    assert (await run.result()) == SubagentResult(output="", stop_reason=StopReason.ABORTED)
    assert run.state == "quiescent"
    assert_gone(provider.runs[0].pids)


async def test_cancel_after_a_failed_start_starts_nothing(tmp_path: Path) -> None:
    """The start failed and its task group is closed: ``cancel()`` must not start a task there."""
    registry_, provider = registry(bug="task-during-start")
    with pytest.raises(StartFailed):
        async with registry_.run("buggy", request(tmp_path)):
            pass
    run = provider.runs[0]
    run.cancel()
    assert (await run.result()).stop_reason == StopReason.ABORTED
    await run.dispose()  # idempotent after the rollback
    assert run.state == "quiescent"


@pytest.mark.parametrize(("answer", "limit"), [(10, 100), (1000, 100), (1000, 5)])
async def test_the_base_run_applies_max_output_bytes(tmp_path: Path, answer: int, limit: int) -> None:
    """A provider that collects without a cap still hands over at most ``max_output_bytes``."""
    registry_, _ = registry(answer_bytes=answer, max_output_bytes=limit)
    async with registry_.run("buggy", request(tmp_path)) as run:
        output = (await run.result()).output
    assert len(output.encode()) <= limit
    if 2 * answer <= limit:  # "é" is two bytes
        assert output == "é" * answer
    elif limit >= len(TRUNCATED_MARK.encode()):
        assert output == "é" * ((limit - len(TRUNCATED_MARK.encode())) // 2) + TRUNCATED_MARK
    else:
        assert output == "é" * (limit // 2)


@pytest.mark.parametrize("exc", list(BASE_EXCEPTIONS))
async def test_a_base_exception_in_handshake_fails_the_start_as_unknown(tmp_path: Path, exc: str) -> None:
    """Not a cancellation: the start fails ``unknown`` and is rolled back (it used to make
    ``Registry.run`` wait for ever, the child alive, an enclosing ``fail_after`` unfired)."""
    registry_, provider = registry(bug=f"handshake-raises:{exc}")
    with anyio.fail_after(60), pytest.raises(StartFailed) as info:
        async with registry_.run("buggy", request(tmp_path)):
            pytest.fail("must not publish")
    assert str(info.value) == "Subagent failure (provider: Buggy; stage: greet; category: unknown)"
    assert info.value.quiescent
    assert provider.runs[0].state == "quiescent"
    assert_gone(provider.runs[0].pids)


@pytest.mark.parametrize("where", ["drive-raises", "task-raises"])
@pytest.mark.parametrize("exc", list(BASE_EXCEPTIONS))
async def test_a_base_exception_after_publication_settles_unknown(
    tmp_path: Path, where: str, exc: str
) -> None:
    """From ``drive()`` or a task of the run: the run settles ``unknown`` and the tree goes
    (it used to escape as a ``BaseExceptionGroup`` after the dispose graces)."""
    registry_, provider = registry(bug=f"{where}:{exc}")
    with anyio.fail_after(60):
        async with registry_.run("buggy", request(tmp_path)) as run:
            result = await run.result()
    assert result == SubagentResult(
        output="partial",
        stop_reason=StopReason.ERROR,
        diagnostic="Subagent failure (provider: Buggy; stage: work; category: unknown)",
    )
    assert run.state == "quiescent"
    assert provider.runs[0].failure_category == "unknown"
    assert_gone(provider.runs[0].pids)


async def test_a_cancellation_is_never_taken_for_a_bug(tmp_path: Path) -> None:
    """The caller's cancellation still cancels: the start is rolled back and nothing settles
    ``unknown``."""
    registry_, provider = registry(bug="task-during-start")
    with anyio.move_on_after(0) as scope:
        async with registry_.run("buggy", request(tmp_path)):
            pytest.fail("must not publish")
    assert scope.cancelled_caught
    assert provider.runs[0].failure_category != "unknown"
