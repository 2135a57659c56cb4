"""A complete provider kind in one module: chart, vocabulary, config, run, provider, readiness.

It speaks a trivial line protocol with its child (``ready``, then ``echo: <task>``)
and uses nothing but the authors' module of ``subagent-supervisor`` (``supervisor.provider``).
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path

from supervisor.provider import (
    NO_CAPABILITIES,
    SETTLED,
    ProviderConfig,
    ProviderKind,
    ProviderRun,
    Readiness,
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
    decode_frame,
)

CHILD = Path(__file__).with_name("child.py")


class EchoEvent(enum.StrEnum):
    READY = "ready"
    ANSWERED = "answered"
    CHILD_EXITED = "child_exited"


EchoLifecycle = build_lifecycle(
    "EchoLifecycle",
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
    doc="The echo provider's lifecycle.",
    module=__name__,
)

VOCABULARY = Vocabulary(
    label="Echo",
    stages=EchoLifecycle.STAGES,
    categories=frozenset({"configuration", "transport", "child-exit", "unknown"}),
    exit_categories=frozenset({"child-exit"}),
)


class Config(ProviderConfig):
    """The TOML keys of an ``echo`` entry (those of every kind, plus none)."""


class EchoRun(ProviderRun[Config]):
    vocabulary = VOCABULARY
    lifecycle = EchoLifecycle

    def __init__(self, context: RunContext[Config]) -> None:
        super().__init__(context)
        self._answer = ""

    async def handshake(self) -> None:
        spec = self.spawn_spec([sys.executable, str(CHILD)], self.resolve_cwd())
        process = await self.spawn_child(spec, failed_as="transport")
        if (await process.stdout.readline()).strip() != b"ready":
            raise StepFailed(self.failure("transport"))
        self.fact(EchoEvent.READY)

    async def drive(self) -> SubagentResult:
        assert self.process is not None
        self.process.stdin.write(self.request.task.encode() + b"\n")
        await self.process.stdin.drain()
        line = await self.process.stdout.readline()
        if line.startswith(b"echo: "):
            # decode_frame: invalid UTF-8 from the child becomes U+FFFD, never a crash
            self._answer = decode_frame(line).removeprefix("echo: ").rstrip("\n")
            self.fact(EchoEvent.ANSWERED)
            return SubagentResult(output=self._answer, stop_reason=StopReason.COMPLETED)
        exit_facts = await self.process.wait_exit(within=self.config.term_grace)
        self.fact(EchoEvent.CHILD_EXITED)
        if exit_facts is None:
            facts = self.failure("transport")
        else:
            facts = self.failure("child-exit", exit_code=exit_facts.exit_code, signal=exit_facts.signal)
        return SubagentResult(output="", stop_reason=StopReason.ERROR, diagnostic=facts.line())

    def partial_output(self) -> str:
        return self._answer


class Provider:
    inherits_parent_context = False
    capabilities = NO_CAPABILITIES

    def __init__(self, config: Config, name: str | None = None) -> None:
        self.config = config
        self.name = name or config.name or "echo"

    def create_run(self, request: SubagentRequest, *, trace: TransitionSink | None = None) -> Run:
        return EchoRun(RunContext(self.name, self.config, request, trace))


def readiness() -> Readiness:
    """What ``subagents doctor`` says of this kind."""
    return Readiness(CHILD.is_file(), f"echo child {CHILD}")


KIND = ProviderKind(
    config=Config, provider=Provider, vocabulary=VOCABULARY, charts=(EchoLifecycle,), ready=readiness
)
