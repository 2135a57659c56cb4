"""Anthropic Messages API (`POST /v1/messages`) rendering, the shapes Claude Code accepts."""

from __future__ import annotations

import json
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
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def error_body(turn: HttpError) -> dict[str, Any]:
    if turn.body is not None:
        return dict(turn.body)
    return {
        "type": "error",
        "error": {
            "type": turn.error_type or _DEFAULT_TYPES.get(turn.status, "api_error"),
            "message": turn.message or f"Mock HTTP {turn.status}",
        },
    }


def resolve(turn: Turn, request: RecordedRequest) -> Turn:
    if isinstance(turn, Shell):
        return ToolCall(
            "Bash",
            {"command": turn.command, "description": turn.description},
            text=turn.text,
            usage=turn.usage,
        )
    if isinstance(turn, WriteFile):
        return ToolCall(
            "Write", {"file_path": turn.path, "content": turn.content}, text=turn.text, usage=turn.usage
        )
    if isinstance(turn, EchoToolResult):
        results = request.tool_results()
        return Text(turn.prefix + results[-1] if results else turn.missing)
    return turn


def _split_json(encoded: str) -> list[str]:
    """Two `input_json_delta` pieces, as the real API streams tool input in fragments."""
    if len(encoded) < 2:
        return [encoded]
    half = len(encoded) // 2
    return [encoded[:half], encoded[half:]]


class _Message:
    def __init__(self, wire: Wire, request: RecordedRequest, new_id: NewId, usage: Usage | None) -> None:
        self.wire = wire
        self.new_id = new_id
        self.id = new_id("msg")
        self.model = request.model or "claude-mock"
        self.usage = usage or Usage()
        self.index = 0

    def start(self) -> None:
        self.wire.event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": self.id,
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": self.usage.input_tokens,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": self.usage.cached_input_tokens,
                        "output_tokens": 1,
                    },
                },
            },
        )
        self.wire.event("ping", {"type": "ping"})

    def open_text(self) -> int:
        index = self.index
        self.index += 1
        self.wire.event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        )
        return index

    def text_delta(self, index: int, chunk: str) -> None:
        self.wire.event(
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": chunk}},
        )

    def close_block(self, index: int) -> None:
        self.wire.event("content_block_stop", {"type": "content_block_stop", "index": index})

    def text(self, chunks: list[str], delay_s: float = 0.0) -> bool:
        index = self.open_text()
        for chunk in chunks:
            if delay_s and not self.wire.sleep(delay_s):
                return False
            self.text_delta(index, chunk)
            if not self.wire.alive:
                return False
        self.close_block(index)
        return self.wire.alive

    def tool_use(self, name: str, arguments: dict[str, Any]) -> None:
        index = self.index
        self.index += 1
        self.wire.event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": self.new_id("toolu"), "name": name, "input": {}},
            },
        )
        for piece in _split_json(json.dumps(arguments)):
            self.wire.event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                },
            )
        self.close_block(index)

    def stop(self, stop_reason: str) -> None:
        self.wire.event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": self.usage.output_tokens},
            },
        )
        self.wire.event("message_stop", {"type": "message_stop"})


def render(turn: Turn, request: RecordedRequest, wire: Wire, new_id: NewId) -> None:
    turn = resolve(turn, request)
    if isinstance(turn, HttpError):
        headers = {"request-id": new_id("req")}
        if turn.retry_after is not None:
            headers["retry-after"] = f"{turn.retry_after:g}"
        wire.send_json(turn.status, error_body(turn), headers)
        return
    if not request.stream:
        _render_json(turn, request, wire, new_id)
        return
    first_delay = turn.first_byte_delay_s if isinstance(turn, Text) else 0.0
    if first_delay and not wire.sleep(first_delay):
        return
    wire.start_sse()
    usage = turn.usage if isinstance(turn, Text | ToolCall) else None
    m = _Message(wire, request, new_id, usage)
    m.start()
    if isinstance(turn, Text):
        chunks = list(turn.chunks) if turn.chunks is not None else split_text(turn.text)
        if m.text(chunks, turn.delay_s):
            m.stop(turn.stop_reason)
    elif isinstance(turn, ToolCall):
        if turn.text and not m.text(split_text(turn.text)):
            return
        m.tool_use(turn.name, dict(turn.arguments))
        m.stop("tool_use")
    elif isinstance(turn, StreamFailure):
        if turn.text:
            index = m.open_text()
            for chunk in split_text(turn.text):
                m.text_delta(index, chunk)
        wire.event(
            "error", {"type": "error", "error": {"type": turn.anthropic_type, "message": turn.message}}
        )
    elif isinstance(turn, Cut):
        index = m.open_text()
        for chunk in split_text(turn.text):
            if turn.delay_s and not wire.sleep(turn.delay_s):
                return
            m.text_delta(index, chunk)
        wire.cut()
    elif isinstance(turn, Hang):
        index = m.open_text()
        for chunk in split_text(turn.text):
            m.text_delta(index, chunk)
        if wire.hang(turn.timeout_s) == "gone":
            return
        if turn.then:
            m.text_delta(index, turn.then)
        m.close_block(index)
        m.stop("end_turn")
    else:  # pragma: no cover - resolve() leaves no other kind
        raise TypeError(f"unhandled turn {turn!r}")


def _render_json(turn: Turn, request: RecordedRequest, wire: Wire, new_id: NewId) -> None:
    """Non-streaming `POST /v1/messages` (Claude Code's fallback after a failed stream)."""
    content: list[dict[str, Any]] = []
    stop_reason = "end_turn"
    usage: Usage | None = None
    if isinstance(turn, ToolCall):
        if turn.text:
            content.append({"type": "text", "text": turn.text})
        content.append(
            {"type": "tool_use", "id": new_id("toolu"), "name": turn.name, "input": dict(turn.arguments)}
        )
        stop_reason = "tool_use"
        usage = turn.usage
    elif isinstance(turn, StreamFailure):
        wire.send_json(
            529, {"type": "error", "error": {"type": turn.anthropic_type, "message": turn.message}}
        )
        return
    else:
        text = turn.text if isinstance(turn, Text | Cut | Hang) else ""
        content.append({"type": "text", "text": text})
        if isinstance(turn, Text):
            stop_reason = turn.stop_reason
            usage = turn.usage
    u = usage or Usage()
    wire.send_json(
        200,
        {
            "id": new_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": request.model or "claude-mock",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": u.cached_input_tokens,
            },
        },
    )
