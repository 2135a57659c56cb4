"""What a scripted mock-model turn can be, and what the server recorded.

A *turn* answers exactly one model request (`POST .../responses` or `POST .../messages`). The same
turn object renders as an OpenAI Responses API stream or as an Anthropic Messages API stream,
whichever API the request used, so one script works against any peer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Api = Literal["responses", "messages", "other"]


@dataclass(frozen=True)
class Usage:
    """Token usage reported at the end of a streamed turn (both APIs)."""

    input_tokens: int = 12
    output_tokens: int = 7
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class Text:
    """A plain streamed text answer.

    `chunks` fixes the deltas; by default the text is split into word-sized deltas.
    `delay_s` sleeps before every delta (a slow stream a test can cancel mid-way);
    `first_byte_delay_s` delays the HTTP response headers themselves.
    `stop_reason` is the Anthropic `message_delta.stop_reason` (ignored by the Responses API).
    """

    text: str = "ok"
    chunks: tuple[str, ...] | None = None
    delay_s: float = 0.0
    first_byte_delay_s: float = 0.0
    stop_reason: str = "end_turn"
    usage: Usage | None = None


@dataclass(frozen=True)
class ToolCall:
    """A raw tool call: Responses API `function_call` item / Anthropic `tool_use` block.

    `arguments` is sent verbatim (JSON-encoded for the Responses API). `text` is an optional
    assistant text emitted before the call in the same response.
    """

    name: str
    arguments: Mapping[str, Any]
    text: str = ""
    usage: Usage | None = None


@dataclass(frozen=True)
class Shell:
    """Ask the agent to run a shell command, in whatever shape the request's tools accept.

    Responses API: `exec_command` {"cmd"} when advertised, else `shell_command` {"command": str},
    else `shell` {"command": ["bash", "-lc", cmd]}. With `escalated=True` the call carries
    `sandbox_permissions: "require_escalated"` plus `justification` (this is what makes codex ask
    for approval under `approval_policy = "on-request"`).
    Messages API: `Bash` {"command", "description"}.
    """

    command: str
    escalated: bool = False
    justification: str = "the test asks for it"
    description: str = "Run a command for the test"
    text: str = ""
    usage: Usage | None = None


@dataclass(frozen=True)
class WriteFile:
    """Ask the agent to write a file.

    Messages API: the `Write` tool {"file_path", "content"} (the path should be absolute).
    Responses API: a `Shell` call that writes the file with printf (codex has no plain write tool).
    """

    path: str
    content: str
    escalated: bool = False
    text: str = ""
    usage: Usage | None = None


@dataclass(frozen=True)
class EchoToolResult:
    """Answer with `prefix` + the text of the latest tool result found in the request."""

    prefix: str = "tool said: "
    missing: str = "(no tool result)"


@dataclass(frozen=True)
class HttpError:
    """An HTTP error response with a JSON body.

    Without `body`, a body in the API's own error shape is built from `status`, `code`,
    `error_type` and `message` (OpenAI: {"error": {message, type, param, code}}; Anthropic:
    {"type": "error", "error": {type, message}}). `retry_after` adds a `retry-after` header.
    """

    status: int
    code: str | None = None
    error_type: str | None = None
    message: str | None = None
    body: Mapping[str, Any] | None = None
    retry_after: float | None = None

    @staticmethod
    def context_length_exceeded() -> HttpError:
        """400 whose body the peers recognise as a context-window overflow."""
        return HttpError(
            400,
            code="context_length_exceeded",
            error_type="invalid_request_error",
            message="prompt is too long: 250000 tokens > 200000 maximum",
        )


@dataclass(frozen=True)
class StreamFailure:
    """HTTP 200 stream that fails in-band.

    Responses API: `response.failed` with {"error": {code, message}}.
    Messages API: an SSE `error` event with {"type": "error", "error": {type, message}}.
    `text` is streamed first.
    """

    code: str = "server_is_overloaded"
    message: str = "mock stream failure"
    anthropic_type: str = "overloaded_error"
    text: str = ""


@dataclass(frozen=True)
class Cut:
    """Stream `text` (as deltas), then close the socket without the terminal events."""

    text: str = "partial"
    delay_s: float = 0.0


@dataclass(frozen=True)
class Hang:
    """Stream `text`, then stall (no bytes) until the client disconnects, the server closes,
    `MockModelServer.release()` is called, or `timeout_s` passes; on release/timeout the
    turn finishes normally with `then` appended."""

    text: str = "thinking"
    then: str = ""
    timeout_s: float | None = None


Turn = Text | ToolCall | Shell | WriteFile | EchoToolResult | HttpError | StreamFailure | Cut | Hang


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the mock received, in arrival order (`index` counts from 0)."""

    index: int
    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    raw_body: bytes
    body: dict[str, Any] | None
    api: Api
    t: float
    served: str = ""
    """Class name of the turn that answered it ("" for requests that consume no turn)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stream(self) -> bool:
        return bool(self.body and self.body.get("stream"))

    @property
    def model(self) -> str | None:
        value = self.body.get("model") if self.body else None
        return value if isinstance(value, str) else None

    def tool_names(self) -> list[str]:
        """Names of the tools the request advertises (function, custom and namespace tools)."""
        names: list[str] = []
        tools = self.body.get("tools") if self.body else None
        if not isinstance(tools, list):
            return names
        for tool in tools:
            if not isinstance(tool, dict):
                continue
            name = tool.get("name")
            if not isinstance(name, str):
                fn = tool.get("function")
                name = fn.get("name") if isinstance(fn, dict) else None
            if isinstance(name, str):
                names.append(name)
        return names

    def tool_results(self) -> list[str]:
        """Text of every tool result carried in the request, oldest first.

        Responses API: `function_call_output` / `custom_tool_call_output` input items.
        Messages API: `tool_result` blocks in user messages.
        """
        out: list[str] = []
        if not self.body:
            return out
        if self.api == "responses":
            items = self.body.get("input")
            if isinstance(items, list):
                for item in items:
                    if isinstance(item, dict) and item.get("type") in (
                        "function_call_output",
                        "custom_tool_call_output",
                    ):
                        out.append(_flatten_text(item.get("output")))
        elif self.api == "messages":
            messages = self.body.get("messages")
            if isinstance(messages, list):
                for message in messages:
                    content = message.get("content") if isinstance(message, dict) else None
                    if not isinstance(content, list):
                        continue
                    for block in content:
                        if isinstance(block, dict) and block.get("type") == "tool_result":
                            out.append(_flatten_text(block.get("content")))
        return out

    def user_texts(self) -> list[str]:
        """Text of every user message in the request, oldest first."""
        out: list[str] = []
        if not self.body:
            return out
        key = "input" if self.api == "responses" else "messages"
        items = self.body.get(key)
        if isinstance(items, str):
            return [items]
        if not isinstance(items, list):
            return out
        for item in items:
            if isinstance(item, dict) and item.get("role") == "user":
                text = _flatten_text(item.get("content"))
                if text:
                    out.append(text)
        return out

    @property
    def is_compaction(self) -> bool:
        """Codex's automatic context compaction request (sent before the next turn after a
        context-window overflow; it consumes a script entry like any other request)."""
        return any("CONTEXT CHECKPOINT COMPACTION" in text for text in self.user_texts()[-1:])

    def json(self) -> str:
        return json.dumps(self.body)


TurnFactory = Callable[[RecordedRequest], Turn]
"""A script entry may be a callable that picks the turn once the request is known."""

ScriptEntry = Turn | TurnFactory

_WORDS = re.compile(r"\S+\s*|\s+")


def split_text(text: str) -> list[str]:
    """Split text into word-sized deltas whose concatenation is exactly `text`."""
    return _WORDS.findall(text)


def _flatten_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts: list[str] = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "".join(parts)
    return ""
