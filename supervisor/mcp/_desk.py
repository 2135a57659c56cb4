"""The runs an MCP server holds: queued, running, idle, settled; at most N turns at once.

Kept apart from the MCP wire so its rules (admission, cancellation, conversations, what
a settled run reports) read on their own and can be driven without a client.

A run is *settled* for a tool caller only once its tree is gone: the desk disposes
before it records the result, so the parent model never hears "done" about a child
that is still running.

A run started with ``keep_alive`` is a conversation (``conversation=True``): after a
turn it is ``idle``, holding its child but no slot; :meth:`Desk.send` runs its next
turn once a slot is free (a turn, the first or a sent one, holds a slot from its start
to its result).  It ends when the client closes it (:meth:`Desk.close`), when it ends
by itself (the child died, ``idle_timeout_ms``, a limit: the chart enters its teardown
stage), or when the server goes away; then its tree is disposed and the run settles.
"""

from __future__ import annotations

import collections
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from machines import IDLE, CommonEvent, Transition
from supervisor._abort import AbortSignal
from supervisor._errors import (
    ConversationOver,
    InvalidRequest,
    StartAborted,
    StartFailed,
    TeardownFailed,
    TurnInProgress,
)
from supervisor._handle import Run
from supervisor._registry import Registry
from supervisor._seam import Resources, SessionPlan, StopReason, SubagentRequest, SubagentResult, Usage
from supervisor.fronts._consumers import foreground_text
from supervisor.fronts._sequence import RunOutcome, supervise
from supervisor.process import PinnedDirectory, pinned
from supervisor.workspace import Workspace

log = logging.getLogger("supervisor")


class DeskState(enum.StrEnum):
    QUEUED = "queued"
    """Waiting for a slot: a run not started yet, or a conversation's next turn."""
    RUNNING = "running"
    """A turn runs (a one-shot run's only one)."""
    IDLE = "idle"
    """A conversation between turns: its child lives, it holds no slot."""
    CLOSING = "closing"
    """A conversation that has ended: its tree is going down."""
    SETTLED = "settled"
    """Over, its tree gone."""


@dataclass(frozen=True)
class Settled:
    """What a tool caller sees of a turn or a finished run (closed facts and the child's answer)."""

    run_id: str
    provider: str
    stop_reason: str
    output: str
    diagnostic: str | None
    resources: Resources | None = None
    """What the run's tree used (cgroup containment; None in process-tree, before it ran,
    or while a conversation's tree lives)."""
    usage: Usage | None = None
    """What the turn used, as the agent reported it."""
    turn: int = 1
    state: DeskState = DeskState.SETTLED
    keep_alive: bool = False
    ended: str | None = None
    """A conversation that is over: the closed line a further send gets."""
    quiescent: bool | None = None
    """For a final word: whether the whole tree was proven gone."""
    workspace: Workspace | None = None
    """The run's own worktree (``workspace = "worktree"``), once its tree is gone."""

    @property
    def completed(self) -> bool:
        return self.stop_reason == StopReason.COMPLETED

    @property
    def text(self) -> str:
        """The foreground text a parent model reads."""
        return foreground_text(
            SubagentResult(output=self.output, stop_reason=self.stop_reason, diagnostic=self.diagnostic)
        )

    def as_dict(self) -> dict[str, Any]:
        document = {
            "run_id": self.run_id,
            "provider": self.provider,
            "turn": self.turn,
            "state": str(self.state),
            "stop_reason": self.stop_reason,
            "output": self.output,
            "diagnostic": self.diagnostic,
            "usage": None if self.usage is None else self.usage.model_dump(),
            "resources": None if self.resources is None else self.resources.model_dump(),
        }
        if self.workspace is not None:
            document["workspace"] = self.workspace.model_dump()
        if self.keep_alive:
            document["ended"] = self.ended
        return document


StageListener = Callable[[str], None]


class DeskError(Exception):
    """A tool call the desk refuses (a fixed text, no child data): an ``isError`` answer."""


