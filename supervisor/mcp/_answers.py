"""What a tool call answers: the text a parent model reads, and the facts a program reads.

A client decides what its model is shown.  The Claude Code CLI (2.1.332, measured) hands
its model a result's ``structuredContent`` whenever there is one, so a result that carried
``{run_id, provider, stop_reason, output, ...}`` there made the model read a JSON object,
not the subagent's answer.  So no result here carries ``structuredContent``: the one
content block is the text meant for the model (the answer, or the headline,
``Diagnostic:`` and partial output), and the same facts as before, for programs, ride in
the result's ``_meta`` under :data:`RESULT_META_KEY`, which no client shows its model.

A conversation's turn (a ``keep_alive`` run that is idle, its child kept) ends with one
fixed line naming its run id and the two tools that continue or end it, so a client that
shows its model text alone still lets the model speak to the subagent again.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from supervisor.mcp._desk import DeskState, Settled

RESULT_META_KEY = "subagent-supervisor/result"
"""The ``_meta`` key of a tool result's machine-readable facts."""


def conversation_line(run_id: str) -> str:
    """The fixed line a conversation's answer ends with."""
    return (
        f"This subagent conversation stays open (run_id: {run_id}): send_subagent with that "
        "run_id continues it; close_subagent ends it."
    )


def tool_result(
    text: str, facts: dict[str, Any] | None = None, *, error: bool = False
) -> types.CallToolResult:
    """One text block for the model; ``facts`` (if any) in ``_meta`` for programs."""
    result = types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)
    if facts is not None:
        result.meta = {RESULT_META_KEY: facts}
    return result


def settled_result(settled: Settled) -> types.CallToolResult:
    """A settled turn or run as a tool result (``isError`` unless it completed)."""
    text = settled.text
    if settled.keep_alive and settled.state is DeskState.IDLE:
        text = f"{text}\n\n{conversation_line(settled.run_id)}" if text else conversation_line(settled.run_id)
    return tool_result(text, settled.as_dict(), error=not settled.completed)


def result_facts(result: types.CallToolResult) -> dict[str, Any] | None:
    """The facts :func:`tool_result` put in a result's ``_meta`` (None when there are none)."""
    meta = result.meta or {}
    facts = meta.get(RESULT_META_KEY)
    return facts if isinstance(facts, dict) else None
