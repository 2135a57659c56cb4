"""Charts build their callback registry once per class (``machines/_shared.py``), and behave
exactly as python-statemachine documents whatever listeners they are given."""

from __future__ import annotations

from typing import Any

import pytest
from statemachine.exceptions import TransitionNotAllowed

from machines import AuditTrail, CommonEvent, TeardownLadder
from machines.acp import AcpEvent, AcpLifecycle

HAPPY: tuple[AcpEvent | CommonEvent, ...] = (
    AcpEvent.INITIALIZE_ANSWERED,
    AcpEvent.SESSION_CREATED,
    AcpEvent.STOP_REASON_RECEIVED,
    CommonEvent.DISPOSE_REQUESTED,
    CommonEvent.TREE_GONE,
)


def story(trail: AuditTrail) -> list[tuple[str, str, str, str]]:
    return [(e.event, e.source, e.target, e.machine) for e in trail.entries]


def test_instances_of_a_class_share_one_registry_and_nothing_else() -> None:
    first, second = AuditTrail("one"), AuditTrail("two")
    a = AcpLifecycle(listeners=[first])
    b = AcpLifecycle(listeners=[second])
    assert a._callbacks is b._callbacks
    assert TeardownLadder(listeners=[first])._callbacks is TeardownLadder()._callbacks
    a.send(AcpEvent.INITIALIZE_ANSWERED)
    b.send(AcpEvent.SPAWN_FAILED)
    assert story(first) == [("initialize_answered", "initialize", "new-session", "lifecycle")]
    assert story(second) == [("spawn_failed", "initialize", "process", "lifecycle")]
    assert (a.stage, b.stage) == ("new-session", "process")
    assert a.has_seen(AcpEvent.INITIALIZE_ANSWERED)
    assert not b.has_seen(AcpEvent.INITIALIZE_ANSWERED)


def test_the_stages_and_the_audit_of_a_whole_run() -> None:
    trail = AuditTrail("run")
    machine = AcpLifecycle(listeners=[trail])
    assert (machine.stage, machine.stages_entered) == ("initialize", ("initialize",))
    for event in HAPPY[:3]:
        machine.send(event)
    machine.send(AcpEvent.STOP_REASON_RECEIVED)  # a late fact: a self-loop on settled
    for event in HAPPY[3:]:
        machine.send(event)
    assert machine.state_name == "quiescent"
    assert machine.stages_entered == ("initialize", "new-session", "prompt", "teardown")
    assert story(trail)[3] == ("stop_reason_received", "settled", "settled", "lifecycle")
    assert len(trail.entries) == 6
    with pytest.raises(TransitionNotAllowed):
        machine.send(AcpEvent.SESSION_CREATED)


class Foreign:
    """A listener of a type the relay does not know: the library registers it as usual."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on_enter_prompt(self) -> None:
        self.seen.append(("enter", "prompt"))

    def after_transition(self, event: Any, target: Any) -> None:  # a narrower signature
        self.seen.append((str(event), target.name))


def test_any_other_listener_gets_the_library_s_own_registration() -> None:
    foreign, trail = Foreign(), AuditTrail("run")
    machine = AcpLifecycle(listeners=[foreign, trail])
    assert machine._callbacks is not AcpLifecycle(listeners=[AuditTrail("x")])._callbacks
    machine.send(AcpEvent.INITIALIZE_ANSWERED)
    machine.send(AcpEvent.SESSION_CREATED)
    assert foreign.seen == [
        ("initialize_answered", "new-session"),
        ("enter", "prompt"),
        ("session_created", "prompt"),
    ]
    assert [e.event for e in trail.entries] == ["initialize_answered", "session_created"]
    assert machine.stage == "prompt"


class Noted(AcpLifecycle):  # type: ignore[misc,valid-type]
    """A chart class with a callback of its own, bound to each instance."""

    def __init__(self, **kwargs: Any) -> None:
        self.notes: list[str] = []
        super().__init__(**kwargs)

    def on_enter_settled(self) -> None:
        self.notes.append("settled")


def test_a_chart_with_callbacks_of_its_own_keeps_a_registry_per_instance() -> None:
    a, b = Noted(listeners=[AuditTrail("a")]), Noted(listeners=[AuditTrail("b")])
    assert a._callbacks is not b._callbacks
    for event in HAPPY[:3]:
        a.send(event)
    assert (a.notes, b.notes) == (["settled"], [])


def test_add_listener_does_not_reach_the_other_instances() -> None:
    a, b = AcpLifecycle(listeners=[AuditTrail("a")]), AcpLifecycle(listeners=[AuditTrail("b")])
    foreign = Foreign()
    a.add_listener(foreign)
    assert a._callbacks is not b._callbacks
    a.send(AcpEvent.INITIALIZE_ANSWERED)
    b.send(AcpEvent.INITIALIZE_ANSWERED)
    assert foreign.seen == [("initialize_answered", "new-session")]


def test_later_instances_start_where_the_first_did() -> None:
    """A chart with a shared registry starts from its model (nothing runs on entering the
    initial state); it must be indistinguishable from one whose engine entered it."""
    first = AcpLifecycle(listeners=[AuditTrail("first")])
    later = AcpLifecycle(listeners=[AuditTrail("later")])
    for machine in (first, later):
        assert machine.state_name == "initialize"
        assert [s.id for s in machine.configuration] == ["initialize"]
        with pytest.raises(TransitionNotAllowed):
            machine.send(CommonEvent.TREE_GONE)
        assert machine.state_name == "initialize"
        for event in HAPPY:
            machine.send(event)
        assert machine.state_name == "quiescent"
        assert machine.is_terminated
    ladder = TeardownLadder()
    assert ladder.rung == "running"
    ladder.send("stdin_closed")
    assert ladder.rung == "eof-wait"


class EntersInitialize:
    def __init__(self) -> None:
        self.entered = 0

    def on_enter_initialize(self) -> None:
        self.entered += 1


def test_a_listener_of_the_initial_state_sees_it_entered() -> None:
    AcpLifecycle(listeners=[AuditTrail("warm")])  # the class's registry is shared by now
    listener = EntersInitialize()
    AcpLifecycle(listeners=[listener])
    assert listener.entered == 1


def _all_charts() -> list[type[Any]]:
    from machines import acp, claude_code, codex, dsh_sdk

    return [*acp.MACHINES, *claude_code.MACHINES, *codex.MACHINES, *dsh_sdk.MACHINES, TeardownLadder]


class Terminated:
    """Sees, at each transition, whether the machine had stopped by then."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def after_transition(self, event: Any, source: Any, target: Any, machine: Any) -> None:
        self.seen.append(machine.is_terminated)


