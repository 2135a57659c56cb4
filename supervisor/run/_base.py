"""The authors' base run: the hooks a provider fills in, the helpers it calls, and what
a caller sees of a run, over the engine's composed parts.

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
* ``teardown_facts()``  the safe facts of a failed teardown (optional);
* for a kind that converses (``Capabilities(conversation=True)``, a chart built with a
  ``turn_stage``): ``begin_turn()`` resets per-turn state before each later turn,
  ``session_usable()`` says whether a settled turn left a session that can take the
  next one, and ``session_lost()`` returns when an idle session can take no more.

It calls the helpers: ``spawn_spec()`` and ``spawn_child()`` (its child), ``resolve_cwd()``,
``fact()`` (a protocol or process fact for its chart), ``failure()`` (closed facts to
raise :class:`StepFailed` with), ``task_group`` (its background readers), ``task``,
``note_output()`` and the progress notes ``note_*()``.

Everything else is the engine's, one part per module, each holding the cancellation
rules it keeps, all sharing one :class:`~supervisor.run._state.RunState` (built in order
by :mod:`~supervisor.run._parts`):

* :mod:`~supervisor.run._start`     start and publication, rollback, warm children
  (prestart, assign), a cold resume's refusal;
* :mod:`~supervisor.run._turns`     the turn loop: drive and settle each turn, local
  cancellation, ``send``, the end of a conversation;
* :mod:`~supervisor.run._watch`     limits (time, silence, the kernel's) and the idle
  session's watcher;
* :mod:`~supervisor.run._teardown`  the run's own task group, the one teardown over the
  whole tree, dispose, the forced kill;
* :mod:`~supervisor.run._settle`    the single settlement of each turn and the base's
  own chart facts.

So every provider behaves the same at the seam, and a provider's bug keeps those
promises too: a hook or a task on the run's task group that raises settles the run as
an ``unknown`` failure (:mod:`supervisor.run._guard`), and the tree is torn down by the
dispose that follows; ``dispose()`` reaches the teardown whatever the provider's
``partial_output()`` or chart does.  A run is built from one :class:`RunContext`;
callers see it only as a :class:`~supervisor.Run`.
"""

from __future__ import annotations

import enum
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

import anyio
from anyio.abc import TaskGroup

