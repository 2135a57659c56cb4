"""The base every provider's run extends, and the start/settle/cancel/dispose rules
they all share.

A provider subclasses :class:`ProviderRun` (generic in its config model), sets the
class attributes ``vocabulary`` and ``lifecycle``, and fills in the hooks:

* ``handshake()``       spawn the child and finish the protocol handshake (stages
  before publication); raise :class:`StepFailed` with safe facts on failure;
* ``drive()``           run one turn (its text is :attr:`ProviderRun.task`) after
  publication and return its result;
* ``partial_output()``  the partial output collected so far (of the current turn);
* ``remote_cancel()``   the protocol's best-effort cancel (optional);
* ``before_ladder()`` / ``after_ladder()`` protocol shutdown before the process ladder,
  and releasing protocol resources after it (optional);
* for a kind that converses (``Capabilities(conversation=True)``, a chart built with a
  ``turn_stage``): ``begin_turn()`` resets per-turn state before each later turn,
  ``session_usable()`` says whether a settled turn left a session that can take the
  next one, and ``session_lost()`` returns when an idle session can take no more.

Everything before publication runs under the config's ``start_timeout_ms``; a start
that overruns it fails in its current stage as the vocabulary's ``start_timeout_category``.

Limits (SPEC section 15).  The kernel enforces ``memory_max``, ``pids_max`` and
``cpu_max`` in the run's cgroups (the process layer); the turn guard (``_turn_guard``)
enforces ``timeout_ms`` (counted from spawn, so it bounds the start too) and
``stall_timeout_ms``.  A run a limit stopped settles ``error``: its diagnostic is the
failure line, then the limit line.  When the supervisor stopped the turn itself (time,
silence), the failure line names the current stage and the vocabulary's
``start_timeout_category`` (the category of the other limit the supervisor's clock
enforces); when the kernel did (an out-of-memory kill, or a refused fork in a run
that failed), the provider's own failure line stays, with its exit facts.

Everything else (abort and cancellation rules, the single settlement, the output cap,
rollback and dispose over the whole tree, the audit trail, the diagnostic bound) lives
here, so every provider behaves the same at the seam.  A provider's bug keeps those
promises too: a hook or a task on the run's task group that raises settles the run as
an ``unknown`` failure (:mod:`supervisor.run._guard`), and the tree is torn down by the
dispose that follows; ``dispose()`` reaches the teardown whatever the provider's
``partial_output()`` or chart does.  A run is built from one
:class:`RunContext`; callers see it only as a :class:`~supervisor.Run`.

Conversations
-------------
A run started with ``conversation=True`` keeps its child after a turn settles.  Every
turn (the request's task is turn 1, each :meth:`ProviderRun.send` the next) goes
through the one per-turn driver, ``_drive_and_settle``, inside its own turn guard
(``timeout_ms`` counts from spawn for turn 1, from the send for the others): it calls
``drive()``, settles the turn's result once, then either moves the chart to ``idle``
(the child lives and ``session_usable()``) and watches the idle session
(``idle_timeout_ms``, ``session_lost()``), or ends the conversation and takes the tree
down at once.

A cancelled turn (``cancel()``, or the task awaiting ``send`` being cancelled) settles
``aborted`` at once, as in a one-shot run, but its driver keeps reading until the agent
has ended the turn (the protocol's cancel was sent), for at most ``dispose_grace_ms``:
the next turn must not start while the agent is still in the old one.  A driver cut
off by that bound ends the conversation, as a turn a limit stopped does.  The abort
signal, ``dispose()`` and leaving the ``async with`` end the conversation, cancelling a
running turn at once.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus

from machines import (
    IDLE,
    SETTLED,
    AuditTrail,
    CommonEvent,
    Lifecycle,
    TeardownLadder,
    TransitionSink,
    Vocabulary,
)
from supervisor._abort import AbortSignal
from supervisor._config import ProviderConfig
from supervisor._diagnostic import (
    FailureFacts,
    LimitFacts,
    LimitResource,
    LimitScope,
    bound_diagnostic,
    join_lines,
)
from supervisor._errors import (
    ConversationEnd,
    ConversationOver,
    InvalidRequest,
    StartAborted,
    StartFailed,
    TeardownFailed,
    TurnInProgress,
)
from supervisor._kinds import kind_gen_ai_provider, kind_name
from supervisor._public import home
from supervisor._seam import (
    TOOL_KINDS,
    Progress,
    Resources,
    SessionPlan,
    StopReason,
    SubagentRequest,
    SubagentResult,
    Usage,
)
from supervisor.common._clean import clean_text
from supervisor.common._logging import raw_failure
from supervisor.common._text import cap_text
from supervisor.journal import _switch as _journal
from supervisor.process import (
    Containment,
    CwdError,
    ExitFacts,
    HitScope,
    ManagedProcess,
    SpawnFailed,
    SpawnSpec,
    TeardownReport,
    child_environment,
    containment_for,
    resolve_run_cwd,
)
from supervisor.process._host_limits import refuse_uncovered
from supervisor.run._deprecated import adopt_old_hooks
from supervisor.run._guard import GuardedTaskGroup, is_cancellation
from supervisor.run._progress import ProgressTracker
from supervisor.run._resume import NotResumable, check_resumable, not_resumable, plan_run_id, valid_session_id
from supervisor.run._turn_guard import TurnLimits, guard_turn
from supervisor.telemetry import _switch as _telemetry
from supervisor.workspace import RunWorkspace, Workspace, WorkspaceFailed

log = logging.getLogger("supervisor")

REMOTE_CANCEL_TIMEOUT = 1.0


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


ConfigT = TypeVar("ConfigT", bound=ProviderConfig)


@dataclass(frozen=True, slots=True)
class RunContext(Generic[ConfigT]):
    """Everything a run is built from: what a provider's ``create_run`` hands its run."""

    provider_name: str
    config: ConfigT
    request: SubagentRequest
    trace: TransitionSink | None = None
    """Sees every transition as it happens (the CLI's ``--trace``)."""
    tree: Containment | None = None
    """Replaces the configured containment (tests model an unkillable tree with it)."""
    session: SessionPlan | None = None
    """How the run treats the agent's own session (its run id, a session to resume);
    None: a new session under a new run id."""


