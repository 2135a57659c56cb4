"""What a caller holds: the :class:`Run` protocol.

Callers (the registry's users, the CLI, consumers) see a run only through this
protocol; the base providers extend (:class:`~supervisor.ProviderRun`) carries the
provider-side helpers as well, and those are not part of what a caller may use.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from anyio.abc import TaskGroup

from machines import AuditTrail, TransitionSink, Vocabulary
from supervisor._abort import AbortSignal
from supervisor._errors import ConversationOver
from supervisor._public import home
from supervisor._seam import Capabilities, Progress, Resources, SubagentRequest, SubagentResult
from supervisor.process import ExitFacts
from supervisor.workspace import Workspace


@runtime_checkable
class Run(Protocol):
    """One supervised child run, as a caller sees it."""

    @property
    def id(self) -> str:
        """Minted by the parent (uuid4); the child's own session id never leaks."""
        ...

    @property
    def provider_name(self) -> str: ...

    @property
    def agent_session_id(self) -> str | None:
        """The agent's own session id (ACP's ``sessionId``, or whatever id the kind's
        protocol gives a session) once its session exists, bounded printable; None before, or when
        the agent's id is unusable.  Host-side only (a journal keeps it to resume the
        session later): never in a result, a diagnostic, a span or a log at INFO."""
        ...

    @property
    def vocabulary(self) -> Vocabulary:
        """The provider's closed vocabulary (its label and stages)."""
        ...

    @property
    def stage(self) -> str:
        """The current stage, read from the run's lifecycle chart."""
        ...

    @property
    def state(self) -> str:
        """The active lifecycle state (a stage, ``settled``, ``idle`` between the turns of
        a conversation, ``quiescent`` or ``leaked``)."""
        ...

    @property
    def conversation(self) -> bool:
        """Whether the run was started as a conversation (``conversation=True``)."""
        ...

    @property
    def turn(self) -> int:
        """The current turn's number: 1 is the request's task, each ``send`` the next."""
        ...

    @property
    def conversation_over(self) -> ConversationOver | None:
        """Once a conversation has ended (and why is final): the ``ConversationOver`` a
        ``send`` would raise, closed facts only; None while it is open, or for a run that
        is not a conversation."""
        ...

    @property
    def stages_entered(self) -> tuple[str, ...]:
        """Stage names in the order first entered."""
        ...

    @property
    def audit(self) -> AuditTrail:
        """Every transition of the run's charts, in order."""
        ...

    @property
    def exit_facts(self) -> ExitFacts | None:
        """The direct child's exit code and signal, once observed."""
        ...

    @property
    def containment(self) -> str:
        """How the run's processes are contained: ``cgroup`` or ``process-tree``."""
        ...

    @property
    def quiescent(self) -> bool | None:
        """None until disposed; then whether the whole tree was proven gone."""
        ...

    @property
    def workspace(self) -> Workspace | None:
        """The run's own worktree (``workspace = "worktree"``), once the run is torn down."""
        ...

    @property
    def resources(self) -> Resources | None:
        """What the whole tree used (kernel counters, read at teardown); None in
        process-tree containment or before the teardown."""
        ...

    @property
    def settled(self) -> bool:
        """Whether the current turn's result has settled."""
        ...

    @property
    def cancelled_locally(self) -> bool: ...

    @property
    def progress(self) -> Progress:
        """The latest progress snapshot: stage, turn, elapsed time, tool calls, plan,
        permissions, answer bytes and usage so far, closed facts and numbers only."""
        ...

    def watch(self) -> AsyncIterator[Progress]:
        """``async for p in run.watch()``: coalesced snapshots (at most one per 250 ms,
        the last one always delivered), ending when a one-shot run settles or a
        conversation is over.  Any number of watchers; a slow one never holds the run up."""
        ...

    async def start(
        self, task_group: TaskGroup, abort: AbortSignal | None = None, *, conversation: bool = False
    ) -> None:
        """Spawn and handshake; return once published (``Registry.run`` calls it)."""
        ...

    async def result(self) -> SubagentResult:
        """The latest turn's settled result (waits for a running turn); never raises for
        a child-level failure."""
        ...

    async def send(self, task: str) -> SubagentResult:
        """Run the next turn of a conversation; its result.  Raises ``TurnInProgress``
        while a turn runs and ``ConversationOver`` once the conversation has ended."""
        ...

    async def output_arrived(self) -> None:
        """Return once the child has sent some answer text in the current turn (or the turn has settled)."""
        ...

    def cancel(self) -> None:
        """Local cancellation of the running turn: settle ``aborted`` at once, keeping
        partial output (a conversation stays open)."""
        ...

    async def dispose(self) -> None:
        """Reach whole-tree quiescence or raise ``TeardownFailed``.  Idempotent; ends a
        conversation."""
        ...

    def force_kill(self) -> None:
        """Skip the remaining teardown graces."""
        ...


@runtime_checkable
class Provider(Protocol):
    """What the registry needs of a provider."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def inherits_parent_context(self) -> bool: ...

    def create_run(self, request: SubagentRequest, *, trace: TransitionSink | None = None) -> Run:
        """A fresh, unstarted run for ``request``.

        A kind whose capabilities declare ``resume`` (or that honours ``SessionPlan.run_id``)
        also takes ``session: SessionPlan | None = None``; the registry passes it only when
        there is a plan, so a provider written before it existed is called as above.
        """
        ...


home("supervisor", Run, Provider)
