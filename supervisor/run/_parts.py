"""The engine's composition: the parts one run holds, and the order they are built in.

Each part is handed the shared :class:`~supervisor.run._state.RunState`, the author's run
(as :class:`~supervisor.run._state.Hooks`) and the parts it calls, never a later one: a
later part's work reaches an earlier one only as a callback passed in a call.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.journal._observer import RunObserver
from supervisor.run._progress import ProgressTracker
from supervisor.run._settle import Settlement
from supervisor.run._start import Start
from supervisor.run._state import Hooks, RunState
from supervisor.run._teardown import Teardown
from supervisor.run._turns import Turns
from supervisor.run._watch import Limits
from supervisor.telemetry._switch import RunTelemetry
from supervisor.workspace import RunWorkspace


@dataclass(frozen=True, slots=True)
class Engine:
    """The engine's parts one run holds."""

    state: RunState
    settlement: Settlement
    limits: Limits
    teardown: Teardown
    turns: Turns
    start: Start


def build_engine(run: Hooks, *, telemetry: RunTelemetry, journal: RunObserver, turn: int) -> Engine:
    """The parts of ``run``, whose turn count starts at ``turn`` (a resumed conversation's
    last turn, else 1)."""
    config = run.config
    state = RunState(
        workspace=RunWorkspace(config.workspace, config.workspace_base, config.workspace_keep),
        telemetry=telemetry,
        journal=journal,
        progress=ProgressTracker(run.tool_kinds, lambda: (run.machine.stage, state.turn_number)),
        turn_number=turn,
        turn_task=run.request.task,
        first_turn=turn + 1 if run.resuming else 1,
    )
    settlement = Settlement(state, run)
    limits = Limits(state, run)
    teardown = Teardown(state, run, settlement, limits)
    turns = Turns(state, run, settlement, limits, teardown)
    return Engine(
        state, settlement, limits, teardown, turns, Start(state, run, settlement, limits, teardown, turns)
    )
