# mypy: disallow-subclassing-any=False
# (0.2 exported these names from ``supervisor``, whose lazy ``__getattr__`` types them Any)
"""A provider kind exactly as an author wrote it against subagent-supervisor 0.2.

Every name comes from ``supervisor`` (0.2 had no ``supervisor.provider``), ``SETTLED``
from ``machines``, and the run fills in 0.2's hooks: ``_start``, ``_drive``,
``_output``, ``_remote_cancel``, ``_before_ladder``, ``_after_ladder``.  The kind
declares neither charts nor a readiness check (0.2's ``ProviderKind`` had neither).
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path

from machines import SETTLED
from supervisor import (
    NO_CAPABILITIES,
    ProviderConfig,
    ProviderKind,
    ProviderRun,
    Run,
    RunContext,
    StepFailed,
    StopReason,
    SubagentRequest,
    SubagentResult,
    TransitionSink,
    Vocabulary,
    build_lifecycle,
    common_rows,
)

CHILD = Path(__file__).with_name("child.py")


class EchoEvent(enum.StrEnum):
    READY = "ready"
    ANSWERED = "answered"
    CHILD_EXITED = "child_exited"


LegacyEchoLifecycle = build_lifecycle(
    "LegacyEchoLifecycle",
    stages=("greet", "echo", "teardown"),
    events=EchoEvent,
    table=(
        (EchoEvent.READY, "greet", "echo"),
        (EchoEvent.ANSWERED, "echo", SETTLED),
        (EchoEvent.CHILD_EXITED, "echo", SETTLED),
        *common_rows(
            startup=("greet",),
            running=("echo",),
            teardown="teardown",
            late=(EchoEvent.ANSWERED, EchoEvent.CHILD_EXITED),
        ),
    ),
    doc="The 0.2-era echo provider's lifecycle.",
    module=__name__,
)

VOCABULARY = Vocabulary(
    label="Legacy echo",
    stages=LegacyEchoLifecycle.STAGES,
    categories=frozenset({"configuration", "transport", "child-exit", "unknown"}),
    exit_categories=frozenset({"child-exit"}),
)


class Config(ProviderConfig):
    """The TOML keys of a ``legacy-echo`` entry (those of every kind, plus none)."""


class LegacyEchoRun(ProviderRun[Config]):
    vocabulary = VOCABULARY
    lifecycle = LegacyEchoLifecycle

    def __init__(self, context: RunContext[Config]) -> None:
        super().__init__(context)
        self._answer = ""
        self.hooks_called: list[str] = []

    async def _start(self) -> None:
        self.hooks_called.append("_start")
        spec = self.spawn_spec([sys.executable, str(CHILD)], self.resolve_cwd())
        process = await self.spawn_child(spec, failed_as="transport")
        if (await process.stdout.readline()).strip() != b"ready":
            raise StepFailed(self.failure("transport"))
        self.fact(EchoEvent.READY)

    async def _drive(self) -> SubagentResult:
        self.hooks_called.append("_drive")
        assert self.process is not None
        self.process.stdin.write(self.request.task.encode() + b"\n")
        await self.process.stdin.drain()
        line = await self.process.stdout.readline()
        if line.startswith(b"echo: "):
            self._answer = line.decode().removeprefix("echo: ").rstrip("\n")
            self.fact(EchoEvent.ANSWERED)
            return SubagentResult(output=self._answer, stop_reason=StopReason.COMPLETED)
        exit_facts = await self.process.wait_exit(within=self.config.term_grace)
        self.fact(EchoEvent.CHILD_EXITED)
        if exit_facts is None:
            facts = self.failure("transport")
        else:
            facts = self.failure("child-exit", exit_code=exit_facts.exit_code, signal=exit_facts.signal)
        return SubagentResult(output="", stop_reason=StopReason.ERROR, diagnostic=facts.line())

    def _output(self) -> str:
        self.hooks_called.append("_output")
        return self._answer

    async def _remote_cancel(self) -> None:
        self.hooks_called.append("_remote_cancel")
        if self.process is not None:
            self.process.stdin.write(b"cancel\n")
            await self.process.stdin.drain()
            if (await self.process.stdout.readline()).strip() == b"cancelled":
                self.hooks_called.append("child cancelled")

    async def _before_ladder(self) -> None:
        self.hooks_called.append("_before_ladder")

    async def _after_ladder(self) -> None:
        self.hooks_called.append("_after_ladder")


class Provider:
    inherits_parent_context = False
    capabilities = NO_CAPABILITIES

    def __init__(self, config: Config, name: str | None = None) -> None:
        self.config = config
        self.name = name or config.name or "legacy-echo"

    def create_run(self, request: SubagentRequest, *, trace: TransitionSink | None = None) -> Run:
        return LegacyEchoRun(RunContext(self.name, self.config, request, trace))


KIND = ProviderKind(config=Config, provider=Provider, vocabulary=VOCABULARY)
