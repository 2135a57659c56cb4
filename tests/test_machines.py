"""Every lifecycle chart: well-formed tables, model-based fuzzing, diagrams current, no I/O."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from statemachine.exceptions import TransitionNotAllowed

import machines
from machines import LEAKED, QUIESCENT, SETTLED, AuditTrail, Lifecycle, TeardownLadder, all_machines
from supervisor import _diagrams

LIFECYCLES = [cls for classes in all_machines().values() for cls in classes if issubclass(cls, Lifecycle)]
FINALS = {QUIESCENT, LEAKED}


def transitions(cls: type[Lifecycle]) -> dict[tuple[str, str], str]:
    return {(source, event): target for event, source, target in cls.TABLE}


@pytest.mark.parametrize("cls", LIFECYCLES, ids=lambda c: c.__name__)
def test_table_is_well_formed(cls: type[Lifecycle]) -> None:
    table = transitions(cls)
    assert len(table) == len(cls.TABLE), "an event must not have two targets from one state"
    states = {*cls.STAGES, SETTLED, *FINALS}
    reachable = {cls.STAGES[0]}
    frontier = [cls.STAGES[0]]
    while frontier:
        here = frontier.pop()
        for (source, _), target in table.items():
            if source == here and target not in reachable:
                reachable.add(target)
                frontier.append(target)
    assert reachable == states, f"unreachable: {states - reachable}"
    for state in states - FINALS:  # every live state can still reach quiescence
        seen, frontier = {state}, [state]
        while frontier:
            here = frontier.pop()
            for (source, _), target in table.items():
                if source == here and target not in seen:
                    seen.add(target)
                    frontier.append(target)
        assert QUIESCENT in seen, f"{state} cannot reach quiescence"


@pytest.mark.parametrize("cls", LIFECYCLES, ids=lambda c: c.__name__)
@given(data=st.data())
def test_machine_follows_its_table(cls: type[Lifecycle], data: st.DataObject) -> None:
    """Random event sequences against the table as a model."""
    table = transitions(cls)
    events = sorted({event for event, _, _ in cls.TABLE})
    trail = AuditTrail("fuzz")
    machine = cls(listeners=[trail])
    model, last_stage = cls.STAGES[0], cls.STAGES[0]
    for event in data.draw(st.lists(st.sampled_from(events), max_size=25)):
        target = table.get((model, event))
        if target is None:
            with pytest.raises(TransitionNotAllowed):
                machine.send(event)
        else:
            machine.send(event)
            model = target
            if target in cls.STAGES:
                last_stage = target
        assert machine.state_name == model
        assert machine.stage == last_stage
        assert machine.is_terminated == (model in FINALS)
    chain = trail.entries
    assert all(a.target == b.source for a, b in itertools.pairwise(chain))
    if chain:
        assert chain[0].source == cls.STAGES[0]


def test_ladder_walks_down_in_order() -> None:
    ladder = TeardownLadder()
    for event in ("stdin_closed", "eof_grace_expired", "term_grace_expired", "kill_wait_expired"):
        ladder.send(event)
    assert ladder.rung == "survived"
    with pytest.raises(TransitionNotAllowed):
        ladder.send("tree_exited")


def test_committed_diagrams_are_current() -> None:
    assert _diagrams.stale(Path(__file__).resolve().parent.parent / "diagrams") == []


def test_mermaid_is_byte_stable() -> None:
    assert _diagrams.render() == _diagrams.render()


def test_machines_do_no_io() -> None:
    forbidden = {"anyio", "asyncio", "subprocess", "os", "socket", "psutil", "supervisor", "trio"}
    for path in Path(machines.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & forbidden, f"{path.name} imports {imported & forbidden}"
