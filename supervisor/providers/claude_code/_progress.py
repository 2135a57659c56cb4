"""What Claude Code's stream messages say about a turn's progress, as closed values.

A tool call is a ``tool_use`` block of an assistant message (counted by the tool's name
when it is one of Claude Code's built-in tools, else as ``other``: an MCP tool's name is
the server's text), ``in_progress`` until the ``tool_result`` block that answers it
(``failed`` when it is an error, else ``completed``).  The plan is the latest
``TodoWrite`` call's todos, by status only.  Usage so far sums the assistant messages'
own token counts (one API call can arrive as several messages with the same id: each id
counts once); the turn's result message replaces it.  Nothing here reads a tool's
input (but a todo's status), a result's content, or any text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from claude_agent_sdk import AssistantMessage, ToolResultBlock, ToolUseBlock, UserMessage

from supervisor.provider import Usage

TOOL_KINDS: Final = frozenset(
    {
        "Agent",
        "Task",
        "Bash",
        "BashOutput",
        "KillShell",
        "KillBash",
        "Edit",
        "MultiEdit",
        "Write",
        "Read",
        "Glob",
        "Grep",
        "LS",
        "NotebookEdit",
        "NotebookRead",
        "WebFetch",
        "WebSearch",
        "TodoWrite",
        "TodoRead",
        "ExitPlanMode",
        "EnterPlanMode",
        "AskUserQuestion",
        "Skill",
        "SlashCommand",
        "ToolSearch",
        "Workflow",
        "ListAgents",
        "ReportFindings",
        "ScheduleWakeup",
        "TaskOutput",
        "TaskStop",
        "ListMcpResourcesTool",
        "ReadMcpResourceTool",
        "other",
    }
)
"""Claude Code's built-in tool names (those the bundled CLI offers a model, and its
earlier and deferred ones); every other name counts as ``other``."""

_TODO: Final = frozenset({"pending", "in_progress", "completed"})


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class TurnTools:
    """One turn's reading of the stream (reset with each turn)."""

    def __init__(self) -> None:
        self._usage: dict[str, tuple[int, int, int]] = {}  # message id -> (input, cached, output)

    def calls(self, message: AssistantMessage) -> Iterable[tuple[str, str, str]]:
        """``(id, kind, "in_progress")`` for each tool use in ``message``."""
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                yield block.id, block.name if block.name in TOOL_KINDS else "other", "in_progress"

    @staticmethod
    def results(message: UserMessage) -> Iterable[tuple[str, None, str]]:
        """``(id, None, status)`` for each tool result in ``message``."""
        content = message.content
        for block in content if isinstance(content, list) else ():
            if isinstance(block, ToolResultBlock):
                yield block.tool_use_id, None, "failed" if block.is_error else "completed"

    @staticmethod
    def plan(message: AssistantMessage) -> list[str] | None:
        """The statuses of the latest ``TodoWrite`` call's todos in ``message``, if any."""
        found: list[str] | None = None
        for block in message.content:
            if isinstance(block, ToolUseBlock) and block.name == "TodoWrite":
                todos = block.input.get("todos") if isinstance(block.input, Mapping) else None
                found = [
                    status
                    for todo in (todos if isinstance(todos, list) else [])
                    if isinstance(todo, Mapping) and (status := todo.get("status")) in _TODO
                ]
        return found

    def usage(self, message: AssistantMessage) -> Usage | None:
        """The turn's token counts so far, with ``message``'s; None when none were reported."""
        tokens: Any = message.usage
        key = message.message_id
        if isinstance(tokens, Mapping) and isinstance(key, str):
            read = _count(tokens.get("cache_read_input_tokens"))
            given = (
                _count(tokens.get("input_tokens")) + read + _count(tokens.get("cache_creation_input_tokens"))
            )
            self._usage[key] = (given, read, _count(tokens.get("output_tokens")))
        if not self._usage:
            return None
        given, read, out = (sum(column) for column in zip(*self._usage.values(), strict=True))
        return Usage.from_reported({"input_tokens": given, "cached_input_tokens": read, "output_tokens": out})