@dataclass
class DeskRun:
    """One run on the desk, from queued to settled."""

    run: Run
    provider: str
    keep_alive: bool = False
    abort: AbortSignal = field(default_factory=AbortSignal)
    state: DeskState = DeskState.QUEUED
    settled: Settled | None = None
    """The final word: set once the run is over and its tree gone."""
    done: anyio.Event = field(default_factory=anyio.Event)
    last: Settled | None = None
    """A conversation's latest settled turn."""
    quiet: anyio.Event = field(default_factory=anyio.Event)
    """Set while the run is idle or settled (a waiter's wake-up); replaced when a turn begins."""
    listeners: list[StageListener] = field(default_factory=list)
    pin: PinnedDirectory | None = None
    """The checked cwd, held open until the run has started (the run starts in it)."""
    begun: bool = False
    """The run got its first slot (it starts, or started)."""
    published: bool = False
    """A conversation's start has finished (its first turn runs, or ran)."""
    turn_busy: bool = False
    """A conversation's sent turn is queued or running."""
    closing: anyio.Event = field(default_factory=anyio.Event)
    """A conversation is to end (closed, ended by itself, or the server is going away)."""
    turn_moved: anyio.Event = field(default_factory=anyio.Event)
    """The current turn is over at the child: the chart went idle or into its teardown."""
    queued_send: anyio.CancelScope | None = None
    """A sent turn waiting for a slot (cancel_subagent drops it)."""
    first_turn: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """The conversation's wait for its first turn (close_subagent ends it at once)."""
    resumed: bool = False
    """A journaled conversation reopened by a cold resume: published idle, without a turn."""
    idle_since: float = 0.0
    """When the conversation last went idle (anyio's clock): the bound on idle ones ends the
    least recently used first."""
    on_idle: Callable[[DeskRun], None] | None = None
    """The desk's bound on idle conversations, told each time this one goes idle."""

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def stage(self) -> str:
        return self.run.stage

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "provider": self.provider,
            "state": str(self.state),
            "stage": self.stage,
            "turn": self.run.turn,
            "keep_alive": self.keep_alive,
        }

    def set_state(self, state: DeskState) -> None:
        self.state = state
        if state in (DeskState.IDLE, DeskState.SETTLED):
            self.quiet.set()
        elif self.quiet.is_set():
            self.quiet = anyio.Event()
        if state == DeskState.IDLE:
            self.idle_since = anyio.current_time()
            if self.on_idle is not None:
                self.on_idle(self)

    def on_transition(self, entry: Transition) -> None:
        if entry.target in self.run.vocabulary.stages:
            for listener in list(self.listeners):
                listener(entry.target)
        if self.keep_alive:
            if entry.event == CommonEvent.TURN_SENT:
                self.turn_moved = anyio.Event()  # a new turn: it has not moved on yet
            elif entry.target == IDLE:
                self.turn_moved.set()
            elif entry.target == self.run.vocabulary.teardown_stage:
                self.turn_moved.set()  # the conversation is over (or being disposed)
                self.closing.set()


KEEP_SETTLED = 100
"""Settled runs a server remembers (``--keep-settled``); older ones are forgotten."""
MAX_IDLE = 16
"""Idle conversations a server keeps (``--max-idle``); beyond, the least recently used close."""


