"""The shape every provider lifecycle shares, and the builder that turns a table into a chart.

Theory of operation
-------------------
A provider run is a python-statemachine ``StateChart`` whose states are the
provider's *stages* plus three bookkeeping states:

* ``settled``   the result has settled; the run waits for ``dispose``;
* ``idle``      a conversation between turns: the child lives, waiting for the next
                turn (only in charts built with a ``turn_stage``);
* ``quiescent`` final: the whole process tree is gone;
* ``leaked``    final: teardown could not prove the tree gone.

The turn loop (conversations): a settled turn whose child lives and whose session is
usable goes ``settled -> idle`` (``turn_ended``); the next turn goes ``idle -> <turn
stage>`` (``turn_sent``).  From ``idle`` the conversation may also end: ``dispose``,
the idle timeout, the child's death between turns, or the run ending it (an abort);
a turn that left no usable session ends it from ``settled``.  Every path still ends in
``teardown`` and then ``quiescent`` or ``leaked``.  A cold resume (a conversation
continued in a new process, in charts built with a ``resume_stage``) goes from that
startup stage straight to ``idle`` (``resumed``): it is published without a turn.

Transitions are data (h11 style): each provider module declares a table of
``(event, source, target)`` rows, events named for the protocol or process fact that
caused them.  Events are members of a ``StrEnum`` (the chart's own events, plus the
:class:`CommonEvent` every chart shares), so a misspelt fact is a type error, not a
runtime surprise.  :func:`build_lifecycle` turns the table into a chart class, so the
diagram in ``diagrams/`` and the code cannot drift apart.

Late facts: after a local cancellation the child keeps talking for a moment, and a
fact the run had already received may reach the chart after it settled (or while the
tree is being taken down).  Such facts are rows of their own (``late=`` in
:func:`common_rows`: a self-loop on ``settled`` and on the teardown stage), so the
audit trail records them and the chart stays strict for everything else.

The chart is synchronous (no async callbacks), so a cancelled task can never leave
it half-entered, and it is strict: an event that the table does not allow raises
``TransitionNotAllowed`` instead of being ignored, and errors are never turned into
events (``catch_errors_as_events = False``).  The *stage* a diagnostic names is read
from :attr:`Lifecycle.stage`: the last stage state entered.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from statemachine import State

from machines._shared import SharedCallbacksChart

SETTLED = "settled"
IDLE = "idle"
QUIESCENT = "quiescent"
LEAKED = "leaked"
BOOKKEEPING_STATES = (SETTLED, IDLE, QUIESCENT, LEAKED)

Row = tuple[str, str, str]
"""``(event, source, target)``; the event is a member of the chart's event enum."""


class CommonEvent(enum.StrEnum):
    """The facts every lifecycle shares (the base run sends them)."""

    START_FAILED = "start_failed"
    START_ABORTED = "start_aborted"
    CANCELLED = "cancelled"
    FAILED = "failed"
    DISPOSE_REQUESTED = "dispose_requested"
    TREE_GONE = "tree_gone"
    TREE_SURVIVED = "tree_survived"
    # the turn loop of a conversation
    TURN_ENDED = "turn_ended"
    TURN_SENT = "turn_sent"
    IDLE_TIMED_OUT = "idle_timed_out"
    CHILD_LOST = "child_lost"
    CONVERSATION_ENDED = "conversation_ended"
    # a cold resume: the agent's own session continued in a new process, published idle
    RESUMED = "resumed"


class _StageTracker:
    """Remembers the stages entered and the facts received (kept off the chart so
    diagrams stay clean).  The charts are flat: a transition's target is the one state
    it enters, and the initial stage is entered when the chart is built."""

    def __init__(self, stages: tuple[str, ...]) -> None:
        self.stages = stages
        self.current: str | None = stages[0] if stages else None
        self.entered: list[str] = list(stages[:1])
        self.seen: set[str] = set()

    def transition(self, event: Any, target: Any) -> None:
        self.seen.add(str(event))
        name: str = target.name
        if name in self.stages:
            self.current = name
            if name not in self.entered:
                self.entered.append(name)


class Lifecycle(SharedCallbacksChart):
    """Base of every generated provider lifecycle chart."""

    catch_errors_as_events = False
    allow_event_without_transition = False

    STAGES: ClassVar[tuple[str, ...]] = ()
    TABLE: ClassVar[tuple[Row, ...]] = ()
    EVENTS: ClassVar[type[enum.StrEnum]] = CommonEvent
    """The chart's own events (its table may also use :class:`CommonEvent`)."""
    AUDIT_MACHINE: ClassVar[str] = "lifecycle"  # how its audit entries name it

    def __init__(self, *, listeners: list[Any] | None = None) -> None:
        self._tracker = _StageTracker(self.STAGES)
        super().__init__(listeners=listeners)

    def _transition_happened(self, event: Any, source: Any, target: Any) -> None:
        self._tracker.transition(event, target)  # before any listener, which may read the stage
        super()._transition_happened(event, source, target)

    @property
    def state_name(self) -> str:
        """The name of the single active state."""
        (state,) = self.configuration
        name: str = state.name
        return name

    @property
    def stage(self) -> str:
        """The last stage entered (bookkeeping states do not change it)."""
        assert self._tracker.current is not None, "a lifecycle always starts in a stage"
        return self._tracker.current

    @property
    def stages_entered(self) -> tuple[str, ...]:
        """Stage names in the order first entered, without repeats."""
        return tuple(self._tracker.entered)

    def has_seen(self, event: str) -> bool:
        """Whether ``event`` has moved the chart (a run's progress, read from the chart
        instead of a flag of its own)."""
        return str(event) in self._tracker.seen


