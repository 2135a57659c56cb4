"""Every lifecycle chart: well-formed tables, model-based fuzzing, diagrams current, no I/O."""

from __future__ import annotations

import ast
import enum
import importlib
import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from statemachine.exceptions import TransitionNotAllowed

import machines
from machines import IDLE, LEAKED, QUIESCENT, SETTLED, AuditTrail, Lifecycle, TeardownLadder
from supervisor import installed_kinds
from supervisor._version import DISTRIBUTION
from supervisor.cli import _diagrams

# Every installed kind's charts: the built-ins', and any other distribution's installed here.
LIFECYCLES = [chart for kind in installed_kinds().values() for chart in kind.load().charts]
FINALS = {QUIESCENT, LEAKED}


def transitions(cls: type[Lifecycle]) -> dict[tuple[str, str], str]:
    return {(source, event): target for event, source, target in cls.TABLE}


def converses(cls: type[Lifecycle]) -> bool:
    return any(source == IDLE or target == IDLE for _, source, target in cls.TABLE)


@pytest.mark.parametrize("cls", LIFECYCLES, ids=lambda c: c.__name__)
def test_table_is_well_formed(cls: type[Lifecycle]) -> None:
    table = transitions(cls)
    assert len(table) == len(cls.TABLE), "an event must not have two targets from one state"
    states = {*cls.STAGES, SETTLED, *FINALS} | ({IDLE} if converses(cls) else set())
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
    """``diagrams/`` holds this distribution's charts (another installed kind's are not committed)."""
    committed = Path(__file__).resolve().parent.parent / "diagrams"
    assert _diagrams.stale(committed, DISTRIBUTION) == []
    assert sorted(p.name for p in committed.iterdir()) == sorted(_diagrams.render(DISTRIBUTION))


def test_every_builtin_kind_carries_its_chart() -> None:
    for short, name in _KINDS.items():
        kind = installed_kinds()[name].load()
        assert kind.charts == importlib.import_module(f"machines.{short}").MACHINES
        assert kind.vocabulary.stages == kind.charts[0].STAGES


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


# -- typed events: every fact a run sends is a row of its own chart ---------------------------

_RUN_MODULES = {
    "acp": ("supervisor/providers/acp", "AcpEvent"),
    "dsh_sdk": ("supervisor/providers/dsh_sdk", "DshSdkEvent"),
    "claude_code": ("supervisor/providers/claude_code", "ClaudeCodeEvent"),
    "codex": ("supervisor/providers/codex", "CodexEvent"),
}
ROOT = Path(__file__).resolve().parent.parent
_KINDS = {"acp": "acp", "dsh_sdk": "dsh-sdk", "claude_code": "claude-code", "codex": "codex"}


def _sent_facts(folder: Path) -> list[tuple[str, str]]:
    """``(Enum, MEMBER)`` of every ``fact(...)``/``fact=`` argument in a provider package."""
    sent: list[tuple[str, str]] = []
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            values: list[ast.expr] = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "fact":
                    values.extend(node.args)
                values.extend(k.value for k in node.keywords if k.arg == "fact")
            for value in values:
                assert isinstance(value, ast.Attribute | ast.Name), (
                    f"{path.name}: a fact must be an enum member"
                )
                # ``verdict.event`` and the like are typed by mypy as the chart's enum
                if (
                    isinstance(value, ast.Attribute)
                    and isinstance(value.value, ast.Name)
                    and value.value.id.endswith("Event")
                ):
                    sent.append((value.value.id, value.attr))
    return sent


@pytest.mark.parametrize("short", sorted(_RUN_MODULES))
def test_every_fact_a_run_sends_is_in_its_table(short: str) -> None:
    folder, enum_name = _RUN_MODULES[short]
    (chart,) = importlib.import_module(f"machines.{short}").MACHINES
    assert issubclass(chart, Lifecycle)
    assert chart.EVENTS.__name__ == enum_name
    table_events = {event for event, _, _ in chart.TABLE}
    sent = _sent_facts(ROOT / folder)
    assert sent, "the run sends facts"
    for enum_used, member in sent:
        assert enum_used == enum_name, f"{short} sends a fact of {enum_used}"
        assert chart.EVENTS[member].value in table_events


