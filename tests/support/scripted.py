"""A scripted provider over a real line-protocol child, to pin the seam's rules.

It is built the way every real provider is: a lifecycle table with its own events, a
vocabulary of its own (label ``Scripted``), a ``ProviderRun`` subclass with
``_start``/``_drive``, facts fed to the machine, diagnostics from closed facts.
"""

from __future__ import annotations

import enum
from pathlib import Path

import anyio
from pydantic import Field

from machines import SETTLED, TransitionSink, Vocabulary, build_lifecycle, common_rows
from supervisor import Capabilities, SessionPlan, StopReason, SubagentRequest, SubagentResult
from supervisor._config import ProviderConfig
from supervisor._diagnostic import FailureFacts
from supervisor.process import Containment, LineReader
from supervisor.provider import ProviderRun, RunContext, StepFailed
from tests.conftest import CHILDREN, PYTHON


class ScriptedEvent(enum.StrEnum):
    SPAWN_FAILED = "spawn_failed"
    HELLO_RECEIVED = "hello_received"
    ANSWER_RECEIVED = "answer_received"
    CHILD_EXITED = "child_exited"
    EXIT_OBSERVED = "exit_observed"


ScriptedLifecycle = build_lifecycle(
    "ScriptedLifecycle",
    stages=("initialize", "prompt", "process", "teardown"),
    events=ScriptedEvent,
    table=(
        (ScriptedEvent.SPAWN_FAILED, "initialize", "process"),
        (ScriptedEvent.HELLO_RECEIVED, "initialize", "prompt"),
        (ScriptedEvent.ANSWER_RECEIVED, "prompt", SETTLED),
        (ScriptedEvent.CHILD_EXITED, "prompt", "process"),
        (ScriptedEvent.EXIT_OBSERVED, "process", SETTLED),
        *common_rows(
            startup=("initialize", "process"),
            running=("prompt", "process"),
            teardown="teardown",
            late=(ScriptedEvent.ANSWER_RECEIVED, ScriptedEvent.CHILD_EXITED, ScriptedEvent.EXIT_OBSERVED),
            turn_stage="prompt",
            resume_stage="initialize",
        ),
    ),
    doc="The scripted test provider's lifecycle.",
    module=__name__,
)

SCRIPTED_VOCABULARY = Vocabulary(
    label="Scripted",
    stages=ScriptedLifecycle.STAGES,
    categories=frozenset({"configuration", "transport", "process-start", "process-exit", "unknown"}),
    exit_categories=frozenset({"process-exit"}),
)


LINE_AGENT = [PYTHON, str(CHILDREN / "line_agent.py")]


class ScriptedConfig(ProviderConfig):
    argv: list[str] = Field(default_factory=lambda: list(LINE_AGENT))


class ScriptedRun(ProviderRun[ScriptedConfig]):
    vocabulary = SCRIPTED_VOCABULARY
    lifecycle = ScriptedLifecycle

    def __init__(self, context: RunContext[ScriptedConfig], *, events: RunEvents) -> None:
        super().__init__(context)
        self._events = events
        self._partial = ""
        self._reader: LineReader | None = None

    async def handshake(self) -> None:
        config = self.config
        spec = self.spawn_spec(config.argv, self.resolve_cwd())
        process = await self.spawn_child(spec, failed_as="process-start", fact=ScriptedEvent.SPAWN_FAILED)
        self._events.spawned.set()
        self._reader = LineReader(process.stdout, config.max_frame_bytes)
        if await self._reader.read_line() != b"hello":
            raise StepFailed(await self._exit_failure(fallback="transport"))
        if self.resuming:  # the line agent has no sessions: a resume is published idle from here
            self.agent_session_id = self.session.resume if self.session is not None else None
            return
        self.fact(ScriptedEvent.HELLO_RECEIVED)

    async def _exit_failure(self, *, fallback: str) -> FailureFacts:
        assert self.process is not None
        facts = await self.process.wait_exit(within=self.config.term_grace)
        if facts is None:
            return self.failure(fallback)
        return self.failure("process-exit", exit_code=facts.exit_code, signal=facts.signal)

    async def drive(self) -> SubagentResult:
        assert self.process is not None
        assert self._reader is not None
        self.process.stdin.write(self.task.encode() + b"\n")
        await self.process.stdin.drain()
        while True:
            line = await self._reader.read_line()
            if line is None:
                self.fact(ScriptedEvent.CHILD_EXITED)
                facts = await self._exit_failure(fallback="transport")
                self.fact(ScriptedEvent.EXIT_OBSERVED)
                return SubagentResult(
                    output=self._partial, stop_reason=StopReason.ERROR, diagnostic=facts.line()
                )
            text = line.decode()
            if text.startswith("partial: "):
                self._partial += text.removeprefix("partial: ")
                self._events.partial_output.set()
            elif text.startswith("answer: "):
                self.fact(ScriptedEvent.ANSWER_RECEIVED)
                return SubagentResult(output=text.removeprefix("answer: "), stop_reason=StopReason.COMPLETED)
            elif text == "cancelled":  # the end of a cancelled turn
                self.fact(ScriptedEvent.ANSWER_RECEIVED)
                return SubagentResult(output=self._partial, stop_reason=StopReason.ABORTED)

    def partial_output(self) -> str:
        return self._partial

    def begin_turn(self) -> None:
        self._partial = ""

    async def remote_cancel(self) -> None:
        assert self.process is not None
        self.process.stdin.write(b"cancel\n")
        await self.process.stdin.drain()


class RunEvents:
    """What a test can wait on instead of sleeping (shared by the provider's runs)."""

    def __init__(self) -> None:
        self.spawned = anyio.Event()
        self.partial_output = anyio.Event()


class ScriptedProvider:
    """A provider named ``name`` whose child is the line agent."""

    inherits_parent_context = False

    def __init__(
        self,
        name: str = "scripted",
        *,
        config: ScriptedConfig | None = None,
        capabilities: Capabilities | None = None,
        tree: Containment | None = None,
    ) -> None:
        self.name = name
        self.config = config or ScriptedConfig(dispose_eof_grace_ms=2000, dispose_grace_ms=1000)
        self.capabilities = capabilities or Capabilities(conversation=True)
        self.tree = tree
        self.events = RunEvents()

    def create_run(
        self,
        request: SubagentRequest,
        *,
        trace: TransitionSink | None = None,
        session: SessionPlan | None = None,
    ) -> ScriptedRun:
        context = RunContext(self.name, self.config, request, trace, self.tree, session=session)
        return ScriptedRun(context, events=self.events)


def scripted(
    env: dict[str, str | None] | None = None,
    *,
    cwd: Path | None = None,
    capabilities: Capabilities | None = None,
    **keys: object,
) -> ScriptedProvider:
    """A scripted provider whose child sees ``env``."""
    settings: dict[str, object] = {"dispose_eof_grace_ms": 500, "dispose_grace_ms": 500, **keys}
    config = ScriptedConfig(env=env or {}, cwd=cwd, **settings)  # type: ignore[arg-type]
    return ScriptedProvider(config=config, capabilities=capabilities)