def _attr(name: str) -> str:
    return name.replace("-", "_")


def build_lifecycle(
    name: str,
    *,
    stages: Sequence[str],
    events: type[enum.StrEnum],
    table: Iterable[Row],
    doc: str,
    module: str,
) -> type[Lifecycle]:
    """Build a :class:`Lifecycle` subclass from a transition table.

    ``stages[0]`` is the initial state.  Every state a row names must be a stage or a
    bookkeeping state, and every event a member of ``events`` or :class:`CommonEvent`;
    anything else is a definition error.  ``module`` is the module that defines (and
    exports) the chart, so ``__module__`` names where a reader finds it.
    """
    rows = tuple(table)
    known = {e.value for e in events} | {e.value for e in CommonEvent}
    for event, _, _ in rows:
        if event not in known:
            raise ValueError(f"{name}: event {event!r} is not a member of {events.__name__}")
    states: dict[str, State] = {}
    for stage in stages:
        states[stage] = State(stage, initial=stage == stages[0])
    named = {state for _, source, target in rows for state in (source, target)}
    for extra in BOOKKEEPING_STATES:
        if extra != IDLE or IDLE in named:  # ``idle`` only in charts that converse
            states[extra] = State(extra, final=extra in (QUIESCENT, LEAKED))
    namespace: dict[str, Any] = {_attr(k): v for k, v in states.items()}
    transitions: dict[str, Any] = {}
    for event, source, target in rows:
        if source not in states or target not in states:
            raise ValueError(f"{name}: row {(event, source, target)!r} names an unknown state")
        transition = states[source].to(states[target])
        key = str(event)
        transitions[key] = transitions[key] | transition if key in transitions else transition
    namespace.update(transitions)
    namespace["STAGES"] = tuple(stages)
    namespace["TABLE"] = tuple((str(e), source, target) for e, source, target in rows)
    namespace["EVENTS"] = events
    namespace["__doc__"] = doc
    namespace["__module__"] = module
    namespace["__qualname__"] = name
    cls = type(name, (Lifecycle,), namespace)
    return cls


def common_rows(
    *,
    startup: Sequence[str],
    running: Sequence[str],
    teardown: str,
    late: Sequence[str] = (),
    turn_stage: str | None = None,
    resume_stage: str | None = None,
) -> tuple[Row, ...]:
    """The rows every provider shares.

    * a failed or aborted start rolls back from any startup stage into ``teardown``;
    * a local cancellation, or a failure without a finer fact, settles the run from
      any running stage; a cancellation that races the fact that settled the chart
      (the result itself not yet handed over) is a late ``cancelled`` on ``settled``;
    * ``dispose`` moves a settled run into ``teardown``; the tree is then gone or not;
    * each ``late`` event is accepted, and changes nothing, once the run has settled
      or is being taken down (the facts a run may still receive after a local cancel);
    * with a ``turn_stage`` (a kind that can converse), the turn loop: a settled turn
      goes ``idle`` (``turn_ended``), the next turn enters ``turn_stage`` from there
      (``turn_sent``), and ``idle`` ends in ``teardown`` on ``dispose``, the idle
      timeout (``idle_timed_out``), the child's death (``child_lost``) or the run ending
      the conversation (``conversation_ended``, also from ``settled``: a turn that left
      no usable session);
    * with a ``resume_stage`` too (a kind that can continue an agent's session in a new
      process, a cold resume): ``resumed`` goes from that startup stage (where the kind
      continues the session instead of opening one) straight to ``idle``, without a
      turn; the next turn enters ``turn_stage`` from there as after any turn.
    """
    rows: list[Row] = []
    for stage in startup:
        rows.append((CommonEvent.START_FAILED, stage, teardown))
        rows.append((CommonEvent.START_ABORTED, stage, teardown))
    for stage in running:
        rows.append((CommonEvent.CANCELLED, stage, SETTLED))
        rows.append((CommonEvent.FAILED, stage, SETTLED))
    rows.append((CommonEvent.CANCELLED, SETTLED, SETTLED))
    rows.append((CommonEvent.DISPOSE_REQUESTED, SETTLED, teardown))
    rows.append((CommonEvent.TREE_GONE, teardown, QUIESCENT))
    rows.append((CommonEvent.TREE_SURVIVED, teardown, LEAKED))
    for event in late:
        rows.append((event, SETTLED, SETTLED))
        rows.append((event, teardown, teardown))
    if turn_stage is not None:
        if turn_stage not in running:
            raise ValueError(f"the turn stage {turn_stage!r} must be one of the running stages")
        rows.append((CommonEvent.TURN_ENDED, SETTLED, IDLE))
        rows.append((CommonEvent.TURN_SENT, IDLE, turn_stage))
        rows.append((CommonEvent.DISPOSE_REQUESTED, IDLE, teardown))
        rows.append((CommonEvent.IDLE_TIMED_OUT, IDLE, teardown))
        rows.append((CommonEvent.CHILD_LOST, IDLE, teardown))
        rows.append((CommonEvent.CONVERSATION_ENDED, IDLE, teardown))
        rows.append((CommonEvent.CONVERSATION_ENDED, SETTLED, teardown))
    if resume_stage is not None:
        if turn_stage is None:
            raise ValueError("a resume stage needs a turn stage: a resumed run is published idle")
        if resume_stage not in startup:
            raise ValueError(f"the resume stage {resume_stage!r} must be one of the startup stages")
        rows.append((CommonEvent.RESUMED, resume_stage, IDLE))
    return tuple(rows)


for _public in (CommonEvent, Lifecycle, build_lifecycle, common_rows):
    _public.__module__ = "machines"  # its public home (``machines``), as ``help()`` should say
del _public
