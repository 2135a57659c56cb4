"""Pure lifecycle state machines (python-statemachine charts): no I/O, no anyio.

Each provider's run is one chart built from a transition table, with the provider's
closed diagnostic vocabulary beside it; the teardown ladder is a chart of its own.  The
built-in kinds' charts live here (``machines.acp``, ...); each kind declares its charts
(``ProviderKind.charts``), and ``subagents diagrams`` draws those of the installed kinds.
"""

from __future__ import annotations

from machines._audit import AuditTrail as AuditTrail
from machines._audit import Transition as Transition
from machines._audit import TransitionSink as TransitionSink
from machines._lifecycle import IDLE as IDLE
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

__all__ = (
    "IDLE",
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
    "build_lifecycle",
    "common_rows",
)
