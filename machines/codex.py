"""The Codex provider's lifecycle: ``codex app-server`` driven over JSON-RPC (JSONL).

Stages
------
``initialize``    spawn, ``initialize`` request, ``initialized`` notification;
``thread-start``  ``thread/start`` (cwd, ephemeral, approval policy and sandbox by mode);
                  the run is published once the thread exists;
``turn-start``    ``turn/start`` with the task, until its response names the turn;
``turn``          notifications until ``turn/completed`` for this thread and turn;
``process``       the app-server exited before a terminal result (its exit observed);
``teardown``      the whole tree is taken down (stdin EOF, SIGTERM, SIGKILL).

Every event is the protocol or process fact that caused it.  A terminal
``turn/completed`` settles the run whatever its status; failures without a finer fact
settle through the shared ``failed`` row, local cancellation through ``cancelled``.
In a conversation each later turn is ``turn/start`` again on the same thread:
``idle -> turn-start``.
"""

from __future__ import annotations

import enum

from machines._lifecycle import SETTLED, build_lifecycle, common_rows
from machines._vocabulary import DecisionField, IntegerField, Vocabulary


class CodexEvent(enum.StrEnum):
    """The protocol and process facts of a Codex run."""

    INITIALIZED = "initialized"
    THREAD_STARTED = "thread_started"
    TURN_STARTED = "turn_started"
    TURN_COMPLETED = "turn_completed"
    APP_SERVER_EXITED = "app_server_exited"


STAGES = ("initialize", "thread-start", "turn-start", "turn", "process", "teardown")

CodexLifecycle = build_lifecycle(
    "CodexLifecycle",
    stages=STAGES,
    events=CodexEvent,
    table=(
        (CodexEvent.INITIALIZED, "initialize", "thread-start"),
        (CodexEvent.THREAD_STARTED, "thread-start", "turn-start"),
        (CodexEvent.TURN_STARTED, "turn-start", "turn"),
        (CodexEvent.TURN_COMPLETED, "turn", SETTLED),
        (CodexEvent.APP_SERVER_EXITED, "initialize", "process"),
        (CodexEvent.APP_SERVER_EXITED, "thread-start", "process"),
        (CodexEvent.APP_SERVER_EXITED, "turn-start", "process"),
        (CodexEvent.APP_SERVER_EXITED, "turn", "process"),
        *common_rows(
            startup=("initialize", "thread-start", "process"),
            running=("turn-start", "turn", "process"),
            teardown="teardown",
            turn_stage="turn-start",
            resume_stage="thread-start",
            late=(CodexEvent.TURN_STARTED, CodexEvent.TURN_COMPLETED, CodexEvent.APP_SERVER_EXITED),
        ),
    ),
    doc="The Codex provider's lifecycle (codex app-server over JSONL JSON-RPC).",
    module=__name__,
)

CODEX_PERMISSION_REQUESTS = frozenset(
    {
        "command approval",
        "file approval",
        "permission grant",
        "user input",
        "MCP elicitation",
        "command execution",
        "file change",
        "sandbox execution",
    }
)

CODEX_VOCABULARY = Vocabulary(
    label="Codex",
    stages=CodexLifecycle.STAGES,
    categories=frozenset(
        {
            "limit",
            "access-policy",
            "service",
            "transport",
            "product-error",
            "invalid-result",
            "process",
            "unknown",
        }
    ),
    exit_categories=frozenset({"process"}),
    fields=(IntegerField("http_status", "HTTP status", 0, 65535),),
    decision=(
        DecisionField(
            "mode", frozenset({"never", "approve-for-me", "dangerously-bypass-approvals-and-sandbox"})
        ),
        DecisionField("request", CODEX_PERMISSION_REQUESTS),
        DecisionField("decision", frozenset({"cancelled", "declined", "denied", "empty response", "failed"})),
    ),
    start_timeout_category="unknown",
)

MACHINES = (CodexLifecycle,)

__all__ = (
    "CODEX_PERMISSION_REQUESTS",
    "CODEX_VOCABULARY",
    "MACHINES",
    "STAGES",
    "CodexEvent",
    "CodexLifecycle",
)