def _outcome(chart: type[Any], state: Any, event: str, then: list[str]) -> tuple[Any, ...]:
    """Send ``event`` in ``state``, then each of ``then`` (what a stopped machine refuses)."""
    trail = AuditTrail("run")
    machine = chart(listeners=[trail])
    machine.current_state_value = state.value
    told = Terminated()
    machine._relayed.append(told)  # hears what the audit trail hears, in the same place
    try:
        machine.send(event)
    except TransitionNotAllowed:
        return ("refused", machine.current_state_value, story(trail))
    after = []
    for later in then:
        try:
            machine.send(later)
            after.append(("moved", machine.current_state_value))
        except TransitionNotAllowed:
            after.append(("refused", machine.current_state_value))
    return ("moved", machine.current_state_value, story(trail), machine.is_terminated, told.seen, after)


@pytest.mark.parametrize("chart", _all_charts(), ids=lambda chart: chart.__name__)
def test_the_fast_path_does_what_the_engine_does_for_every_state_and_event(
    chart: type[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every (state, event) pair of every built-in chart, through the fast path and through
    the library's engine alone: the same state after, the same audit, the same refusals."""
    from machines import _shared

    events = sorted({str(name) for state in chart.states for t in state.transitions for name in t.events})
    fast = {(s.id, e): _outcome(chart, s, e, events) for s in chart.states for e in events}
    rows = _shared._fast_rows(chart)
    assert rows  # the chart does take the fast path for some rows
    assert any(target.final for target in rows.values())  # into its final states too
    monkeypatch.setattr(_shared, "_fast_rows", lambda cls: None)
    engine = {(s.id, e): _outcome(chart, s, e, events) for s in chart.states for e in events}
    assert fast == engine


def test_the_library_s_engine_is_built_only_when_an_event_needs_it() -> None:
    """A one-shot run's events all take the fast path, so its charts never build the
    library's engine; the first use that needs one builds it with the chart's state and
    flag, and the chart goes on as it would have (the same moves, the same refusals)."""
    from statemachine.engines.sync import SyncEngine

    TeardownLadder(listeners=[AuditTrail("run-0")])  # a class's first instance builds the registry
    trail = AuditTrail("run-1")
    ladder = TeardownLadder(listeners=[trail])
    assert not isinstance(ladder._engine, SyncEngine)
    ladder.send("stdin_closed")
    ladder.send("tree_exited")  # into a final state: the machine stops
    assert ladder.is_terminated
    assert not isinstance(ladder._engine, SyncEngine)
    with pytest.raises(TransitionNotAllowed):  # the engine's refusal, as before
        ladder.send("stdin_closed")
    assert isinstance(ladder._engine, SyncEngine)
    assert ladder.is_terminated
    assert story(trail) == [
        ("stdin_closed", "running", "eof-wait", "ladder"),
        ("tree_exited", "eof-wait", "gone", "ladder"),
    ]

    other = TeardownLadder(listeners=[AuditTrail("run-2")])
    other.send("stdin_closed")
    # asked of the engine: built now, in the chart's state
    assert {str(e.id) for e in other.enabled_events()} == {"eof_grace_expired", "kill_forced", "tree_exited"}
    assert isinstance(other._engine, SyncEngine)
    assert not other.is_terminated
    other.send("eof_grace_expired")
    assert other.rung == "term-wait"
