"""OpenAI Responses API (`POST /v1/responses`) rendering, the shapes codex accepts."""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

from .turns import (
    Cut,
    EchoToolResult,
    Hang,
    HttpError,
    RecordedRequest,
    Shell,
    StreamFailure,
    Text,
    ToolCall,
    Turn,
    Usage,
    WriteFile,
    split_text,
)
from .wire import NewId, Wire

_DEFAULT_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
}


def error_body(turn: HttpError) -> dict[str, Any]:
    if turn.body is not None:
        return dict(turn.body)
    code = turn.code
    if code is None and turn.status == 429:
        code = "rate_limit_exceeded"
    return {
        "error": {
            "message": turn.message or f"mock HTTP {turn.status}",
            "type": turn.error_type or _DEFAULT_TYPES.get(turn.status, "server_error"),
            "param": None,
            "code": code,
        }
    }


def shell_tool_call(
    request: RecordedRequest,
    command: str,
    *,
    escalated: bool,
    justification: str,
    text: str = "",
    usage: Usage | None = None,
) -> ToolCall:
    """Pick the shell tool the request advertises (exec_command > shell_command > shell)."""
    tools = request.tool_names()
    extra: dict[str, Any] = {}
    if escalated:
        extra = {"sandbox_permissions": "require_escalated", "justification": justification}
    if "exec_command" in tools or not any(t in tools for t in ("shell_command", "shell")):
        return ToolCall("exec_command", {"cmd": command, **extra}, text=text, usage=usage)
    if "shell_command" in tools:
        return ToolCall("shell_command", {"command": command, **extra}, text=text, usage=usage)
    return ToolCall("shell", {"command": ["bash", "-lc", command], **extra}, text=text, usage=usage)


def resolve(turn: Turn, request: RecordedRequest) -> Turn:
    """Turn the API-neutral turns into concrete ones for this API."""
    if isinstance(turn, Shell):
        return shell_tool_call(
            request,
            turn.command,
            escalated=turn.escalated,
            justification=turn.justification,
            text=turn.text,
            usage=turn.usage,
        )
    if isinstance(turn, WriteFile):
        command = f"printf %s {shlex.quote(turn.content)} > {shlex.quote(turn.path)}"
        return shell_tool_call(
            request,
            command,
            escalated=turn.escalated,
            justification="write the file the test asks for",
            text=turn.text,
            usage=turn.usage,
        )
    if isinstance(turn, EchoToolResult):
        results = request.tool_results()
        return Text(turn.prefix + results[-1] if results else turn.missing)
    return turn


def _usage(usage: Usage | None) -> dict[str, Any]:
    u = usage or Usage()
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.input_tokens + u.output_tokens,
    }


class _Response:
    """Builds one streamed response, keeping sequence numbers and output items."""

    def __init__(self, wire: Wire, request: RecordedRequest, new_id: NewId) -> None:
        self.wire = wire
        self.new_id = new_id
        self.id = new_id("resp")
        self.model = request.model or "mock-model"
        self.seq = 0
        self.output: list[dict[str, Any]] = []

    def obj(self, status: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "model": self.model,
            "output": list(self.output),
            **extra,
        }

    def emit(self, kind: str, **fields: Any) -> None:
        self.wire.event(kind, {"type": kind, "sequence_number": self.seq, **fields})
        self.seq += 1

    def created(self) -> None:
        self.emit("response.created", response=self.obj("in_progress"))

    def message(self, chunks: list[str], delay_s: float = 0.0) -> bool:
        """Stream an assistant message; False when the stream must stop (client gone)."""
        item_id = self.new_id("msg")
        index = len(self.output)
        self.emit(
            "response.output_item.added",
            output_index=index,
            item={
                "type": "message",
                "id": item_id,
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            },
        )
        for chunk in chunks:
            if delay_s and not self.wire.sleep(delay_s):
                return False
            self.emit(
                "response.output_text.delta",
                item_id=item_id,
                output_index=index,
                content_index=0,
                delta=chunk,
            )
            if not self.wire.alive:
                return False
        item = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "".join(chunks), "annotations": []}],
        }
        self.output.append(item)
        self.emit("response.output_item.done", output_index=index, item=item)
        return self.wire.alive

    def function_call(self, name: str, arguments: dict[str, Any]) -> None:
        item = {
            "type": "function_call",
            "id": self.new_id("fc"),
            "call_id": self.new_id("call"),
            "name": name,
            "arguments": json.dumps(arguments),
            "status": "completed",
        }
        index = len(self.output)
        self.output.append(item)
        self.emit("response.output_item.done", output_index=index, item=item)

    def completed(self, usage: Usage | None) -> None:
        self.emit("response.completed", response=self.obj("completed", usage=_usage(usage)))


