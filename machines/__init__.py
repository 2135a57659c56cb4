"""Pure lifecycle state machines (python-statemachine charts): no I/O, no anyio.

Each provider's run is one chart built from a transition table, with the provider's
closed diagnostic vocabulary beside it; the teardown ladder is a chart of its own.
:func:`all_machines` is what ``diagrams/`` is generated from.
"""

from __future__ import annotations

import importlib
from typing import Any

from machines._audit import AuditTrail as AuditTrail
from machines._audit import Transition as Transition
from machines._audit import TransitionSink as TransitionSink
from machines._lifecycle import LEAKED as LEAKED
from machines._lifecycle import QUIESCENT as QUIESCENT
from machines._lifecycle import SETTLED as SETTLED
from machines._lifecycle import CommonEvent as CommonEvent
from machines._lifecycle import Lifecycle as Lifecycle
from machines._lifecycle import build_lifecycle as build_lifecycle
from machines._lifecycle import common_rows as common_rows
from machines._vocabulary import ClosedField as ClosedField
from machines._vocabulary import DecisionField as DecisionField
from machines._vocabulary import IntegerField as IntegerField
from machines._vocabulary import Vocabulary as Vocabulary
from machines.ladder import TeardownLadder as TeardownLadder

_MACHINE_MODULES = ("ladder", "acp", "dsh_sdk", "claude_code", "codex")


def all_machines() -> dict[str, tuple[type[Any], ...]]:
    """Every machine to draw, by short module name (``acp`` -> ``AcpLifecycle``, ...)."""
    found: dict[str, tuple[type[Any], ...]] = {}
    for short in _MACHINE_MODULES:
        name = f"machines.{short}"
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a provider whose machine is not written yet
            if exc.name != name:
                raise
            continue
        declared = getattr(module, "MACHINES", None)
        if declared is None:
            declared = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Lifecycle)]
        found[short] = tuple(cls for cls in declared if cls is not Lifecycle)
    return found


__all__ = (
    "LEAKED",
    "QUIESCENT",
    "SETTLED",
    "AuditTrail",
    "ClosedField",
    "CommonEvent",
    "DecisionField",
    "IntegerField",
    "Lifecycle",
    "TeardownLadder",
    "Transition",
    "TransitionSink",
    "Vocabulary",
    "all_machines",
    "build_lifecycle",
    "common_rows",
)
