"""The shape every provider lifecycle shares, and the builder that turns a table into a chart.

Theory of operation
-------------------
A provider run is a python-statemachine ``StateChart`` whose states are the
provider's *stages* plus three bookkeeping states:

* ``settled``   the result has settled; the run waits for ``dispose``;
* ``quiescent`` final: the whole process tree is gone;
* ``leaked``    final: teardown could not prove the tree gone.

Transitions are data (h11 style): each provider module declares a table of
``(event, source, target)`` rows, events named for the protocol or process fact that
caused them.  :func:`build_lifecycle` turns the table into a chart class, so the
diagram in ``diagrams/`` and the code cannot drift apart.

The chart is synchronous (no async callbacks), so a cancelled task can never leave
it half-entered, and it is strict: an event that the table does not allow raises
``TransitionNotAllowed`` instead of being ignored, and errors are never turned into
events (``catch_errors_as_events = False``).  The *stage* a diagnostic names is read
from :attr:`Lifecycle.stage`: the last stage state entered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from statemachine import State, StateChart

SETTLED = "settled"
QUIESCENT = "quiescent"
LEAKED = "leaked"
BOOKKEEPING_STATES = (SETTLED, QUIESCENT, LEAKED)

Row = tuple[str, str, str]


class _StageTracker:
    """Listener that remembers the stages entered (kept off the chart so diagrams stay clean)."""

    def __init__(self, stages: tuple[str, ...]) -> None:
        self.stages = stages
        self.current: str | None = None
        self.entered: list[str] = []

    def on_enter_state(self, target: Any) -> None:
        name: str = target.name
        if name in self.stages:
            self.current = name
            if name not in self.entered:
                self.entered.append(name)


class Lifecycle(StateChart["Lifecycle"]):
    """Base of every generated provider lifecycle chart."""

    catch_errors_as_events = False
    allow_event_without_transition = False

    STAGES: ClassVar[tuple[str, ...]] = ()
    TABLE: ClassVar[tuple[Row, ...]] = ()
    AUDIT_MACHINE: ClassVar[str] = "lifecycle"  # how its audit entries name it

    def __init__(self, *, listeners: list[Any] | None = None) -> None:
        self._tracker = _StageTracker(self.STAGES)
        super().__init__(listeners=[self._tracker, *(listeners or [])])

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

    def allows(self, event: str) -> bool:
        """Whether ``event`` has a transition from the active state."""
        return event in {e.id for e in self.allowed_events}


def _attr(name: str) -> str:
    return name.replace("-", "_")


def build_lifecycle(
    name: str,
    *,
    stages: Sequence[str],
    table: Iterable[Row],
    doc: str,
) -> type[Lifecycle]:
    """Build a :class:`Lifecycle` subclass from a transition table.

    ``stages[0]`` is the initial state.  Every state a row names must be a stage or a
    bookkeeping state; a row naming anything else is a definition error.
    """
    rows = tuple(table)
    states: dict[str, State] = {}
    for stage in stages:
        states[stage] = State(stage, initial=stage == stages[0])
    for extra in BOOKKEEPING_STATES:
        states[extra] = State(extra, final=extra in (QUIESCENT, LEAKED))
    namespace: dict[str, Any] = {_attr(k): v for k, v in states.items()}
    events: dict[str, Any] = {}
    for event, source, target in rows:
        if source not in states or target not in states:
            raise ValueError(f"{name}: row {(event, source, target)!r} names an unknown state")
        transition = states[source].to(states[target])
        events[event] = events[event] | transition if event in events else transition
    namespace.update(events)
    namespace["STAGES"] = tuple(stages)
    namespace["TABLE"] = rows
    namespace["__doc__"] = doc
    namespace["__module__"] = "machines"
    namespace["__qualname__"] = name
    cls = type(name, (Lifecycle,), namespace)
    return cls


def common_rows(
    *,
    startup: Sequence[str],
    running: Sequence[str],
    teardown: str,
) -> tuple[Row, ...]:
    """The rows every provider shares.

    * a failed or aborted start rolls back from any startup stage into ``teardown``;
    * a local cancellation, or a failure without a finer fact, settles the run from
      any running stage;
    * ``dispose`` moves a settled run into ``teardown``; the tree is then gone or not.
    """
    rows: list[Row] = []
    for stage in startup:
        rows.append(("start_failed", stage, teardown))
        rows.append(("start_aborted", stage, teardown))
    for stage in running:
        rows.append(("cancelled", stage, SETTLED))
        rows.append(("failed", stage, SETTLED))
    rows.append(("dispose_requested", SETTLED, teardown))
    rows.append(("tree_gone", teardown, QUIESCENT))
    rows.append(("tree_survived", teardown, LEAKED))
    return tuple(rows)
