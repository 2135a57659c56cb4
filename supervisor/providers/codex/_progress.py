"""What the Codex app-server's notifications say about a turn's progress, as closed values.

The app-server reports a turn's work as items (``item/started``, ``item/completed``),
each of a closed ``type``; the tool-like ones count as tool calls by that type (the kind
names below), with the status mapped onto the shared ones.  Conversation items (the
user's and the agent's messages, reasoning, the plan item, review-mode markers,
compaction) are not tool calls; a type this table does not know yet counts as
``other``.  The plan comes from ``turn/plan/updated`` (its steps' statuses only).
Nothing here reads an item's command, path, arguments or text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

TOOL_KINDS: Final = frozenset(
    {
        "commandExecution",
        "fileChange",
        "mcpToolCall",
        "dynamicToolCall",
        "collabAgentToolCall",
        "webSearch",
        "imageView",
        "imageGeneration",
        "other",
    }
)
"""The Codex run's closed tool-call kinds: the app-server's tool item types (v2 schema)."""

NOT_TOOLS: Final = frozenset(
    {
        "userMessage",
        "agentMessage",
        "hookPrompt",
        "functionCallOutput",
        "plan",
        "reasoning",
        "subAgentActivity",
        "sleep",
        "enteredReviewMode",
        "exitedReviewMode",
        "contextCompaction",
    }
)

APPROVALS: Final = frozenset({"command approval", "file approval", "permission grant"})
"""The app-server's requests that ask for a permission (counted, always ``denied``: the
unattended client never grants one); user input and MCP elicitations are not."""

_DONE: Final = {"completed": "completed", "failed": "failed", "declined": "failed", "interrupted": "failed"}
_PLAN: Final = {"pending": "pending", "inProgress": "in_progress", "completed": "completed"}


def tool_call(method: str, item: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(id, kind, status)`` of a tool item's ``item/started`` or ``item/completed``, or
    None for an item that is not a tool call (or has no id)."""
    kind = item.get("type")
    call = item.get("id")
    if not isinstance(kind, str) or kind in NOT_TOOLS or not isinstance(call, str):
        return None
    if kind not in TOOL_KINDS:
        kind = "other"
    if method == "item/started":
        return call, kind, "in_progress"
    status = item.get("status")
    return call, kind, _DONE.get(status, "completed") if isinstance(status, str) else "completed"


def plan_statuses(params: Mapping[str, Any]) -> list[str]:
    """``turn/plan/updated``: each step's status, in the shared names (unknown ones dropped)."""
    plan = params.get("plan")
    steps = plan if isinstance(plan, list) else []
    return [
        _PLAN[status]
        for step in steps
        if isinstance(step, dict) and isinstance(status := step.get("status"), str) and status in _PLAN
    ]