class Desk:
    """Starts runs in a task group of its own, at most ``max_concurrent`` turns at once."""

    def __init__(
        self,
        registry: Registry,
        task_group: TaskGroup,
        *,
        max_concurrent: int,
        keep_settled: int = KEEP_SETTLED,
        max_idle: int = MAX_IDLE,
    ) -> None:
        self._registry = registry
        self._task_group = task_group
        self._slots = anyio.Semaphore(max_concurrent)
        self._runs: dict[str, DeskRun] = {}
        self._keep_settled = keep_settled
        self._max_idle = max_idle
        self._settled_ids: collections.deque[str] = collections.deque()

    def _bound_idle(self, entry: DeskRun) -> None:
        """More than ``max_idle`` idle conversations (each a live agent, megabytes): the least
        recently used are closed, as ``close_subagent`` would (their next send is over)."""
        idle = [e for e in self._runs.values() if e.state == DeskState.IDLE and not e.closing.is_set()]
        idle.sort(key=lambda e: e.idle_since)
        for old in idle[: max(0, len(idle) - self._max_idle)]:
            log.info("mcp: run %s closed: more than %d idle conversations", old.run_id, self._max_idle)
            self.close(old)

    def _forget_old(self, entry: DeskRun) -> None:
        """Keep the ``keep_settled`` most recently settled runs; older ones are forgotten (a
        tool asked about one answers ``unknown run_id``): a long-lived server's memory stays
        bounded."""
        self._settled_ids.append(entry.run_id)
        while len(self._settled_ids) > self._keep_settled:
            self._runs.pop(self._settled_ids.popleft(), None)

    def start(
        self,
        provider: str,
        request: SubagentRequest,
        *,
        pin: PinnedDirectory | None = None,
        keep_alive: bool = False,
    ) -> DeskRun:
        """Queue a run at once; it starts when a slot is free.  Raises the registry's checks
        (a kind that cannot converse is refused here, before anything spawns).

        ``pin`` (the request's checked ``parent_cwd``, held open) is the directory the run
        starts in; the desk releases it once the run has started.
        """
        chosen = self._registry.check(provider, request, conversation=keep_alive)
        holder: list[DeskRun] = []

        def trace(entry: Transition) -> None:
            if holder:
                holder[0].on_transition(entry)

        entry = DeskRun(
            # a ready warm child, when one fits (one still starting is not waited for: the
            # run id is answered at once)
            run=self._registry.create_run(chosen.name, request, trace=trace, journaled=True),
            provider=provider,
            pin=pin,
            keep_alive=keep_alive,
        )
        holder.append(entry)
        entry.on_idle = self._bound_idle
        self._runs[entry.run_id] = entry
        self._task_group.start_soon(self._converse if keep_alive else self._drive, entry)
        return entry

    def resume(self, provider: str, request: SubagentRequest, session: SessionPlan) -> DeskRun:
        """Queue the cold resume of a journaled conversation (``send_subagent`` on a run id
        the journal holds): it starts in a slot and is published idle; a caller waits for
        ``entry.quiet`` before its first send.  An agent that cannot continue the session
        settles it with the closed ``not resumable`` line."""
        holder: list[DeskRun] = []

        def trace(entry: Transition) -> None:
            if holder:
                holder[0].on_transition(entry)

        run = self._registry.create_run(provider, request, trace=trace, session=session)
        entry = DeskRun(run=run, provider=provider, keep_alive=True, resumed=True)
        holder.append(entry)
        entry.on_idle = self._bound_idle
        self._runs[entry.run_id] = entry
        self._task_group.start_soon(self._converse, entry)
        return entry

    def get(self, run_id: str) -> DeskRun | None:
        return self._runs.get(run_id)

    def all(self) -> list[DeskRun]:
        return list(self._runs.values())

    def cancel(self, entry: DeskRun) -> None:
        """Local cancellation: a queued run settles at once (it never spawns), a running one is
        cancelled and settles once its tree is gone.  In a conversation only the running turn
        is cancelled (or the queued one dropped); the conversation stays open."""
        if entry.keep_alive and entry.begun:
            if entry.queued_send is not None:
                entry.queued_send.cancel()
            entry.run.cancel()
            return
        entry.abort.abort()
        if entry.state is DeskState.QUEUED and not entry.begun:
            self._settle(entry, StopReason.ABORTED, "", None)

    def close(self, entry: DeskRun) -> None:
        """End a conversation: a running turn is cancelled at once, the tree goes down."""
        if not entry.begun:
            self.cancel(entry)  # never started: it settles aborted
        elif not entry.published:
            entry.abort.abort()  # still starting: the start is rolled back at once
        entry.closing.set()
        entry.first_turn.cancel()

    def cancel_all(self) -> None:
        """The server is going away: every run ends, every conversation too."""
        for entry in list(self._runs.values()):
            entry.abort.abort()
            entry.closing.set()
            entry.first_turn.cancel()
            if entry.state is DeskState.QUEUED and not entry.begun:
                self._settle(entry, StopReason.ABORTED, "", None)

    def force_kill_all(self) -> None:
        """Skip the teardown graces of every run (cancel them first)."""
        self.cancel_all()
        for entry in list(self._runs.values()):
            entry.run.force_kill()

    # -- one-shot runs --------------------------------------------------------------

    async def _drive(self, entry: DeskRun) -> None:
        try:
            async with self._slots:
                if entry.abort.aborted:  # cancelled while queued: nothing ever spawned
                    self._settle(entry, StopReason.ABORTED, "", None)
                    return
                entry.begun = True
                entry.set_state(DeskState.RUNNING)
                await self._run(entry)
        finally:
            if entry.settled is None:  # the server is going away under us
                self._settle(entry, StopReason.ABORTED, "", None)

    async def _run(self, entry: DeskRun) -> None:
        # Disposed before it is recorded (also when the server goes away under it).  The
        # child starts in the directory that was checked (the pin), whatever its path names now.
        with pinned(entry.pin):
            outcome = await supervise(entry.run, entry.abort)
        self._settle_outcome(entry, outcome)

    # -- conversations --------------------------------------------------------------

    async def _converse(self, entry: DeskRun) -> None:
        """A conversation's life: turn 1 in a slot, then idle until it is to end, then
        disposed (shielded) and settled."""
        run = entry.run
        start_error: StartFailed | StartAborted | None = None
        teardown_error: TeardownFailed | None = None
        refused: ConversationOver | None = None  # a cold resume the agent cannot continue
        published = False
        try:
            async with anyio.create_task_group() as tg:  # the run's background work lives here
                try:
                    async with self._slots:
                        if entry.abort.aborted:  # cancelled while queued: nothing ever spawned
                            return
                        entry.begun = True
                        entry.set_state(DeskState.RUNNING)
                        try:
                            with pinned(entry.pin):
                                await run.start(tg, entry.abort, conversation=True)
                        except (StartFailed, StartAborted) as exc:
                            start_error = exc
                            return
                        except ConversationOver as exc:  # rolled back already: closed facts
                            refused = exc
                            return
                        finally:
                            self._release_pin(entry)
                        published = entry.published = True
                        if entry.resumed:  # a cold resume has no turn yet: idle at once
                            entry.set_state(DeskState.IDLE)
                        else:
                            with entry.first_turn:  # close() cancels it: the dispose below ends the turn
                                result = await run.result()
                                if not run.cancelled_locally:  # else it winds down on its own
                                    await entry.turn_moved.wait()
                                if not entry.closing.is_set():
                                    entry.last = self._settled(entry, result, DeskState.IDLE)
                                    entry.set_state(DeskState.IDLE)
                    await entry.closing.wait()
                finally:
                    if published:
                        entry.set_state(DeskState.CLOSING)
                        with anyio.CancelScope(shield=True):
                            try:
                                await run.dispose()
                            except TeardownFailed as exc:
                                teardown_error = exc
        finally:
            if entry.settled is None:
                final: SubagentResult | None = None
                if published and not (entry.resumed and entry.last is None):
                    with anyio.CancelScope(shield=True):
                        final = await run.result()
                if refused is not None:
                    self._settle(entry, StopReason.ERROR, "", None, ended=str(refused))
                elif published and entry.resumed and entry.last is None:  # closed before any turn
                    over = run.conversation_over
                    ended = "subagent conversation is over" if over is None else str(over)
                    self._settle(entry, StopReason.ABORTED, "", None, ended=ended)
                elif published or start_error is not None:
                    self._settle_outcome(entry, RunOutcome(run, final, start_error, teardown_error))
                else:  # aborted before it began: nothing ever spawned
                    self._settle(entry, StopReason.ABORTED, "", None)

    async def send(self, entry: DeskRun, task: str) -> Settled:
        """The next turn of a conversation, once a slot is free: its result, or the final
        word when the turn ended the conversation (once its tree is gone)."""
        if not entry.keep_alive:
            raise DeskError(f"subagent run {entry.run_id} was not started with keep_alive")
        if entry.turn_busy or entry.state in (DeskState.QUEUED, DeskState.RUNNING):
            raise DeskError(str(TurnInProgress()))
        if entry.closing.is_set() or entry.state in (DeskState.CLOSING, DeskState.SETTLED):
            raise DeskError(await self._over_text(entry))
        entry.turn_busy = True
        entry.set_state(DeskState.QUEUED)
        try:
            with anyio.CancelScope() as queued:
                entry.queued_send = queued
                await self._slots.acquire()
            entry.queued_send = None
            if queued.cancelled_caught:
                raise DeskError("subagent turn was cancelled before it started")
            try:
                if entry.closing.is_set():
                    raise DeskError(await self._over_text(entry))
                entry.set_state(DeskState.RUNNING)
                try:
                    result = await entry.run.send(task)
                except anyio.get_cancelled_exc_class():
                    # The request was cancelled: so was the turn (a local cancellation, the
                    # conversation stays open); its aborted result is the latest word.
                    with anyio.CancelScope(shield=True):
                        if entry.run.turn > (entry.last.turn if entry.last else 1):
                            cancelled = await entry.run.result()
                            entry.last = self._settled(entry, cancelled, DeskState.IDLE)
                    raise
                except ConversationOver as exc:  # ended by itself just now: closed facts
                    entry.closing.set()
                    raise DeskError(str(exc)) from None
                except (TurnInProgress, InvalidRequest) as exc:  # fixed texts
                    raise DeskError(str(exc)) from None
                return await self._turn_settled(entry, result)
            finally:
                self._slots.release()
        finally:
            entry.queued_send = None
            entry.turn_busy = False
            if entry.state in (DeskState.QUEUED, DeskState.RUNNING):
                entry.set_state(DeskState.CLOSING if entry.closing.is_set() else DeskState.IDLE)

    async def _turn_settled(self, entry: DeskRun, result: SubagentResult) -> Settled:
        """A conversation's turn has its result: idle, or (the turn ended the conversation)
        the final word once the tree is gone."""
        run = entry.run
        if not run.cancelled_locally:  # a cancelled turn winds down on its own; the next send waits
            await entry.turn_moved.wait()
        if entry.closing.is_set():
            entry.set_state(DeskState.CLOSING)
            await entry.done.wait()
            assert entry.settled is not None
            return entry.settled
        entry.last = self._settled(entry, result, DeskState.IDLE)
        entry.set_state(DeskState.IDLE)
        return entry.last

    async def _over_text(self, entry: DeskRun) -> str:
        await entry.done.wait()
        assert entry.settled is not None
        return entry.settled.ended or "subagent conversation is over"

    async def wait_over(self, entry: DeskRun) -> Settled:
        """The final word on a run, once it is over and its tree gone."""
        await entry.done.wait()
        assert entry.settled is not None
        return entry.settled

    # -- settling -------------------------------------------------------------------

    @staticmethod
    def _release_pin(entry: DeskRun) -> None:
        if entry.pin is not None:
            entry.pin.close()
            entry.pin = None

    def _settled(self, entry: DeskRun, result: SubagentResult, state: DeskState) -> Settled:
        return Settled(
            run_id=entry.run_id,
            provider=entry.provider,
            stop_reason=str(result.stop_reason),
            output=result.output,
            diagnostic=result.diagnostic,
            usage=result.usage,
            turn=entry.run.turn,
            state=state,
            keep_alive=entry.keep_alive,
        )

    def _settle_outcome(self, entry: DeskRun, outcome: RunOutcome) -> None:
        over = entry.run.conversation_over
        self._settle(
            entry,
            outcome.stop_reason,
            outcome.output,
            outcome.diagnostic,
            outcome.run.resources,
            None if outcome.result is None else outcome.result.usage,
            None if over is None else str(over),
            outcome.quiescent,
        )

    def _settle(
        self,
        entry: DeskRun,
        stop_reason: str,
        output: str,
        diagnostic: str | None,
        resources: Resources | None = None,
        usage: Usage | None = None,
        ended: str | None = None,
        quiescent: bool = True,
    ) -> None:
        if entry.settled is not None:
            return
        entry.settled = Settled(
            run_id=entry.run_id,
            provider=entry.provider,
            stop_reason=str(stop_reason),
            output=output,
            diagnostic=diagnostic,
            resources=resources,
            usage=usage,
            turn=entry.run.turn,
            keep_alive=entry.keep_alive,
            ended=ended,
            quiescent=quiescent,
            workspace=getattr(entry.run, "workspace", None),
        )
        entry.set_state(DeskState.SETTLED)
        self._release_pin(entry)
        entry.closing.set()
        entry.turn_moved.set()
        entry.done.set()
        self._forget_old(entry)


def inside_roots(candidate: Path, roots: list[Path]) -> bool:
    """Whether ``candidate`` (already resolved) is one of ``roots`` or below one."""
    return any(candidate == root or candidate.is_relative_to(root) for root in roots)
