"""A scripted provider over a real line-protocol child, to pin the seam's rules.

It is built the way every real provider is: a lifecycle table, a ``ProviderRun``
subclass with ``_start``/``_drive``, facts fed to the machine, diagnostics from closed
facts.  It borrows the ACP vocabulary for its lines.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from pydantic import Field

from machines import SETTLED, TransitionSink, build_lifecycle, common_rows
from supervisor import Capabilities, StopReason, SubagentRequest, SubagentResult
from supervisor._config import ProviderConfig
from supervisor._diagnostic import FailureFacts, ProviderLabel
from supervisor._run import ProviderRun, StepFailed
from supervisor.process import Containment, LineReader
from tests.conftest import CHILDREN, PYTHON

ScriptedLifecycle = build_lifecycle(
    "ScriptedLifecycle",
    stages=("initialize", "prompt", "process", "teardown"),
    table=(
        ("spawn_failed", "initialize", "process"),
        ("hello_received", "initialize", "prompt"),
        ("answer_received", "prompt", SETTLED),
        ("child_exited", "prompt", "process"),
        ("exit_observed", "process", SETTLED),
        *common_rows(startup=("initialize", "process"), running=("prompt", "process"), teardown="teardown"),
    ),
    doc="The scripted test provider's lifecycle.",
)


LINE_AGENT = [PYTHON, str(CHILDREN / "line_agent.py")]


class ScriptedConfig(ProviderConfig):
    argv: list[str] = Field(default_factory=lambda: list(LINE_AGENT))


class ScriptedRun(ProviderRun):
    label = ProviderLabel.ACP
    lifecycle = ScriptedLifecycle

    def __init__(self, *, events: RunEvents, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._events = events
        self._partial = ""
        self._reader: LineReader | None = None

    async def _start(self) -> None:
        config = self.config
        assert isinstance(config, ScriptedConfig)
        spec = self.spawn_spec(config.argv, self.resolve_cwd())
        process = await self.spawn_child(spec, failed_as="process-start", fact="spawn_failed")
        self._events.spawned.set()
        self._reader = LineReader(process.stdout, config.max_frame_bytes)
        if await self._reader.read_line() != b"hello":
            raise StepFailed(await self._exit_failure(fallback="transport"))
        self.fact("hello_received")

    async def _exit_failure(self, *, fallback: str) -> FailureFacts:
        assert self.process is not None
        facts = await self.process.wait_exit(within=self.config.term_grace)
        if facts is None:
            return self.failure(fallback)
        return self.failure("process-exit", exit_code=facts.exit_code, signal=facts.signal)

    async def _drive(self) -> SubagentResult:
        assert self.process is not None
        assert self._reader is not None
        self.process.stdin.write(self.request.task.encode() + b"\n")
        await self.process.stdin.drain()
        while True:
            line = await self._reader.read_line()
            if line is None:
                self.fact("child_exited")
                facts = await self._exit_failure(fallback="transport")
                self.fact("exit_observed")
                return SubagentResult(
                    output=self._partial, stop_reason=StopReason.ERROR, diagnostic=facts.line()
                )
            text = line.decode()
            if text.startswith("partial: "):
                self._partial += text.removeprefix("partial: ")
                self._events.partial_output.set()
            elif text.startswith("answer: "):
                self.fact("answer_received")
                return SubagentResult(output=text.removeprefix("answer: "), stop_reason=StopReason.COMPLETED)

    def _output(self) -> str:
        return self._partial


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
        self.capabilities = capabilities or Capabilities()
        self.tree = tree
        self.events = RunEvents()

    def create_run(self, request: SubagentRequest, *, trace: TransitionSink | None = None) -> ScriptedRun:
        return ScriptedRun(
            provider_name=self.name,
            config=self.config,
            request=request,
            trace=trace,
            tree=self.tree,
            events=self.events,
        )


def scripted(
    env: dict[str, str | None] | None = None, *, cwd: Path | None = None, **keys: object
) -> ScriptedProvider:
    """A scripted provider whose child sees ``env``."""
    settings: dict[str, object] = {"dispose_eof_grace_ms": 500, "dispose_grace_ms": 500, **keys}
    config = ScriptedConfig(env=env or {}, cwd=cwd, **settings)  # type: ignore[arg-type]
    return ScriptedProvider(config=config)
