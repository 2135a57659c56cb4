"""The Claude Code provider's lifecycle: the Claude Code CLI driven through claude-agent-sdk.

Stages
------
``query-start``  spawn the CLI (under the supervisor) and the SDK's ``initialize``
                 control round trip; the run is published once the CLI answered it;
``query-run``    the task is sent and SDK messages are read until the ``result`` message;
``process``      the CLI's exit was observed before a result (during start or the run);
``teardown``     the whole tree is taken down (stdin EOF, SIGTERM, SIGKILL).

Every event is the protocol or process fact that caused it.  A ``result`` message
settles the run whatever it says (``result_succeeded``, ``result_failed`` for an error
subtype, ``result_invalid`` for a success flagged ``is_error`` or with a blank answer);
``result_missing`` is a stream that ended without one while the CLI's exit was not
observed.  Failures without a finer fact settle through the shared ``failed`` row, local
cancellation through ``cancelled``.  In a conversation each later turn is the next user
message to the same CLI: ``idle -> query-run``.
"""

from __future__ import annotations

import enum

from machines._lifecycle import SETTLED, build_lifecycle, common_rows
from machines._vocabulary import DecisionField, Vocabulary


class ClaudeCodeEvent(enum.StrEnum):
    """The protocol and process facts of a Claude Code run."""

    INITIALIZED = "initialized"
    CLI_EXITED = "cli_exited"
    RESULT_SUCCEEDED = "result_succeeded"
    RESULT_FAILED = "result_failed"
    RESULT_INVALID = "result_invalid"
    RESULT_MISSING = "result_missing"


STAGES = ("query-start", "query-run", "process", "teardown")

ClaudeCodeLifecycle = build_lifecycle(
    "ClaudeCodeLifecycle",
    stages=STAGES,
    events=ClaudeCodeEvent,
    table=(
        (ClaudeCodeEvent.INITIALIZED, "query-start", "query-run"),
        (ClaudeCodeEvent.CLI_EXITED, "query-start", "process"),
        (ClaudeCodeEvent.RESULT_SUCCEEDED, "query-run", SETTLED),
        (ClaudeCodeEvent.RESULT_FAILED, "query-run", SETTLED),
        (ClaudeCodeEvent.RESULT_INVALID, "query-run", SETTLED),
        (ClaudeCodeEvent.RESULT_MISSING, "query-run", SETTLED),
        (ClaudeCodeEvent.CLI_EXITED, "query-run", "process"),
        *common_rows(
            startup=("query-start", "process"),
            running=("query-run", "process"),
            teardown="teardown",
            turn_stage="query-run",
            resume_stage="query-start",
            late=(
                ClaudeCodeEvent.CLI_EXITED,
                ClaudeCodeEvent.RESULT_SUCCEEDED,
                ClaudeCodeEvent.RESULT_FAILED,
                ClaudeCodeEvent.RESULT_INVALID,
                ClaudeCodeEvent.RESULT_MISSING,
            ),
        ),
    ),
    doc="The Claude Code provider's lifecycle (the Claude Code CLI through claude-agent-sdk).",
    module=__name__,
)

CLAUDE_CODE_VOCABULARY = Vocabulary(
    label="Claude Code",
    stages=ClaudeCodeLifecycle.STAGES,
    categories=frozenset({"limit", "product-error", "invalid-result", "process", "unknown"}),
    exit_categories=frozenset({"process"}),
    decision=(
        DecisionField("mode", frozenset({"dontAsk", "acceptEdits", "plan", "bypassPermissions", "default"})),
        DecisionField("request", frozenset({"tool permission", "MCP elicitation", "user dialog"})),
        DecisionField("decision", frozenset({"denied", "declined", "cancelled"})),
    ),
    start_timeout_category="unknown",
)

MACHINES = (ClaudeCodeLifecycle,)

__all__ = ("CLAUDE_CODE_VOCABULARY", "MACHINES", "STAGES", "ClaudeCodeEvent", "ClaudeCodeLifecycle")
