"""The lifecycle of one ACP run (initialize, new-session, prompt, process, teardown).

``initialize`` covers the cwd check, the spawn, the ACP ``initialize`` request and the
optional ``authenticate``; ``process`` is entered when the spawn fails or the child
exits before the prompt's terminal response.  In a conversation each later turn is
``session/prompt`` again on the same session: ``idle -> prompt``.  A cold resume
continues a session in ``new-session`` (``session/resume``, else ``session/load``) and
is published idle (``resumed``).
"""

from __future__ import annotations

import enum

from machines._lifecycle import SETTLED, build_lifecycle, common_rows
from machines._vocabulary import ClosedField, DecisionField, Vocabulary


class AcpEvent(enum.StrEnum):
    """The protocol and process facts of an ACP run."""

    SPAWN_FAILED = "spawn_failed"
    INITIALIZE_ANSWERED = "initialize_answered"
    SESSION_CREATED = "session_created"
    STOP_REASON_RECEIVED = "stop_reason_received"
    PROMPT_FAILED = "prompt_failed"
    CHILD_EXITED = "child_exited"
    EXIT_OBSERVED = "exit_observed"


AcpLifecycle = build_lifecycle(
    "AcpLifecycle",
    stages=("initialize", "new-session", "prompt", "process", "teardown"),
    events=AcpEvent,
    table=(
        (AcpEvent.SPAWN_FAILED, "initialize", "process"),
        (AcpEvent.INITIALIZE_ANSWERED, "initialize", "new-session"),
        (AcpEvent.SESSION_CREATED, "new-session", "prompt"),
        (AcpEvent.STOP_REASON_RECEIVED, "prompt", SETTLED),
        (AcpEvent.PROMPT_FAILED, "prompt", SETTLED),
        (AcpEvent.CHILD_EXITED, "prompt", "process"),
        (AcpEvent.EXIT_OBSERVED, "process", SETTLED),
        *common_rows(
            startup=("initialize", "new-session", "process"),
            running=("prompt", "process"),
            teardown="teardown",
            turn_stage="prompt",
            resume_stage="new-session",
            late=(
                AcpEvent.STOP_REASON_RECEIVED,
                AcpEvent.PROMPT_FAILED,
                AcpEvent.CHILD_EXITED,
                AcpEvent.EXIT_OBSERVED,
            ),
        ),
    ),
    doc=__doc__ or "",
    module=__name__,
)

ACP_TOOL_KINDS = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"}
)
"""The closed ACP tool kinds a permission line may name (any other kind is ``unknown``)."""

ACP_VOCABULARY = Vocabulary(
    label="ACP",
    stages=AcpLifecycle.STAGES,
    categories=frozenset(
        {
            "configuration",
            "protocol",
            "transport",
            "process-start",
            "process-exit",
            "remote-limit",
            "unknown",
        }
    ),
    exit_categories=frozenset({"process-exit"}),
    fields=(ClosedField("stop_reason", "stop reason", frozenset({"max_turn_requests", "unknown"})),),
    decision=(
        DecisionField("policy", frozenset({"allow", "reject"})),
        DecisionField("request", ACP_TOOL_KINDS, fallback="unknown"),
        DecisionField("decision", frozenset({"allowed", "denied"})),
    ),
    start_timeout_category="transport",
)

MACHINES = (AcpLifecycle,)

__all__ = ("ACP_TOOL_KINDS", "ACP_VOCABULARY", "MACHINES", "AcpEvent", "AcpLifecycle")
