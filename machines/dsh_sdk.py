"""The lifecycle of one DSH SDK run (initialize, session-run, shutdown).

``initialize`` covers the cwd check, the spawn and the ``initialize`` request with its
server identity check; the run is published once the runtime answered it.
``session-run`` is the ``session/prompt`` exchange and the turn it starts: the inbox
receipt of the prompt (``agent/inbox/spliced`` naming its message id) is recorded as
it arrives, and the turn settles when the root session reports ``idle`` or the wire
fails (transport closed, a protocol violation, a JSON-RPC error answer).
``shutdown`` is the teardown: the bounded ``shutdown`` request, then the whole-tree
ladder (stdin EOF, SIGTERM, SIGKILL), recorded by the ladder's own chart.
In a conversation each later turn is the next ``session/prompt`` on the same session:
``idle -> session-run``.
"""

from __future__ import annotations

import enum

from machines._lifecycle import SETTLED, build_lifecycle, common_rows
from machines._vocabulary import Vocabulary


class DshSdkEvent(enum.StrEnum):
    """The protocol facts of a DSH SDK run."""

    INITIALIZE_ANSWERED = "initialize_answered"
    PROMPT_SPLICED = "prompt_spliced"
    ROOT_IDLE = "root_idle"
    TRANSPORT_CLOSED = "transport_closed"
    PROTOCOL_VIOLATED = "protocol_violated"
    ERROR_ANSWERED = "error_answered"
    SHUTDOWN_ACKNOWLEDGED = "shutdown_acknowledged"


DshSdkLifecycle = build_lifecycle(
    "DshSdkLifecycle",
    stages=("initialize", "session-run", "shutdown"),
    events=DshSdkEvent,
    table=(
        (DshSdkEvent.INITIALIZE_ANSWERED, "initialize", "session-run"),
        (DshSdkEvent.PROMPT_SPLICED, "session-run", "session-run"),
        (DshSdkEvent.ROOT_IDLE, "session-run", SETTLED),
        (DshSdkEvent.TRANSPORT_CLOSED, "session-run", SETTLED),
        (DshSdkEvent.PROTOCOL_VIOLATED, "session-run", SETTLED),
        (DshSdkEvent.ERROR_ANSWERED, "session-run", SETTLED),
        (DshSdkEvent.SHUTDOWN_ACKNOWLEDGED, "shutdown", "shutdown"),
        *common_rows(
            startup=("initialize", "session-run"),
            running=("session-run",),
            teardown="shutdown",
            turn_stage="session-run",
            late=(
                DshSdkEvent.PROMPT_SPLICED,
                DshSdkEvent.ROOT_IDLE,
                DshSdkEvent.TRANSPORT_CLOSED,
                DshSdkEvent.PROTOCOL_VIOLATED,
                DshSdkEvent.ERROR_ANSWERED,
            ),
        ),
    ),
    doc=__doc__ or "",
    module=__name__,
)

DSH_SDK_VOCABULARY = Vocabulary(
    label="DSH SDK",
    stages=DshSdkLifecycle.STAGES,
    categories=frozenset(
        {
            "configuration",
            "protocol",
            "transport",
            "child-error",
            "child-disposed",
            "child-unknown",
            "missing-terminal",
            "unknown",
        }
    ),
    teardown_stage="shutdown",
    teardown_exit_facts=False,
    start_timeout_category="transport",
)
"""DSH lines carry no stop reason and no exit fields (not even the shutdown line)."""

MACHINES = (DshSdkLifecycle,)

__all__ = ("DSH_SDK_VOCABULARY", "MACHINES", "DshSdkEvent", "DshSdkLifecycle")
