"""What the engine's parts share: the run's mutable facts in one record, the author's run
as the parts see it, and the one failure a hook raises.

The parts (:mod:`~supervisor.run._settle`, :mod:`~supervisor.run._watch`,
:mod:`~supervisor.run._teardown`, :mod:`~supervisor.run._turns`,
:mod:`~supervisor.run._start`) are objects the authors' base
(:mod:`supervisor.run._base`) holds, built by :mod:`supervisor.run._parts`, one
:class:`RunState` between them.  A
part reaches the author's run only through :class:`Hooks`: the hooks an author fills
in, the helpers that build closed facts, and the read-only facts a journal and a span
read.  The imports go one way: settle, watch, teardown, turns, start, each handed the
parts before it when it is built (a later part's work reaches an earlier one only as a
callback passed in a call); nothing here imports a part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

import anyio
from anyio.abc import TaskGroup

from machines import AuditTrail, CommonEvent, Lifecycle, Vocabulary
from supervisor._config import ProviderConfig
from supervisor._diagnostic import FailureFacts, LimitFacts, join_lines
from supervisor._errors import ConversationEnd, TeardownFailed
from supervisor._seam import SessionPlan, SubagentRequest, SubagentResult
from supervisor.journal._observer import JournaledRun, RunObserver
from supervisor.process import ExitFacts, ManagedProcess, TeardownReport
from supervisor.run._progress import ProgressTracker
from supervisor.telemetry._facts import RunFacts
from supervisor.telemetry._switch import RunTelemetry
from supervisor.workspace import RunWorkspace


class StepFailed(Exception):
    """A provider step failed.  Carries only safe facts; the raw failure is ``__cause__``."""

    def __init__(self, facts: FailureFacts, *, extra_line: str | None = None) -> None:
        super().__init__(facts.line())
        self.facts = facts
        self.extra_line = extra_line

    @property
    def diagnostic(self) -> str:
        text = join_lines(self.facts.line(), self.extra_line)
        assert text is not None
        return text


class Hooks(RunFacts, JournaledRun, Protocol):
    """The author's run as the engine's parts see it (the base run is one)."""

    vocabulary: ClassVar[Vocabulary]
    lifecycle: ClassVar[type[Lifecycle]]
    tool_kinds: ClassVar[frozenset[str]]

    @property
    def config(self) -> ProviderConfig: ...

    @property
    def request(self) -> SubagentRequest: ...

    @property
    def session(self) -> SessionPlan | None: ...

    @property
    def machine(self) -> Lifecycle: ...

    @property
    def audit(self) -> AuditTrail: ...

    @property
    def process(self) -> ManagedProcess | None: ...

    @property
    def stage(self) -> str: ...

    @property
    def resuming(self) -> bool: ...

    async def handshake(self) -> None: ...

    async def drive(self) -> SubagentResult: ...

    def partial_output(self) -> str: ...

    def begin_turn(self) -> None: ...

    def session_usable(self) -> bool: ...

    async def session_lost(self) -> None: ...

    async def remote_cancel(self) -> None: ...

    async def before_ladder(self) -> None: ...

    async def after_ladder(self) -> None: ...

    def teardown_facts(self, report: TeardownReport | None) -> FailureFacts: ...

    def failure(
        self,
        category: str,
        *,
        stage: str | None = None,
        exit_code: int | None = None,
        signal: str | None = None,
        **fields: str | int | None,
    ) -> FailureFacts: ...

    def resolve_cwd(self, *, category: str | None = None) -> Path: ...


@dataclass(eq=False)
class RunState:
    """One run's mutable facts, written by the parts (each field names its writer).

    The first group lives as long as the run; the second is the current turn's and is
    replaced as each later turn of a conversation begins (``Turns.begin_next``).
    """

    workspace: RunWorkspace
    telemetry: RunTelemetry
    journal: RunObserver
    """The journal's hooks (a no-op when not journaled); ``assign`` replaces it."""
    progress: ProgressTracker
    turn_number: int
    turn_task: str
    first_turn: int
    """The turn of ``results[0]`` (a resumed conversation's first turn is ``turns_before + 1``)."""

    # -- the run's ----------------------------------------------------------------------
    task_group: TaskGroup | None = None  # start: the run's own group (a GuardedTaskGroup)
    closed: anyio.Event = field(default_factory=anyio.Event)  # teardown: the own group may end
    published: bool = False  # start
    prestarted: bool = False  # start: a warm child, spawned and handshaken before its request
    warm: bool = False  # start: started as a warm child (true from its handshake on)
    conversation: bool = False  # start
    resumed_idle: bool = False  # start/turns: published idle by a cold resume, no turn yet
    start_scope: anyio.CancelScope | None = None  # start: what a failed task cancels
    remove_abort: Callable[[], None] = lambda: None  # start: unhooks the abort signal
    task_error: BaseException | None = None  # turns: the first error a task of the run raised
    spawned_at: float = 0.0  # start, anyio's clock: where turn 1's timeout_ms counts from
    turn_started_at: float = 0.0  # anyio's clock: where this turn's timeout_ms counts from
    agent_session_id: str | None = None  # the provider (through the base's setter)
    results: list[SubagentResult] = field(default_factory=list)  # settle
    categories: dict[str, str] = field(default_factory=dict)  # failure line -> category (``failure()``)
    failure_category: str | None = None  # settle, start
    sending: bool = False  # turns: a send is between its checks and its turn's start
    over: ConversationEnd | None = None  # turns, teardown: why the conversation ended
    over_exit: ExitFacts | None = None  # teardown: the exit that ended it, when observed
    over_limit: LimitFacts | None = None  # teardown: the kernel's limit that ended an idle child
    over_known: anyio.Event = field(default_factory=anyio.Event)  # why it ended is final
    idle_scope: anyio.CancelScope | None = None  # watch: the idle watcher's scope
    teardown_event: CommonEvent | None = None  # teardown: the claim's event
    teardown_done: anyio.Event | None = None  # teardown: set once the claimed teardown ended
    teardown_error: TeardownFailed | None = None
    teardown_category: str | None = None
    quiescent: bool | None = None  # teardown
    dispose_done: anyio.Event | None = None  # teardown: the first dispose() ended
    dispose_error: TeardownFailed | None = None

    # -- the current turn's -------------------------------------------------------------
    result: SubagentResult | None = None  # settle: set once per turn
    settled: anyio.Event = field(default_factory=anyio.Event)
    cancelled_locally: bool = False  # turns: cancel() settled the turn ``aborted``
    drive_scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)  # turns: the driver's
    output_arrived: anyio.Event = field(default_factory=anyio.Event)
    remote_cancel_done: anyio.Event | None = None  # turns: the protocol's cancel went out
    turn_done: anyio.Event = field(default_factory=anyio.Event)  # the driver ended (wind-down included)
    turn_stopped: ConversationEnd | None = None  # why the engine cut this turn's driver off

    def new_turn(self) -> None:
        """Reset the current turn's facts (a conversation's later turn begins)."""
        self.result = None
        self.settled = anyio.Event()
        self.cancelled_locally = False
        self.drive_scope = anyio.CancelScope()
        self.output_arrived = anyio.Event()
        self.remote_cancel_done = None
        self.turn_done = anyio.Event()
        self.turn_stopped = None
