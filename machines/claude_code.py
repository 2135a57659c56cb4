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
cancellation through ``cancelled``.
"""

from __future__ import annotations

from machines._lifecycle import SETTLED, build_lifecycle, common_rows

STAGES = ("query-start", "query-run", "process", "teardown")

ClaudeCodeLifecycle = build_lifecycle(
    "ClaudeCodeLifecycle",
    stages=STAGES,
    table=(
        ("initialized", "query-start", "query-run"),
        ("cli_exited", "query-start", "process"),
        ("result_succeeded", "query-run", SETTLED),
        ("result_failed", "query-run", SETTLED),
        ("result_invalid", "query-run", SETTLED),
        ("result_missing", "query-run", SETTLED),
        ("cli_exited", "query-run", "process"),
        *common_rows(
            startup=("query-start", "process"),
            running=("query-run", "process"),
            teardown="teardown",
        ),
    ),
    doc="The Claude Code provider's lifecycle (the Claude Code CLI through claude-agent-sdk).",
)

__all__ = ("STAGES", "ClaudeCodeLifecycle")
