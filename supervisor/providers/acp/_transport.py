"""The ACP SDK's message transport over the child's stdio, with the parent's own bounds.

The SDK's stdio transport skips a line that is not JSON (logging it with the child's
text) and dispatches every child-to-client request as a task of its own, without
limit.  This transport, handed to ``connect_to_agent`` instead of the raw streams:

* reads through the one bounded line reader;
* decodes each line leniently (invalid UTF-8 becomes U+FFFD: a broken byte in a chunk
  never loses the answer) and parses it with the one frame parser;
* ends the stream at the first line that is not a JSON-RPC message, or that is nested
  too deep to handle, recording a protocol fault (the run fails at once, instead of
  waiting on a child that talks garbage, or failing later as a broken connection);
* counts child-to-client requests not yet answered and ends the stream when more than
  ``max_inflight`` are open at once (a child that floods requests without reading our
  answers cannot grow the parent's memory).

Ending the stream makes the SDK reject every pending request with a connection error;
the run then reads :attr:`StdioTransport.fault` to classify the failure as ``protocol``.

It also keeps the raw results the provider classifies itself (:class:`RawResults`), read
from the frames it handles anyway: an SDK stream observer would get a deep copy of every
frame in both directions (about a tenth of the parent's CPU per example-agent run).

And it hands ``session/update`` notifications to the client itself (``session_update``),
in the order they arrive, before the next frame reaches the SDK: the SDK would spawn a
task, open a span and route each one (a streamed answer is dozens of them), and its
``prompt`` waits for those tasks anyway before it returns.  The client validates each
with the SDK's own model, so what it accepts and drops is the SDK's.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from supervisor.provider import FrameTooLarge, LineReader, raw_failure
from supervisor.wire import FrameTooDeep, InboundRequests, parse_frame

SESSION_UPDATE = "session/update"


class WireFault(enum.Enum):
    NOT_JSON_RPC = "a stdout line that is not a JSON-RPC message"
    TOO_MANY_REQUESTS = "too many unanswered child-to-client requests"
    FRAME_TOO_LARGE = "a stdout line over max_frame_bytes"
    FRAME_TOO_DEEP = "a stdout line nested too deep"


# Tuples, not ``X | Y``: a union written in a check is built anew at every call (every frame).
_PARAMS = (dict, list, type(None))
_ID = (int, str)


def is_json_rpc(message: object) -> bool:
    """Whether ``message`` is a JSON-RPC 2.0 request, notification or response."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return False
    if "method" in message:
        return isinstance(message["method"], str) and isinstance(message.get("params"), _PARAMS)
    return "id" in message and ("result" in message) != ("error" in message)


class RawResults:
    """The raw ``result`` of ``session/new`` and ``session/prompt``, as the child sent it.

    The SDK rejects an out-of-vocabulary stop reason or a missing session id while it
    validates, and the provider must still classify those, without ever copying the value.
    The request's method is noted before the request is written, so its answer can never
    arrive first.
    """

    WATCHED = ("session/new", "session/prompt")

    def __init__(self) -> None:
        self._methods: dict[int | str, str] = {}
        self.results: dict[str, object] = {}

    def sent(self, message: dict[str, Any]) -> None:
        method, rid = message.get("method"), message.get("id")
        if method in self.WATCHED and isinstance(rid, _ID):
            self._methods[rid] = method

    def received(self, message: dict[str, Any]) -> None:
        rid = message.get("id")
        if "method" in message or not isinstance(rid, _ID):
            return
        method = self._methods.pop(rid, None)
        if method is not None and "result" in message:
            self.results[method] = message["result"]

    def next_turn(self) -> None:
        """Forget the previous turn's ``session/prompt`` result (a conversation's next turn)."""
        self.results.pop("session/prompt", None)

    def raw_stop_reason(self) -> object:
        result = self.results.get("session/prompt")
        return result.get("stopReason") if isinstance(result, dict) else None

    def has_session_id(self) -> bool:
        result = self.results.get("session/new")
        return isinstance(result, dict) and isinstance(result.get("sessionId"), str)


class StdioTransport:
    """An ``acp`` message transport (``send``/``receive``/``close``) over the child's pipes."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_frame_bytes: int,
        max_inflight: int,
        session_update: Callable[[object], Awaitable[None]] | None = None,
    ) -> None:
        self._lines = LineReader(reader, max_frame_bytes)
        self._session_update = session_update
        self._writer = writer
        self._inbound = InboundRequests(max_inflight)
        self._write_lock = anyio.Lock(fast_acquire=True)  # uncontended: no checkpoint (drain is one)
        self._ended = False
        self.ended = anyio.Event()
        """Set once the stream has ended (EOF, a fault, or closed): no more messages."""
        self.fault: WireFault | None = None
        self.raw = RawResults()

    async def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        self.raw.sent(message)
        async with self._write_lock:
            if self._writer.is_closing():  # asyncio would drop the data and warn on stderr
                raise ConnectionResetError("the child's stdin is closed")
            self._writer.write(data)
            await self._writer.drain()
        if "method" not in message:  # our answer to a child's request
            self._inbound.answered()

    async def receive(self) -> dict[str, Any] | None:
        while not self._ended:
            try:
                line = await self._lines.read_line()
            except FrameTooLarge:
                self._end(WireFault.FRAME_TOO_LARGE)
                break
            if line is None or self._lines.exhausted:  # a line cut short by EOF: the child died
                self._end(None)
                break
            if not line or line.isspace():  # a blank line (no copy of the line, as ``strip`` makes)
                continue
            try:
                message = parse_frame(line)
            except FrameTooDeep:
                raw_failure("ACP child: a stdout line nested too deep (%d bytes)", len(line))
                self._end(WireFault.FRAME_TOO_DEEP)
                break
            except ValueError as exc:
                raw_failure("ACP child: unparsable stdout line: %.200r", line, exc=exc)
                self._end(WireFault.NOT_JSON_RPC)
                break
            if not is_json_rpc(message):
                raw_failure("ACP child: not a JSON-RPC message: %.200r", message)
                self._end(WireFault.NOT_JSON_RPC)
                break
            if "method" in message and "id" in message and not self._inbound.admit():
                self._end(WireFault.TOO_MANY_REQUESTS)
                break
            self.raw.received(message)
            if (
                self._session_update is not None
                and message.get("method") == SESSION_UPDATE
                and "id" not in message
            ):
                try:
                    await self._session_update(message.get("params"))
                except Exception as exc:  # what the SDK does with a notification that fails
                    raw_failure("ACP child: a session/update notification failed", exc=exc)
                continue
            return dict(message)
        return None

    def _end(self, fault: WireFault | None) -> None:
        self._ended = True
        self.ended.set()
        if self.fault is None:
            self.fault = fault

    async def close(self) -> None:
        self._ended = True
        self.ended.set()