from machines import AuditTrail, Lifecycle, TransitionSink, Vocabulary
from supervisor._abort import AbortSignal
from supervisor._config import ProviderConfig
from supervisor._diagnostic import FailureFacts
from supervisor._errors import ConversationOver, TeardownFailed
from supervisor._kinds import kind_gen_ai_provider, kind_name
from supervisor._public import home
from supervisor._seam import (
    TOOL_KINDS,
    Progress,
    Resources,
    SessionPlan,
    SubagentRequest,
    SubagentResult,
    Usage,
)
from supervisor.journal import _switch as _journal
from supervisor.process import (
    Containment,
    CwdError,
    ExitFacts,
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
from supervisor.run._parts import build_engine
from supervisor.run._resume import plan_run_id, valid_session_id
from supervisor.run._state import StepFailed
from supervisor.run._teardown import default_teardown_facts
from supervisor.telemetry import _switch as _telemetry
from supervisor.workspace import Workspace

log = logging.getLogger("supervisor")

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
    see them as :class:`~supervisor.Run`; the hooks and helpers here are for providers."""

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
        self.request = context.request
        telemetry = _telemetry.for_run()
        journal = _journal.for_run()  # the journal's hooks (a no-op when not journaled)
        self.audit = AuditTrail(self.id, sink=journal.sink(telemetry.sink(context.trace)))
        plan = context.session
        turn = plan.turns_before if plan is not None and plan.resume is not None else 1
        self.audit.turn = turn  # a resumed conversation's start belongs to its last turn
        self.machine = self.lifecycle(listeners=[self.audit])
        self.process: ManagedProcess | None = None
        self._engine = build_engine(self, telemetry=telemetry, journal=journal, turn=turn)
        """The engine's parts: the base's one private attribute (an author's run leaves it alone)."""

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
        return self._engine.state.conversation

    @property
    def turn(self) -> int:
        """The current turn's number: 1 for the request's task, then one more per :meth:`send`
        (a resumed conversation starts at ``session.turns_before``)."""
        return self._engine.state.turn_number

    @property
    def resuming(self) -> bool:
        """Whether the run continues an agent's session (``session.resume``): a cold resume,
        published idle without a turn."""
        return self.session is not None and self.session.resume is not None

    @property
    def agent_session_id(self) -> str | None:
        """The agent's own session id (ACP's ``sessionId``, or whatever id the kind's
        protocol gives a session) once the session exists, when it is a bounded printable
        string; else None.  Host-side only: for a journal to resume the session later, never in a
        result, a diagnostic, a span or a log at INFO."""
        return self._engine.state.agent_session_id

    @agent_session_id.setter
    def agent_session_id(self, value: object) -> None:
        """Providers set it once the agent's session exists; an unusable value is None."""
        self._engine.state.agent_session_id = valid_session_id(value)

    @property
    def task(self) -> str:
        """The current turn's text (the request's task in turn 1): what ``drive()`` sends."""
        return self._engine.state.turn_task

    @property
    def warm(self) -> bool:
        """Whether this run is a warm child: started (from its handshake on) before any task
        existed, to be handed to a run later.  A handshake may prepare such a child for its
        first prompt where that costs only the wait (never anything in the session)."""
        return self._engine.state.warm

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
        return self._engine.state.quiescent

    @property
    def settled(self) -> bool:
        """Whether the current turn's result has settled (it never changes afterwards); true
        for a resumed conversation that has run no turn yet (nothing is running)."""
        state = self._engine.state
        return state.result is not None or state.resumed_idle

    @property
    def cancelled_locally(self) -> bool:
        """Whether the current turn was cancelled locally (``cancel()``)."""
        return self._engine.state.cancelled_locally

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
        return self._engine.state.workspace.facts

    @property
    def progress(self) -> Progress:
        """The latest :class:`~supervisor.Progress` snapshot (closed facts and numbers)."""
        return self._engine.state.progress.snapshot()

    def watch(self) -> AsyncIterator[Progress]:
        """``async for p in run.watch()``: coalesced snapshots (at most one per 250 ms,
        the last one always delivered), ending when a one-shot run settles, or when a
        conversation is over (every turn is watched; a turn's counts start from zero).
        Any number of watchers; a slow one never holds the run up."""
        return self._engine.state.progress.watch()

    @property
    def failure_category(self) -> str | None:
        """The category the run failed with (telemetry's ``error.type``, a fact): of the
        ``StepFailed`` its start or drive raised, or of the facts (built with
        :meth:`failure`) whose line starts the result's diagnostic; None for a success, a
        cancellation, or a line built some other way."""
        return self._engine.state.failure_category

    @property
    def teardown_category(self) -> str | None:
        """The category of a failed teardown; None while the tree was proven gone."""
        return self._engine.state.teardown_category

    @property
    def kind(self) -> str:
        """The installed kind this run is of (looked up by its vocabulary), or ``unknown``."""
        return kind_name(self.vocabulary)

    @property
    def gen_ai_provider(self) -> str:
        """Telemetry's ``gen_ai.provider.name``: what the kind declares, else its name."""
        return kind_gen_ai_provider(self.vocabulary)

    @property
    def conversation_over(self) -> ConversationOver | None:
        """The error a :meth:`send` would raise now, once the conversation has ended and
        why is final (the child's exit facts observed, or their grace passed); else None
        (always None for a run that is not a conversation)."""
        return self._engine.turns.conversation_over()

    async def start(
        self, task_group: TaskGroup, abort: AbortSignal | None = None, *, conversation: bool = False
    ) -> None:
        """Spawn and handshake; return only once the run is published.

        On failure the child is rolled back to quiescence before the error is raised.
        ``conversation=True`` keeps the child for more turns (:meth:`send`); the
        registry refuses it, before anything spawns, for a kind that cannot converse.
        """
        await self._engine.start.start(task_group, abort, conversation=conversation)

    async def result(self) -> SubagentResult:
        """The settled result of the latest turn (waiting for it if it is running).

        In a one-shot run, the run's result.  Never raises for a child-level failure.  A
        resumed conversation has no result until its first :meth:`send`: asking for one
        before is :class:`~supervisor.InvalidRequest`.
        """
        return await self._engine.turns.result()

    async def output_arrived(self) -> None:
        """Return once the child has sent some answer text in the current turn (or the turn has settled)."""
        await self._engine.turns.output_arrived()

    def cancel(self) -> None:
        """Local cancellation of the running turn: settle ``aborted`` at once (keeping
        partial output).  In a conversation the conversation stays open (the agent is
        asked to end the turn; the next :meth:`send` waits for that, at most
        ``dispose_grace_ms``).  Nothing happens when no turn is running."""
        self._engine.turns.cancel()

    async def send(self, task: str) -> SubagentResult:
        """Run the next turn of the conversation with ``task``; return its result.

        Raises :class:`~supervisor.TurnInProgress` while a turn is running,
        :class:`~supervisor.ConversationOver` once the conversation has ended, and
        :class:`~supervisor.InvalidRequest` for a blank task or a run that is not a
        conversation; none of these changes anything.  Never raises for a child-level
        failure: a failed turn is in its result.  Cancelling the task awaiting this
        call cancels the turn (local cancellation), then re-raises the cancellation.
        """
        return await self._engine.turns.send(task)

    async def dispose(self) -> None:
        """Reach whole-tree quiescence or raise :class:`TeardownFailed`.  Idempotent.

        Ends a conversation (a running turn is cancelled at once).
        """
        await self._engine.teardown.dispose(self._engine.turns.close)

    def force_kill(self) -> None:
        """Skip the remaining teardown graces (a second Ctrl-C)."""
        self._engine.teardown.force_kill()

    # -- warm children (``supervisor.run._warm``) ---------------------------------------

    async def prestart(self, task_group: TaskGroup) -> None:
        """Spawn and handshake before any task exists (a warm child).

        The run is then ready but unpublished; :meth:`assign` gives it its request and
        :meth:`start` publishes it at once (its background work stays in ``task_group``).
        A failure raises as :meth:`start`'s does, after the rollback.
        """
        await self._engine.start.prestart(task_group)

    def assign(self, request: SubagentRequest, trace: TransitionSink | None = None) -> None:
        """Give a prestarted run its request (task, label) and the caller's trace sink,
        which first hears the transitions recorded so far."""
        self.request = request
        self._engine.start.assign(request, trace)

    async def end_prestarted(self) -> TeardownFailed | None:
        """Take down a prestarted run that no caller will use; the teardown's error, if any."""
        return await self._engine.start.end_prestarted()

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

    async def warm_up(self) -> None:
        """A warm child's own setup, once its handshake is done and before it waits for a run
        (warm children only): work the peer does at a session's first prompt that a request
        it needs anyway, or a harmless one, can start ahead.  Send nothing of a task (there is
        none yet) and leave the session as a cold start leaves it.  Bounded by
        ``start_timeout_ms``; a failure or an overrun only loses the speed-up."""

    def teardown_facts(self, report: TeardownReport | None) -> FailureFacts:
        """Safe facts for a failed teardown: ``<teardown stage>/unknown``, with the exit
        facts when the vocabulary puts them on teardown lines; providers may refine it."""
        return default_teardown_facts(self.vocabulary, report)

    # -- helpers for providers --------------------------------------------------------

    @property
    def task_group(self) -> TaskGroup:
        """The run's own task group (background readers, watchers)."""
        task_group = self._engine.state.task_group
        assert task_group is not None, "the run has not been started"
        return task_group

    def fact(self, event: enum.StrEnum) -> None:
        """Feed a protocol or process fact (a member of the chart's event enum) to the
        lifecycle machine.  Facts that may arrive after a local cancellation are late-fact
        rows of the chart; anything else the chart does not allow raises."""
        self.machine.send(event)
        self._engine.state.progress.touch()

    def resolve_cwd(self, *, category: str | None = None) -> Path:
        """The workspace: the configured cwd, else the request's parent cwd, validated now.

        Neither, or an unusable one, fails the start in the current stage as ``category``
        (default: ``configuration`` when the vocabulary names it, else ``unknown``; the
        path itself goes only to ``__cause__``).
        """
        checkout = self._engine.state.workspace.checkout
        if checkout is not None:  # the run's own worktree (the same folder in it)
            return checkout.cwd
        try:
            return resolve_run_cwd(self.config.cwd, self.request.parent_cwd)
        except CwdError as exc:
            if category is None:
                category = "configuration" if "configuration" in self.vocabulary.categories else "unknown"
            raise StepFailed(self.failure(category)) from exc

    def spawn_spec(self, argv: Sequence[str], cwd: Path, *, env: dict[str, str] | None = None) -> SpawnSpec:
        """How to spawn this run's child: the config's process keys, tagged with the run id."""
        config = self.config
        state = self._engine.state
        if env is None:
            env = child_environment(config.env, remove=config.env_remove, run_tag=self.id)
        env = state.telemetry.child_env(env, explicit=config.env)
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
            confinement=state.workspace.confinement(config.confinement),
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
        self._engine.state.categories[facts.line()] = (
            category  # telemetry's error.type: a fact, not parsed text
        )
        return facts

    def note_output(self) -> None:
        """Providers call this when answer text arrives (wakes :meth:`output_arrived`)."""
        self._engine.state.output_arrived.set()

    # Progress (closed values only: anything outside a closed set is ``other`` or dropped).

    def note_tool_call(self, call: Hashable, kind: str | None = None, status: str | None = None) -> None:
        """A tool call began or changed.  ``call`` is the protocol's id for it (only its
        hash is kept: it counts the call once); ``kind`` one of :attr:`tool_kinds`
        (another is ``other``), ``status`` one of ``pending``, ``in_progress``,
        ``completed``, ``failed``; None keeps what an earlier note said."""
        self._engine.state.progress.tool_call(call, kind, status)

    def note_plan(self, statuses: Iterable[str]) -> None:
        """The agent's plan, replaced whole: each entry's status (``pending``,
        ``in_progress``, ``completed``; others dropped)."""
        self._engine.state.progress.plan(statuses)

    def note_permission(self, decision: str) -> None:
        """A permission request was answered ``allowed`` or ``denied``."""
        self._engine.state.progress.permission(decision)

    def note_answer_bytes(self, n: int) -> None:
        """``n`` more UTF-8 bytes of answer text arrived (before any cap)."""
        self._engine.state.progress.answer_bytes(n)

    def note_usage(self, usage: Usage | None) -> None:
        """What the current turn used so far, as the agent reports it while it works."""
        self._engine.state.progress.usage(usage)


home("supervisor.provider", ProviderRun, RunContext, StepFailed)