def render(turn: Turn, request: RecordedRequest, wire: Wire, new_id: NewId) -> None:
    turn = resolve(turn, request)
    if isinstance(turn, HttpError):
        headers = {"retry-after": f"{turn.retry_after:g}"} if turn.retry_after is not None else {}
        wire.send_json(turn.status, error_body(turn), headers)
        return
    if not request.stream:
        _render_json(turn, request, wire, new_id)
        return
    first_delay = turn.first_byte_delay_s if isinstance(turn, Text) else 0.0
    if first_delay and not wire.sleep(first_delay):
        return
    wire.start_sse()
    r = _Response(wire, request, new_id)
    r.created()
    if isinstance(turn, Text):
        chunks = list(turn.chunks) if turn.chunks is not None else split_text(turn.text)
        if r.message(chunks, turn.delay_s):
            r.completed(turn.usage)
    elif isinstance(turn, ToolCall):
        if turn.text and not r.message(split_text(turn.text)):
            return
        r.function_call(turn.name, dict(turn.arguments))
        r.completed(turn.usage)
    elif isinstance(turn, StreamFailure):
        if turn.text and not r.message(split_text(turn.text)):
            return
        r.emit(
            "response.failed", response=r.obj("failed", error={"code": turn.code, "message": turn.message})
        )
    elif isinstance(turn, Cut):
        item_id = new_id("msg")
        r.emit(
            "response.output_item.added",
            output_index=0,
            item={
                "type": "message",
                "id": item_id,
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            },
        )
        for chunk in split_text(turn.text):
            if turn.delay_s and not wire.sleep(turn.delay_s):
                return
            r.emit(
                "response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=chunk
            )
        wire.cut()
    elif isinstance(turn, Hang):
        item_id = new_id("msg")
        r.emit(
            "response.output_item.added",
            output_index=0,
            item={
                "type": "message",
                "id": item_id,
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            },
        )
        for chunk in split_text(turn.text):
            r.emit(
                "response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=chunk
            )
        if wire.hang(turn.timeout_s) == "gone":
            return
        if turn.then:
            r.emit(
                "response.output_text.delta",
                item_id=item_id,
                output_index=0,
                content_index=0,
                delta=turn.then,
            )
        item = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": turn.text + turn.then, "annotations": []}],
        }
        r.output.append(item)
        r.emit("response.output_item.done", output_index=0, item=item)
        r.completed(None)
    else:  # pragma: no cover - resolve() leaves no other kind
        raise TypeError(f"unhandled turn {turn!r}")


def _render_json(turn: Turn, request: RecordedRequest, wire: Wire, new_id: NewId) -> None:
    """A non-streaming request (codex never sends one; answered for completeness)."""
    r = _Response(wire, request, new_id)
    usage: Usage | None = None
    if isinstance(turn, ToolCall):
        if turn.text:
            r.output.append(_message_item(new_id("msg"), turn.text))
        r.output.append(
            {
                "type": "function_call",
                "id": new_id("fc"),
                "call_id": new_id("call"),
                "name": turn.name,
                "arguments": json.dumps(dict(turn.arguments)),
                "status": "completed",
            }
        )
        usage = turn.usage
    elif isinstance(turn, StreamFailure):
        wire.send_json(
            500,
            {"error": {"message": turn.message, "type": "server_error", "param": None, "code": turn.code}},
        )
        return
    else:
        text = turn.text if isinstance(turn, Text | Cut | Hang) else ""
        r.output.append(_message_item(new_id("msg"), text))
        usage = turn.usage if isinstance(turn, Text) else None
    wire.send_json(200, r.obj("completed", usage=_usage(usage)))


def _message_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
