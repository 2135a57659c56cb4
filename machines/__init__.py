"""Pure lifecycle state machines (python-statemachine charts): no I/O, no anyio.

Each provider's run is one chart built from a transition table; the teardown ladder
is a chart of its own.  ``ALL_MACHINES`` is what ``diagrams/`` is generated from.
"""

from __future__ import annotations

from machines._audit import AuditTrail as AuditTrail
from machines._audit import Transition as Transition
from machines._audit import TransitionSink as TransitionSink
from machines._lifecycle import LEAKED as LEAKED
from machines._lifecycle import QUIESCENT as QUIESCENT
from machines._lifecycle import SETTLED as SETTLED
from machines._lifecycle import Lifecycle as Lifecycle
from machines._lifecycle import build_lifecycle as build_lifecycle
from machines._lifecycle import common_rows as common_rows
from machines.ladder import TeardownLadder as TeardownLadder

__all__ = (
    "LEAKED",
    "QUIESCENT",
    "SETTLED",
    "AuditTrail",
    "Lifecycle",
    "TeardownLadder",
    "Transition",
    "TransitionSink",
    "build_lifecycle",
    "common_rows",
)