class ProviderRun(ABC, Generic[ConfigT]):
    """The base of every provider's run.  Callers obtain runs from ``Registry.run`` and
    see them as :class:`~supervisor.Run`; the rest of this class is for providers."""

    vocabulary: ClassVar[Vocabulary]
    lifecycle: ClassVar[type[Lifecycle]]
    tool_kinds: ClassVar[frozenset[str]] = TOOL_KINDS
    """The closed set of tool-call kinds :meth:`note_tool_call` counts (default: ACP's
    ``ToolKind``); it must hold ``other``, which any kind outside it becomes."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        adopt_old_hooks(cls)  # a run written for 0.2 (``_start``, ``_drive``, ...) still runs

    def __init__(self, context: RunContext[ConfigT]) -> None:
        self.session: SessionPlan | None = context.session
        """The session plan (``session.resume``: continue that agent session, a cold resume)."""
        self.id = plan_run_id(context.session) or str(uuid.uuid4())
        # ``context.tree`` is the test seam: a containment substituted for the configured one.
        self.tree: Containment = (
            context.tree
            if context.tree is not None
            else containment_for(context.config.containment, context.config.cgroup_root)
        )
        refuse_uncovered(self.tree, context.provider_name)  # a host ceiling bounds every run, or none starts
        self.provider_name = context.provider_name
        self.config: ConfigT = context.config
        config = context.config
        self._workspace = RunWorkspace(config.workspace, config.workspace_base, config.workspace_keep)
        self.request = context.request
        self._telemetry = _telemetry.for_run()
        self._journal = _journal.for_run()  # the journal's hooks (a no-op when not journaled)
        self.audit = AuditTrail(self.id, sink=self._journal.sink(self._telemetry.sink(context.trace)))
        plan = context.session
        self._turn_number = plan.turns_before if plan is not None and plan.resume is not None else 1
        self.audit.turn = self._turn_number  # a resumed conversation's start belongs to its last turn
        self.machine = self.lifecycle(listeners=[self.audit])
        self._published = False
        self.process: ManagedProcess | None = None
        self._task_group: TaskGroup | None = None
        self._closed = anyio.Event()
        self._result: SubagentResult | None = None
        self._settled = anyio.Event()
        self._cancelled_locally = False
        self._drive_scope = anyio.CancelScope()
        self._dispose_done: anyio.Event | None = None
        self._dispose_error: TeardownFailed | None = None
        self._quiescent: bool | None = None
        self._remove_abort: Callable[[], None] = lambda: None
        self._output_arrived = anyio.Event()
        self._remote_cancel_done: anyio.Event | None = None
        self._start_scope: anyio.CancelScope | None = None
        self._task_error: BaseException | None = None
        self._categories: dict[str, str] = {}  # failure line -> category, of the facts built here
        self._failure_category: str | None = None
        self._teardown_category: str | None = None
        self._spawned_at = 0.0  # on anyio's clock: where the first turn's timeout_ms counts from
        self._prestarted = False  # a warm child: spawned and handshaken before its request
        # conversations (see the module docstring)
        self._conversation = False
        self._resumed_idle = False  # published idle by a cold resume; no turn in this process yet
        self._first_turn = self._turn_number + 1 if self.resuming else 1  # the turn of ``_results[0]``
        self._agent_session_id: str | None = None
        self._turn_task = context.request.task
        self._turn_started_at = 0.0  # on anyio's clock: where this turn's timeout_ms counts from
        self._results: list[SubagentResult] = []
        self._turn_done = anyio.Event()  # the current turn's driver has finished (wind-down included)
        self._turn_stopped: ConversationEnd | None = None  # why the base cut this turn's driver off
        self._sending = False
        self._over: ConversationEnd | None = None
        self._over_exit: ExitFacts | None = None
        self._over_limit: LimitFacts | None = None  # the kernel's limit that ended an idle child
        self._over_known = anyio.Event()  # why the conversation ended is final
        self._idle_scope: anyio.CancelScope | None = None
        self._teardown_event: CommonEvent | None = None
        self._teardown_done: anyio.Event | None = None
        self._teardown_error: TeardownFailed | None = None
        self._run_progress = ProgressTracker(self.tool_kinds, lambda: (self.machine.stage, self._turn_number))

    # -- what a caller sees -----------------------------------------------------------

    @property
    def stage(self) -> str:
        """The current stage, read from the lifecycle machine."""
        return self.machine.stage

    @property
    def stages_entered(self) -> tuple[str, ...]:
        """Stage names in the order first entered, without repeats."""
        return self.machine.stages_entered

    @property
    def state(self) -> str:
        """The active lifecycle state (a stage, ``settled``, ``idle``, ``quiescent`` or ``leaked``)."""
        return self.machine.state_name

    @property
    def conversation(self) -> bool:
        """Whether the run was started as a conversation (``conversation=True``)."""
        return self._conversation

    @property
    def turn(self) -> int:
        """The current turn's number: 1 for the request's task, then one more per :meth:`send`
        (a resumed conversation starts at ``session.turns_before``)."""
        return self._turn_number

    @property
    def resuming(self) -> bool:
        """Whether the run continues an agent's session (``session.resume``): a cold resume,
        published idle without a turn."""
        return self.session is not None and self.session.resume is not None

    @property
    def agent_session_id(self) -> str | None:
        """The agent's own session id (ACP ``sessionId``, Codex ``threadId``, Claude Code
        ``session_id``) once the session exists, when it is a bounded printable string;
        else None.  Host-side only: for a journal to resume the session later, never in a
        result, a diagnostic, a span or a log at INFO."""
        return self._agent_session_id

    @agent_session_id.setter
    def agent_session_id(self, value: object) -> None:
        """Providers set it once the agent's session exists; an unusable value is None."""
        self._agent_session_id = valid_session_id(value)

    @property
    def task(self) -> str:
        """The current turn's text (the request's task in turn 1): what ``drive()`` sends."""
        return self._turn_task

    @property
    def exit_facts(self) -> ExitFacts | None:
        return None if self.process is None else self.process.exit_facts

    @property
    def containment(self) -> str:
        """How this run's processes are contained: ``cgroup`` or ``process-tree``."""
        return self.tree.mode

    @property
    def quiescent(self) -> bool | None:
        """None until disposed; then whether the whole tree was proven gone."""
        return self._quiescent

    @property
    def settled(self) -> bool:
        """Whether the current turn's result has settled (it never changes afterwards); true
        for a resumed conversation that has run no turn yet (nothing is running)."""
        return self._result is not None or self._resumed_idle

    @property
    def resources(self) -> Resources | None:
        """What the run's whole tree used (kernel counters, read at teardown before the
        cgroups go); None in process-tree containment or before the teardown."""
        usage = None if self.process is None else self.process.usage
        if usage is None:
            return None
        return Resources(
            cpu_s=usage.cpu_s, memory_peak_bytes=usage.memory_peak_bytes, pids_peak=usage.pids_peak
        )

    @property
    def workspace(self) -> Workspace | None:
        """The run's own worktree (``workspace = "worktree"``): known once the run is torn down."""
        return self._workspace.facts

    @property
    def progress(self) -> Progress:
        """The latest :class:`~supervisor.Progress` snapshot (closed facts and numbers)."""
        return self._run_progress.snapshot()

    def watch(self) -> AsyncIterator[Progress]:
        """``async for p in run.watch()``: coalesced snapshots (at most one per 250 ms,
        the last one always delivered), ending when a one-shot run settles, or when a
        conversation is over (every turn is watched; a turn's counts start from zero).
        Any number of watchers; a slow one never holds the run up."""
        return self._run_progress.watch()

    async def output_arrived(self) -> None:
        """Return once the child has sent some answer text in the current turn (or the turn has settled)."""
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def settled() -> None:
                    await self._settled.wait()
                    scope.cancel()

                tg.start_soon(settled)
                await self._output_arrived.wait()
                scope.cancel()

    async def result(self) -> SubagentResult:
        """The settled result of the latest turn (waiting for it if it is running).

        In a one-shot run, the run's result.  Never raises for a child-level failure.  A
        resumed conversation has no result until its first :meth:`send`: asking for one
        before is :class:`~supervisor.InvalidRequest`.
        """
        if self._resumed_idle:
            raise InvalidRequest("a resumed conversation has run no turn yet: send one first")
        settled = self._settled
        await settled.wait()
        return self._results[-1] if self._result is None else self._result

    def cancel(self) -> None:
        """Local cancellation of the running turn: settle ``aborted`` at once (keeping
        partial output).  In a conversation the conversation stays open (the agent is
        asked to end the turn; the next :meth:`send` waits for that, at most
        ``dispose_grace_ms``).  Nothing happens when no turn is running."""
        self._cancel_turn(wind_down=self._conversation and self._over is None)

    def _cancel_turn(self, *, wind_down: bool) -> None:
        if self._resumed_idle:  # a resumed conversation before its first send: no turn to cancel
            return
        if self._result is not None:
            if not wind_down:  # a cancelled turn still winding down stops now
                self._drive_scope.cancel()
            return
        self._cancelled_locally = True
        self._settle(SubagentResult(output=self._partial_or_empty(), stop_reason=StopReason.ABORTED))
        if self._published:  # before publication, the start's own rollback records the end
            self._record(CommonEvent.CANCELLED)
        if wind_down and self._published:
            # The driver reads on until the agent ends the turn, bounded by the grace.
            self._drive_scope.deadline = min(
                self._drive_scope.deadline, anyio.current_time() + self.config.term_grace
            )
            self._ask_remote_cancel()
        else:
            self._stop_turn()

    def _stop_turn(self) -> None:
        """Stop driving the turn, and ask the child to stop it too (best effort)."""
        self._drive_scope.cancel()
        self._ask_remote_cancel()

    def _ask_remote_cancel(self) -> None:
        # Not ``_remote_cancel``: that is the 0.2 name of the ``remote_cancel`` hook.
        if self._task_group is not None and not self._closed.is_set():  # never on a closed group
            self._remote_cancel_done = anyio.Event()
            self._task_group.start_soon(self._best_effort_remote_cancel, self._remote_cancel_done)

    async def send(self, task: str) -> SubagentResult:
        """Run the next turn of the conversation with ``task``; return its result.

        Raises :class:`~supervisor.TurnInProgress` while a turn is running,
        :class:`~supervisor.ConversationOver` once the conversation has ended, and
        :class:`~supervisor.InvalidRequest` for a blank task or a run that is not a
        conversation; none of these changes anything.  Never raises for a child-level
        failure: a failed turn is in its result.  Cancelling the task awaiting this
        call cancels the turn (local cancellation), then re-raises the cancellation.
        """
        if not isinstance(task, str) or not task.strip():
            raise InvalidRequest("subagent task must not be blank")
        if not self._published:
            raise InvalidRequest("subagent run has not been started")
        if not self._conversation:
            raise InvalidRequest("subagent run was not started as a conversation")
        if self._over is not None:
            await self._over_known.wait()
            self._raise_if_over()
        if self._sending or (self._result is None and not self._resumed_idle):
            raise TurnInProgress()
        self._sending = True
        try:
            await self._turn_done.wait()  # a cancelled turn winds down first
            if self._remote_cancel_done is not None:  # its protocol cancel is done with
                await self._remote_cancel_done.wait()
            if self._over is not None:
                await self._over_known.wait()
                self._raise_if_over()
            try:
                self.begin_turn()
            except BaseException as exc:  # a provider's bug: no turn can begin on this session
                if is_cancellation(exc):
                    raise
                log.error("run %s: begin_turn() failed; the conversation ends", self.id)
                raw_failure("run %s: the raw begin_turn failure", self.id, exc=exc)
                self._end_conversation(ConversationEnd.SESSION_UNUSABLE, CommonEvent.CONVERSATION_ENDED)
                self._raise_if_over()
            # A lone surrogate cannot travel to the child as UTF-8: U+FFFD, as in a request's task.
            self._begin_next_turn(clean_text(task))
        finally:
            self._sending = False
        number, settled = self._turn_number, self._settled
        try:
            await settled.wait()
        except anyio.get_cancelled_exc_class():
            if self._turn_number == number:
                self.cancel()
            raise
        return self._results[number - self._first_turn]

    @property
    def conversation_over(self) -> ConversationOver | None:
        """The error a :meth:`send` would raise now, once the conversation has ended and
        why is final (the child's exit facts observed, or their grace passed); else None
        (always None for a run that is not a conversation)."""
        return self._over_error() if self._conversation and self._over_known.is_set() else None

    def _over_error(self) -> ConversationOver | None:
        if self._over is None:
            return None
        facts = self._over_exit
        return ConversationOver(
            self.vocabulary.label,
            self._turn_number,
            self._over,
            exit_code=facts.exit_code if facts else None,
            signal=facts.signal if facts else None,
            limit=None if self._over_limit is None else self._over_limit.line(),
        )

    def _raise_if_over(self) -> None:
        over = self._over_error()
        if over is not None:
            raise over

    def _begin_next_turn(self, task: str) -> None:
        self._stop_idle_watch()
        previous = self._result
        self._resumed_idle = False
        self._turn_number += 1
        self._turn_task = task
        self._turn_started_at = anyio.current_time()
        self.audit.turn = self._turn_number
        self._telemetry.next_turn(self, previous)  # the settled turn's span ends, the next one opens
        self._run_progress.begin_turn()  # after the settled turn's span took its counts
        self._journal.next_turn(self)
        self._result = None
        self._settled = anyio.Event()
        self._cancelled_locally = False
        self._drive_scope = anyio.CancelScope()
        self._output_arrived = anyio.Event()
        self._remote_cancel_done = None
        self._turn_done = anyio.Event()
        self._turn_stopped = None
        self._record(CommonEvent.TURN_SENT)
        self.task_group.start_soon(self._drive_and_settle)

    async def dispose(self) -> None:
        """Reach whole-tree quiescence or raise :class:`TeardownFailed`.  Idempotent.

        Ends a conversation (a running turn is cancelled at once).
        """
        if self._dispose_done is None:
            self._dispose_done = anyio.Event()
            if self._task_group is None or (not self._published and self._closed.is_set()):
                self._dispose_done.set()  # never started, or a failed start rolled back: nothing here
                return
            with anyio.CancelScope(shield=True):
                try:
                    if self._over is None:
                        self._over = ConversationEnd.CLOSED
                        self._over_known.set()
                    self._stop_idle_watch()
                    try:
                        self._cancel_turn(wind_down=False)
                    except Exception as exc:  # whatever cancel() does, the teardown runs
                        log.error("run %s: local cancellation failed; tearing down anyway", self.id)
                        raw_failure("run %s: the raw cancellation failure", self.id, exc=exc)
                        self._settle(SubagentResult(output="", stop_reason=StopReason.ABORTED))
                    self._dispose_error = await self._teardown_once(CommonEvent.DISPOSE_REQUESTED)
                finally:
                    self._dispose_done.set()
                    self._closed.set()
                    self._run_progress.end()
                    self._telemetry.end(self, self._result, self._dispose_error)
                    self._journal.end(self)
        else:
            await self._dispose_done.wait()
        if self._dispose_error is not None:
            raise self._dispose_error

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id} provider={self.provider_name!r} state={self.state}>"

    # -- provider hooks ---------------------------------------------------------------

    @abstractmethod
    async def handshake(self) -> None:
        """Spawn and handshake.  Raise :class:`StepFailed` with safe facts on failure."""

    @abstractmethod
    async def drive(self) -> SubagentResult:
        """Run one turn (:attr:`task`) after publication and return its result."""

    @abstractmethod
    def partial_output(self) -> str:
        """The (partial) output of the current turn collected so far."""

    def begin_turn(self) -> None:
        """Reset per-turn state (output, decisions, usage) before a later turn's
        ``drive()``; called once the previous turn has fully ended at the child."""

    def session_usable(self) -> bool:
        """Whether the turn that just settled left a session that can take another
        turn.  The default: the child has not exited and its output has not ended.
        A provider adds what its protocol knows (a broken wire, a turn the agent
        may still be running)."""
        process = self.process
        return process is not None and process.exit_facts is None and not process.stdout_ended

    async def session_lost(self) -> None:
        """Return once an idle session can take no more turns.  The default: the
        child exited."""
        if self.process is None:
            await anyio.sleep_forever()
        else:
            await self.process.wait_exit()

    async def remote_cancel(self) -> None:
        """The protocol's best-effort cancel; failures are only logged."""

    async def before_ladder(self) -> None:
        """Protocol-level shutdown before the process ladder (bounded by the provider)."""

    async def after_ladder(self) -> None:
        """Release protocol resources once the tree is gone."""

    def teardown_facts(self, report: TeardownReport | None) -> FailureFacts:
        """Safe facts for a failed teardown: ``<teardown stage>/unknown``, with the exit
        facts when the vocabulary puts them on teardown lines; providers may refine it."""
        exit_facts = report.exit if report is not None and self.vocabulary.teardown_exit_facts else None
        return FailureFacts(
            self.vocabulary,
            self.vocabulary.teardown_stage,
            "unknown",
            exit_code=exit_facts.exit_code if exit_facts else None,
            signal=exit_facts.signal if exit_facts else None,
        )

    # -- helpers for providers --------------------------------------------------------

    @property
    def task_group(self) -> TaskGroup:
        """The run's own task group (background readers, watchers)."""
        assert self._task_group is not None, "the run has not been started"
        return self._task_group

    def fact(self, event: enum.StrEnum) -> None:
        """Feed a protocol or process fact (a member of the chart's event enum) to the
        lifecycle machine.  Facts that may arrive after a local cancellation are late-fact
        rows of the chart; anything else the chart does not allow raises."""
        self.machine.send(event)
        self._run_progress.touch()

    def resolve_cwd(self, *, category: str | None = None) -> Path:
        """The workspace: the configured cwd, else the request's parent cwd, validated now.

        Neither, or an unusable one, fails the start in the current stage as ``category``
        (default: ``configuration`` when the vocabulary names it, else ``unknown``; the
        path itself goes only to ``__cause__``).
        """
        if self._workspace.checkout is not None:  # the run's own worktree (the same folder in it)
            return self._workspace.checkout.cwd
        try:
            return resolve_run_cwd(self.config.cwd, self.request.parent_cwd)
        except CwdError as exc:
            if category is None:
                category = "configuration" if "configuration" in self.vocabulary.categories else "unknown"
            raise StepFailed(self.failure(category)) from exc

    async def _enter_workspace(self) -> None:
        """``workspace = "worktree"``: make the run's worktree before the child is spawned."""
        if self._workspace.mode == "worktree" and self._workspace.checkout is None:
            cwd = self.resolve_cwd()
            try:
                await self._workspace.enter(cwd, self.id)
            except WorkspaceFailed as exc:
                category = "configuration" if "configuration" in self.vocabulary.categories else "unknown"
                raise StepFailed(self.failure(category), extra_line=exc.line) from exc

    def spawn_spec(self, argv: Sequence[str], cwd: Path, *, env: dict[str, str] | None = None) -> SpawnSpec:
        """How to spawn this run's child: the config's process keys, tagged with the run id."""
        config = self.config
        if env is None:
            env = child_environment(config.env, remove=config.env_remove, run_tag=self.id)
        env = self._telemetry.child_env(env, explicit=config.env)
        return SpawnSpec(
            argv=argv,
            cwd=cwd,
            env=env,
            run_tag=self.id,
            stderr=config.stderr,
            stderr_tail_bytes=config.stderr_tail_bytes,
            max_frame_bytes=config.max_frame_bytes,
            subreaper=config.subreaper,
            containment=self.tree,
            eof_grace=config.eof_grace,
            limits=config.limits,
            confinement=self._workspace.confinement(config.confinement),
            keep_capabilities=frozenset(config.keep_capabilities),
        )

    async def spawn_child(
        self, spec: SpawnSpec, *, failed_as: str, fact: enum.StrEnum | None = None
    ) -> ManagedProcess:
        """Spawn the run's child; a failure to start it fails the start as ``failed_as``.

        ``fact`` is fed to the machine first when the provider has a stage for it.
        """
        try:
            self.process = await ManagedProcess.spawn(spec, self.task_group)
        except SpawnFailed as exc:  # the OS error is on the cause chain, logged once by start()
            log.warning("run %s: the child could not be started", self.id)
            if fact is not None:
                self.fact(fact)
            raise StepFailed(self.failure(failed_as)) from exc
        return self.process

    def failure(
        self,
        category: str,
        *,
        stage: str | None = None,
        exit_code: int | None = None,
        signal: str | None = None,
        **fields: str | int | None,
    ) -> FailureFacts:
        """Facts for a failure in the current stage (or ``stage``), checked against the
        provider's vocabulary; ``fields`` are its extra closed fields by key."""
        facts = FailureFacts(
            self.vocabulary,
            self.stage if stage is None else stage,
            category,
            exit_code=exit_code,
            signal=signal,
            **fields,
        )
        self._categories[facts.line()] = category  # telemetry's error.type: a fact, not parsed text
        return facts

    @property
    def failure_category(self) -> str | None:
        """The category the run failed with (telemetry's ``error.type``, a fact): of the
        ``StepFailed`` its start or drive raised, or of the facts (built with
        :meth:`failure`) whose line starts the result's diagnostic; None for a success, a
        cancellation, or a line built some other way."""
        return self._failure_category

    @property
    def teardown_category(self) -> str | None:
        """The category of a failed teardown; None while the tree was proven gone."""
        return self._teardown_category

    @property
    def kind(self) -> str:
        """The installed kind this run is of (looked up by its vocabulary), or ``unknown``."""
        return kind_name(self.vocabulary)

    @property
    def gen_ai_provider(self) -> str:
        """Telemetry's ``gen_ai.provider.name``: what the kind declares, else its name."""
        return kind_gen_ai_provider(self.vocabulary)

    def note_output(self) -> None:
        """Providers call this when answer text arrives (wakes :meth:`output_arrived`)."""
        self._output_arrived.set()

    # Progress (closed values only: anything outside a closed set is ``other`` or dropped).

    def note_tool_call(self, call: Hashable, kind: str | None = None, status: str | None = None) -> None:
        """A tool call began or changed.  ``call`` is the protocol's id for it (only its
        hash is kept: it counts the call once); ``kind`` one of :attr:`tool_kinds`
        (another is ``other``), ``status`` one of ``pending``, ``in_progress``,
        ``completed``, ``failed``; None keeps what an earlier note said."""
        self._run_progress.tool_call(call, kind, status)

    def note_plan(self, statuses: Iterable[str]) -> None:
        """The agent's plan, replaced whole: each entry's status (``pending``,
        ``in_progress``, ``completed``; others dropped)."""
        self._run_progress.plan(statuses)

    def note_permission(self, decision: str) -> None:
        """A permission request was answered ``allowed`` or ``denied``."""
        self._run_progress.permission(decision)

    def note_answer_bytes(self, n: int) -> None:
        """``n`` more UTF-8 bytes of answer text arrived (before any cap)."""
        self._run_progress.answer_bytes(n)

    def note_usage(self, usage: Usage | None) -> None:
        """What the current turn used so far, as the agent reports it while it works."""
        self._run_progress.usage(usage)

    @property
    def cancelled_locally(self) -> bool:
        return self._cancelled_locally

    # -- start ------------------------------------------------------------------------

    async def start(
        self, task_group: TaskGroup, abort: AbortSignal | None = None, *, conversation: bool = False
    ) -> None:
        """Spawn and handshake; return only once the run is published.

        On failure the child is rolled back to quiescence before the error is raised.
        ``conversation=True`` keeps the child for more turns (:meth:`send`); the
        registry refuses it, before anything spawns, for a kind that cannot converse.
        """
        if conversation and not any(row[0] == CommonEvent.TURN_ENDED for row in self.lifecycle.TABLE):
            raise InvalidRequest("this run's lifecycle has no turn loop: it cannot converse")
        if self.resuming:
            check_resumable(self.lifecycle, self.vocabulary.label, self.turn, conversation=conversation)
        self._conversation = conversation
        self._telemetry.begin(self)
        self._journal.begin(self)
        try:
            if self._prestarted:  # a warm child: the handshake is done, straight to the first turn
                await self._publish_prestarted(abort)
            else:
                await self._prepare(task_group, abort)
                self._publish(abort)
        except BaseException as exc:
            self._telemetry.start_failed(self, exc)
            self._journal.start_failed(self, exc)
            raise

    async def prestart(self, task_group: TaskGroup) -> None:
        """Spawn and handshake before any task exists (a warm child, ``supervisor.run._warm``).

        The run is then ready but unpublished; :meth:`assign` gives it its request and
        :meth:`start` publishes it at once (its background work stays in ``task_group``).
        A failure raises as :meth:`start`'s does, after the rollback.
        """
        await self._prepare(task_group, None)
        self._prestarted = True

    def assign(self, request: SubagentRequest, trace: TransitionSink | None = None) -> None:
        """Give a prestarted run its request (task, label) and the caller's trace sink,
        which first hears the transitions recorded so far."""
        self.request = request
        self._turn_task = request.task
        self._journal = _journal.for_run()  # the journal of the registry handing the run out
        self.audit.retarget(self._journal.sink(self._telemetry.sink(trace)))

    async def _publish_prestarted(self, abort: AbortSignal | None) -> None:
        if abort is not None and abort.aborted:
            teardown_error = await self.end_prestarted()
            if teardown_error is not None:
                raise StartFailed(teardown_error.diagnostic, quiescent=False) from teardown_error
            raise StartAborted(self._aborted_text())
        # ``timeout_ms`` counts from the start of this run's use, not from the warm spawn.
        self._turn_started_at = anyio.current_time()
        self._publish(abort)

    async def end_prestarted(self) -> TeardownFailed | None:
        """Take down a prestarted run that no caller will use; the teardown's error, if any.

        Its chart waits where the handshake left it: a startup stage rolls back as an
        aborted start; the first turn's stage is cancelled, then disposed.
        """
        state = self.machine.state_name
        if any(row[0] == CommonEvent.START_ABORTED and row[1] == state for row in self.lifecycle.TABLE):
            return await self._rollback(CommonEvent.START_ABORTED)
        if state != SETTLED:
            self._record(CommonEvent.CANCELLED)
        return await self._rollback(CommonEvent.DISPOSE_REQUESTED)

    async def _prepare(self, task_group: TaskGroup, abort: AbortSignal | None) -> None:
        """Spawn and handshake (a failure is rolled back and raised); no publication."""
        # Shielded: a caller's scope cancelled while the host task is being started would
        # otherwise leave that (shielded) task running with nobody to close it.  A pending
        # cancellation then arrives at the handshake's first checkpoint, which rolls back.
        self._spawned_at = self._turn_started_at = anyio.current_time()
        self._run_progress.begin_turn()
        with anyio.CancelScope(shield=True):
            self._task_group = GuardedTaskGroup(await task_group.start(self._host), self._task_failed)
        if abort is not None and abort.aborted:
            await self._rollback(CommonEvent.START_ABORTED)
            raise StartAborted(self._aborted_text())
        failure: StepFailed | None = None
        refused: NotResumable | None = None  # the agent cannot continue the session to resume
        limit: LimitFacts | None = None  # the limit that failed the start, if one did
        try:
            with anyio.CancelScope() as scope:
                self._start_scope = scope  # a task that fails during the start cancels it
                remove = abort.add_callback(scope.cancel) if abort is not None else (lambda: None)
                try:
                    budget, time_limit = self._start_budget()
                    with anyio.move_on_after(budget) as deadline:
                        await self._enter_workspace()
                        await self.handshake()
                    if deadline.cancelled_caught:
                        limit = time_limit
                        overran = "start_timeout_ms" if time_limit is None else "timeout_ms"
                        log.warning("run %s: the start overran %s", self.id, overran)
                        failure = StepFailed(self.failure(self.vocabulary.start_timeout_category))
                except StepFailed as exc:
                    failure = exc
                except NotResumable as exc:
                    refused = exc
                except BaseException as exc:  # SystemExit and the like too: only a cancellation goes on
                    if is_cancellation(exc):
                        raise
                    failure = StepFailed(self.failure("unknown"))
                    failure.__cause__ = exc
                finally:
                    remove()
        except anyio.get_cancelled_exc_class():
            # The caller's scope was cancelled: roll back, then let the cancellation go on.
            teardown_error = await self._rollback(CommonEvent.START_ABORTED)
            if teardown_error is not None:
                log.error("run %s: rollback after cancellation failed: %s", self.id, teardown_error)
            raise
        if self._task_error is not None:  # a task of the run failed (and cancelled the start)
            if failure is None:
                failure = StepFailed(self.failure("unknown"))
                failure.__cause__ = self._task_error
        elif scope.cancelled_caught:
            teardown_error = await self._rollback(CommonEvent.START_ABORTED)
            if teardown_error is not None:
                raise StartFailed(teardown_error.diagnostic, quiescent=False) from teardown_error
            raise StartAborted(self._aborted_text())
        if failure is None and refused is None and self.resuming:
            failure = self._resumed()
        if failure is not None:
            self._failure_category = failure.facts.category
            log.info("run %s: start failed: %s", self.id, failure.diagnostic)
            if failure.__cause__ is not None:
                raw_failure("run %s: the raw start failure", self.id, exc=failure.__cause__)
            if limit is None:
                limit = self._kernel_limit()  # read before the rollback removes the groups
            teardown_error = await self._rollback(CommonEvent.START_FAILED)
            text = bound_diagnostic(
                join_lines(
                    failure.facts.line(),
                    limit.line() if limit is not None else None,
                    failure.extra_line,
                    teardown_error.diagnostic if teardown_error else None,
                )
            )
            assert text is not None
            raise StartFailed(text, quiescent=teardown_error is None) from failure
        if refused is not None:
            await self._refuse_resume(refused)

    def _publish(self, abort: AbortSignal | None) -> None:
        """The run is the caller's now: its first turn starts."""
        self._published = True
        self._journal.published(self)
        if self._cancelled_locally:  # cancelled while starting: settled already
            self._record(CommonEvent.CANCELLED)
        if abort is not None:
            self._remove_abort = abort.add_callback(self._aborted if self._conversation else self.cancel)
        if self.resuming:
            self._publish_idle()
        else:
            self.task_group.start_soon(self._drive_and_settle)

    async def _refuse_resume(self, refused: NotResumable) -> None:
        """The agent cannot continue the session: roll back, then ``ConversationOver``
        ``not resumable`` (closed facts; a rollback failure is a ``StartFailed``)."""
        log.info("run %s: the agent cannot resume the session", self.id)
        raw_failure("run %s: the raw refusal", self.id, exc=refused)
        teardown_error = await self._rollback(CommonEvent.START_FAILED)
        if teardown_error is not None:
            raise StartFailed(teardown_error.diagnostic, quiescent=False) from refused
        raise not_resumable(self.vocabulary.label, self._turn_number) from None

    def _resumed(self) -> StepFailed | None:
        """The handshake continued the session: the chart goes ``resumed`` to ``idle``.  A
        chart that refuses (the handshake left it outside its resume stage: a provider's
        bug) fails the start as ``unknown``."""
        try:
            self.machine.send(CommonEvent.RESUMED)
        except Exception as exc:
            failure = StepFailed(self.failure("unknown"))
            failure.__cause__ = exc
            return failure
        return None

    def _publish_idle(self) -> None:
        """A cold resume is published idle, without a turn (``run.turn`` is the last turn's
        number), and the idle session is watched."""
        self._resumed_idle = True
        self._turn_done.set()
        self._run_progress.settle(final=False)  # idle, as after a turn: the clock stops
        self._idle_scope = anyio.CancelScope()
        self.task_group.start_soon(self._watch_idle, self._idle_scope)

    def _start_budget(self) -> tuple[float, LimitFacts | None]:
        """How long the handshake may take: ``start_timeout_ms``, or what is left of
        ``timeout_ms`` (counted from spawn) when that is less; with the time limit's facts
        when it is the one that binds."""
        budget = self.config.start_timeout
        timeout_ms = self.config.timeout_ms
        if timeout_ms is not None:
            left = self._spawned_at + timeout_ms / 1000 - anyio.current_time()
            if left < budget:
                return max(left, 0.0), LimitFacts(LimitResource.TIME, timeout_ms)
        return budget, None

    def _aborted_text(self) -> str:
        return f"subagent request was aborted before the {self.vocabulary.label} child started"

    async def _host(self, *, task_status: TaskStatus[TaskGroup]) -> None:
        """The run's own task group, shielded until the run is closed.

        The exit watcher and the readers must outlive a cancellation of the caller's
        scope: the shielded teardown that follows needs them to prove quiescence.
        So a started run must always be disposed (``Registry.run`` does it).
        """
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as own:
                task_status.started(own)
                await self._closed.wait()
                own.cancel_scope.cancel()

    async def _rollback(self, event: CommonEvent) -> TeardownFailed | None:
        error: TeardownFailed | None = None
        with anyio.CancelScope(shield=True):
            try:
                error = await self._teardown(event)
            finally:
                self._closed.set()
                self._run_progress.end()
        return error

    # -- settle -----------------------------------------------------------------------

    def _settle(self, result: SubagentResult, *, category: str | None = None) -> None:
        """Settle once: the output capped to ``max_output_bytes`` whatever the provider
        collected, the failure's category kept as a fact."""
        if self._result is not None:
            return
        output = cap_text(result.output, self.config.max_output_bytes)
        if output is not result.output:
            result = result.model_copy(update={"output": output})
        if category is None and result.diagnostic:
            category = self._categories.get(result.diagnostic.split("\n", 1)[0])
        self._failure_category = category
        self._result = result
        self._results.append(result)
        self._journal.settled(self, result)
        self._settled.set()
        self._run_progress.settle(final=not self._conversation)

    def _settle_failure(self, facts: FailureFacts, extra_line: str | None = None) -> None:
        """Settle as a failure with ``facts`` (partial output kept)."""
        if self._result is None and not self._cancelled_locally and self.machine.state_name != SETTLED:
            self._record(CommonEvent.FAILED)
        self._settle(self._failure_result(facts, extra_line), category=facts.category)

    def _failure_result(self, facts: FailureFacts, extra_line: str | None = None) -> SubagentResult:
        """An ``error`` result with ``facts`` (partial output kept)."""
        diagnostic = join_lines(facts.line(), extra_line)
        return SubagentResult(
            output=self._partial_or_empty(), stop_reason=StopReason.ERROR, diagnostic=diagnostic
        )

    async def _drive_and_settle(self) -> None:
        """The one per-turn driver: every turn, the first and each sent one, runs here."""
        done = self._turn_done
        try:
            result, raised = await self._drive_turn()
            if self._conversation:
                self._after_turn(ended=result is not None, raised=raised)
        finally:
            done.set()

    async def _drive_turn(self) -> tuple[SubagentResult | None, bool]:
        """Drive the current turn and settle it; its result (None when the driver was cut
        off) and whether ``drive()`` raised something other than :class:`StepFailed`."""
        result: SubagentResult | None = None
        category: str | None = None  # a failure's, when known as a fact here
        raised = False
        with self._drive_scope:
            async with self._guarded_turn(started=self._turn_started_at):
                try:
                    result = await self.drive()
                except StepFailed as exc:  # its category is kept
                    log.warning("run %s: failed in stage %s", self.id, self.stage)
                    if exc.__cause__ is not None:
                        raw_failure("run %s: the raw failure", self.id, exc=exc.__cause__)
                    result, category = self._failure_result(exc.facts, exc.extra_line), exc.facts.category
                except BaseException as exc:  # SystemExit and the like too: only a cancellation goes on
                    if is_cancellation(exc):
                        raise
                    log.warning("run %s: failed in stage %s", self.id, self.stage)
                    raw_failure("run %s: the raw failure", self.id, exc=exc)
                    result, category, raised = self._failure_result(self.failure("unknown")), "unknown", True
        if result is None:  # cancelled locally, stopped by a limit, or a task failed: already settled
            return None, raised
        if self._cancelled_locally:  # a cancelled turn the agent has now ended: settled already
            return result, raised
        if self._result is None:
            kernel_limit = self._kernel_limit()
            if kernel_limit is not None:
                result, category = self._limited(result, category, kernel_limit)
        if self.machine.state_name != SETTLED:
            self._record(CommonEvent.FAILED)
        self._settle(result, category=category)
        return result, raised

    # -- limits -----------------------------------------------------------------------

    def _guarded_turn(self, *, started: float) -> contextlib.AbstractAsyncContextManager[None]:
        """The guard of one turn (``timeout_ms`` from ``started``, ``stall_timeout_ms``):
        every turn is driven inside one (a conversation's later turns too, from their send).
        ``started`` is on anyio's clock."""
        limits = TurnLimits(self.config.timeout_ms, self.config.stall_timeout_ms)
        return guard_turn(limits, started=started, activity=self.process, on_limit=self._stop_for_limit)

    def _stop_for_limit(self, limit: LimitFacts) -> None:
        """The supervisor's own limit (time, silence) stopped the turn: settle ``error`` at
        once, keeping partial output, and stop the turn as a local cancellation does."""
        if self._result is not None:
            return
        log.warning("run %s: stopped by its %s limit in stage %s", self.id, limit.resource, self.stage)
        self._settle_failure(self.failure(self.vocabulary.start_timeout_category), limit.line())
        self._turn_stopped = ConversationEnd.LIMIT
        self._stop_turn()

    def _kernel_limit(self) -> LimitFacts | None:
        """The limit the kernel enforced on the run, from its counters (cgroup mode)."""
        hit = None if self.process is None else self.process.limit_hit()
        if hit is None:
            return None
        scope = None if hit.scope is HitScope.RUN else LimitScope(hit.scope.value)
        return LimitFacts(LimitResource(hit.resource), hit.limit, scope)

    def _limited(
        self, result: SubagentResult, category: str | None, limit: LimitFacts
    ) -> tuple[SubagentResult, str | None]:
        """``result`` (and its failure category) with the kernel's limit in it.  An
        out-of-memory kill ends the run ``error`` whatever the provider made of it; refused
        forks only explain a failure.  The limit line comes right after the failure line."""
        if limit.resource is LimitResource.PROCESSES and result.stop_reason != StopReason.ERROR:
            return result, category
        lines = (result.diagnostic or "").split("\n") if result.stop_reason == StopReason.ERROR else []
        if not lines or not lines[0]:
            lines, category = [self.failure("unknown").line()], "unknown"
        # bounded here: a model copy does not run the seam's validators
        diagnostic = bound_diagnostic(join_lines(lines[0], limit.line(), *lines[1:]))
        return result.model_copy(update={"stop_reason": StopReason.ERROR, "diagnostic": diagnostic}), category

    def _task_failed(self, exc: BaseException) -> None:
        """A task on the run's task group raised (a provider's bug, as a rule).

        Before publication the start is cancelled and fails as ``unknown``; after it the
        run settles as an ``unknown`` failure at once.  Either way the tree is torn down
        (by the rollback, or by the dispose every published run gets) and the error
        itself goes to the host log only: it never reaches the caller's task group.
        """
        log.error("run %s: a task of the run failed in stage %s", self.id, self.stage)
        raw_failure("run %s: the raw task failure", self.id, exc=exc)
        if self._task_error is None:
            self._task_error = exc
        if not self._published:
            if self._start_scope is not None:
                self._start_scope.cancel()
            return
        self._turn_stopped = ConversationEnd.SESSION_UNUSABLE
        self._drive_scope.cancel()
        if self._result is None and not self._resumed_idle:
            self._settle_failure(self.failure("unknown"))
        elif self._conversation and self.machine.state_name == IDLE:  # between turns: no driver to end it
            self._end_conversation(ConversationEnd.SESSION_UNUSABLE, CommonEvent.CONVERSATION_ENDED)

    def _partial_or_empty(self) -> str:
        """The provider's partial output, or nothing when asking for it fails."""
        try:
            return self.partial_output()
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            log.error("run %s: partial_output() failed", self.id)
            raw_failure("run %s: the raw partial_output failure", self.id, exc=exc)
            return ""

    def _record(self, event: CommonEvent) -> None:
        """Feed a fact the base itself observed.  A chart a provider left where the common
        rows do not reach must not stop a settlement or a teardown: the refusal is logged
        (and the audit trail lacks that entry), the run goes on."""
        try:
            self.machine.send(event)
        except Exception:
            log.error("run %s: the chart refused %s in state %s", self.id, event, self.machine.state_name)

    # -- conversations ------------------------------------------------------------------

    def _after_turn(self, *, ended: bool, raised: bool) -> None:
        """A conversation's turn is over at the child (or its driver was cut off):
        go idle, or end the conversation."""
        if self._over is not None:  # ended while the turn ran (dispose, abort)
            return
        if not ended:  # cut off: a limit, a failed task, or a cancelled turn not ended in time
            reason = self._turn_stopped or ConversationEnd.CANCEL_UNFINISHED
            self._end_conversation(reason, CommonEvent.CONVERSATION_ENDED)
        elif raised or not self._session_usable():
            self._end_conversation(None, CommonEvent.CONVERSATION_ENDED)
        else:
            self._record(CommonEvent.TURN_ENDED)
            self._idle_scope = anyio.CancelScope()
            self.task_group.start_soon(self._watch_idle, self._idle_scope)

    def _session_usable(self) -> bool:
        try:
            return self.session_usable()
        except BaseException as exc:  # a provider's bug: the session cannot be trusted with a turn
            if is_cancellation(exc):
                raise
            log.error("run %s: session_usable() failed; the conversation ends", self.id)
            raw_failure("run %s: the raw session_usable failure", self.id, exc=exc)
            return False

    async def _watch_idle(self, scope: anyio.CancelScope) -> None:
        """Between turns: the idle timeout, or the session going away, ends the conversation."""
        with scope:
            with anyio.move_on_after(self.config.idle_timeout) as timer:
                await self.session_lost()
            if timer.cancelled_caught:
                log.info("run %s: the conversation was idle for idle_timeout_ms", self.id)
                self._end_conversation(ConversationEnd.IDLE_TIMEOUT, CommonEvent.IDLE_TIMED_OUT)
            else:
                log.info("run %s: the child's session ended between turns", self.id)
                self._end_conversation(None, CommonEvent.CHILD_LOST)

    def _stop_idle_watch(self) -> None:
        scope, self._idle_scope = self._idle_scope, None
        if scope is not None:
            scope.cancel()

    def _aborted(self) -> None:
        """The abort signal, in a conversation: cancel the running turn and end it all."""
        if self._over is None:
            self._cancel_turn(wind_down=False)
            self._end_conversation(ConversationEnd.ABORTED, CommonEvent.CONVERSATION_ENDED)

    def _end_conversation(self, reason: ConversationEnd | None, event: CommonEvent) -> None:
        """The conversation is over: no more turns; the tree goes down now, in the background.

        ``reason`` None: the session was lost.  That is ``child exited`` (with its exit
        facts) when the child's exit is observed within the EOF grace, before any signal
        of the teardown, else ``session unusable``.
        """
        if self._over is not None:
            return
        self._over = reason or ConversationEnd.SESSION_UNUSABLE
        self._stop_idle_watch()
        self._run_progress.end()
        if reason is not None:
            self._over_known.set()
        if self._claim_teardown(event):
            self.task_group.start_soon(self._run_teardown, reason is None)

    async def _why_lost(self) -> None:
        try:
            facts = (
                None if self.process is None else await self.process.wait_exit(within=self.config.eof_grace)
            )
            if facts is not None:
                self._over, self._over_exit = ConversationEnd.CHILD_EXITED, facts
            self._over_limit = self._kernel_limit()  # read before the teardown removes the leaf
        finally:
            self._over_known.set()

    async def _best_effort_remote_cancel(self, done: anyio.Event) -> None:
        try:
            with anyio.move_on_after(REMOTE_CANCEL_TIMEOUT):
                await self.remote_cancel()
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            raw_failure("run %s: remote cancel failed", self.id, exc=exc)
        finally:
            done.set()

    # -- teardown ---------------------------------------------------------------------

    def _claim_teardown(self, event: CommonEvent) -> bool:
        """The first caller to claim the teardown runs it (with its event); later ones wait."""
        if self._teardown_done is not None:
            return False
        self._teardown_done = anyio.Event()
        self._teardown_event = event
        return True

    async def _run_teardown(self, lost: bool = False) -> None:
        assert self._teardown_done is not None
        assert self._teardown_event is not None
        with anyio.CancelScope(shield=True):
            try:
                if lost:  # before the ladder's first signal
                    await self._why_lost()
                self._teardown_error = await self._teardown(self._teardown_event)
            finally:
                self._teardown_done.set()

    async def _teardown_once(self, event: CommonEvent) -> TeardownFailed | None:
        if self._claim_teardown(event):
            await self._run_teardown()
        else:
            assert self._teardown_done is not None
            await self._teardown_done.wait()
        return self._teardown_error

    async def _teardown(self, event: CommonEvent) -> TeardownFailed | None:
        """Move into the teardown stage, take the tree down, and record the outcome."""
        self._remove_abort()
        self._record(event)
        report: TeardownReport | None = None
        if self._remote_cancel_done is not None:  # let the protocol's cancel go out first
            with anyio.move_on_after(REMOTE_CANCEL_TIMEOUT):
                await self._remote_cancel_done.wait()
        try:
            await self.before_ladder()
        except BaseException as exc:  # a polite shutdown is best effort; the ladder still runs
            if is_cancellation(exc):
                raise
            log.warning("run %s: protocol shutdown failed", self.id)
            raw_failure("run %s: the raw shutdown failure", self.id, exc=exc)
        if self.process is not None:
            report = await self.process.teardown(
                TeardownLadder(listeners=[self.audit]),  # built only when needed: charts cost ~0.4 ms
                eof_grace=self.config.eof_grace,
                term_grace=self.config.term_grace,
            )
        try:
            await self.after_ladder()
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            log.warning("run %s: releasing protocol resources failed", self.id)
            raw_failure("run %s: the raw release failure", self.id, exc=exc)
        self._quiescent = report is None or report.quiescent
        await self._workspace.leave(quiescent=self._quiescent)
        if self._quiescent:
            self._record(CommonEvent.TREE_GONE)
            return None
        assert report is not None
        log.error("run %s: tree not gone after SIGKILL; survivors %s", self.id, report.survivors)
        self._record(CommonEvent.TREE_SURVIVED)
        try:
            facts = self.teardown_facts(report)
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            raw_failure("run %s: teardown_facts() failed", self.id, exc=exc)
            facts = ProviderRun.teardown_facts(self, report)
        self._teardown_category = facts.category
        line = facts.line()
        return TeardownFailed(bound_diagnostic(line) or line)

    def force_kill(self) -> None:
        """Skip the remaining teardown graces (a second Ctrl-C)."""
        if self.process is not None:
            self.process.force_kill()


home("supervisor.provider", ProviderRun, RunContext, StepFailed)