@pytest.mark.parametrize("cls", LIFECYCLES, ids=lambda c: c.__name__)
def test_every_event_of_a_chart_has_a_row(cls: type[Lifecycle]) -> None:
    table_events = {event for event, _, _ in cls.TABLE}
    assert {e.value for e in cls.EVENTS} <= table_events
    assert table_events <= {e.value for e in cls.EVENTS} | {e.value for e in machines.CommonEvent}


@pytest.mark.parametrize("cls", LIFECYCLES, ids=lambda c: c.__name__)
def test_chart_names_its_real_module(cls: type[Lifecycle]) -> None:
    module = importlib.import_module(cls.__module__)
    assert getattr(module, cls.__name__) is cls


def test_a_row_with_an_event_outside_the_enum_is_refused() -> None:
    with pytest.raises(ValueError, match="not a member"):
        machines.build_lifecycle(
            "Bad",
            stages=("a",),
            events=machines.CommonEvent,
            table=(("typo", "a", SETTLED),),
            doc="",
            module=__name__,
        )


@pytest.mark.parametrize("short", sorted(_RUN_MODULES))
def test_vocabulary_stages_are_the_charts(short: str) -> None:
    module = importlib.import_module(f"machines.{short}")
    (chart,) = importlib.import_module(f"machines.{short}").MACHINES
    vocabularies = [v for v in vars(module).values() if isinstance(v, machines.Vocabulary)]
    assert len(vocabularies) == 1
    assert vocabularies[0].stages == chart.STAGES


# -- the turn loop of a conversation ----------------------------------------------------------

TURN_STAGES = {"acp": "prompt", "dsh_sdk": "session-run", "claude_code": "query-run", "codex": "turn-start"}
TO_SETTLED = {
    "acp": ("initialize_answered", "session_created", "stop_reason_received"),
    "dsh_sdk": ("initialize_answered", "root_idle"),
    "claude_code": ("initialized", "result_succeeded"),
    "codex": ("initialized", "thread_started", "turn_started", "turn_completed"),
}


@pytest.mark.parametrize("short", sorted(TURN_STAGES))
def test_every_built_in_chart_has_the_turn_loop(short: str) -> None:
    (chart,) = importlib.import_module(f"machines.{short}").MACHINES
    assert issubclass(chart, Lifecycle)
    table = transitions(chart)
    teardown = chart.STAGES[-1]
    assert table[(SETTLED, "turn_ended")] == IDLE
    assert table[(IDLE, "turn_sent")] == TURN_STAGES[short]
    for event in ("dispose_requested", "idle_timed_out", "child_lost", "conversation_ended"):
        assert table[(IDLE, event)] == teardown
    assert table[(SETTLED, "conversation_ended")] == teardown
    machine = chart()
    for event in TO_SETTLED[short]:
        machine.send(event)
    assert machine.state_name == SETTLED
    stage = machine.stage
    machine.send("turn_ended")
    assert (machine.state_name, machine.stage) == (IDLE, stage)  # idle is no stage: the last one stays
    machine.send("turn_sent")
    assert machine.state_name == TURN_STAGES[short]
    with pytest.raises(TransitionNotAllowed):  # strict: no second turn while one runs
        machine.send("turn_sent")


class _Step(enum.StrEnum):
    GO = "go"


def test_a_chart_without_a_turn_stage_has_no_idle_state() -> None:
    from tests.support.scripted import ScriptedLifecycle

    rows = (("go", "a", "b"), ("go", "b", SETTLED))
    chart = machines.build_lifecycle(
        "OneShot",
        stages=("a", "b", "teardown"),
        events=_Step,
        table=(*rows, *machines.common_rows(startup=("a",), running=("b",), teardown="teardown")),
        doc="",
        module=__name__,
    )
    assert IDLE not in {state.name for state in chart.states}
    assert IDLE in {state.name for state in ScriptedLifecycle.states}
    with pytest.raises(ValueError, match="must be one of the running stages"):
        machines.common_rows(startup=("a",), running=("b",), teardown="teardown", turn_stage="a")
