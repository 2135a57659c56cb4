"""A JSON-RPC client for ``codex app-server`` over JSONL on its stdio, written here.

Framing, as the pinned app-server speaks it: one JSON object per
line, **no** ``"jsonrpc"`` member; ``{id, method, params}`` is a request (either way),
``{method, params}`` a notification (the server adds ``emittedAtMs``), ``{id, result}``
or ``{id, error}`` a response.  Server request ids count from 0, so ids are matched
per direction.

The client does not own the process.  :meth:`AppServerWire.run` reads frames until the
stream ends and must run in the owner's task group; the owner closes stdin, signals and
reaps.  Inbound:

* responses resolve the matching :meth:`request`;
* server requests are answered at once, in the reader, by the owner's ``answer``
  callback (a result object, or None: then the request is refused with a JSON-RPC
  error);
* notifications go to the owner's ``notify`` callback, in order, as they arrive, so
  the owner's view (partial output above all) is never behind what was received.

When the stream ends (EOF, a broken stdin pipe, a frame over the bound, a frame that
is not a JSON object, the process gone) the wire closes once, with the first reason:
pending requests fail with :class:`WireClosed` and the owner's ``closed`` callback runs.

``str()`` of every error here is a fixed sentence.  What the app-server said (error
codes and messages, payloads) stays on attributes and in the ``supervisor.child`` log (DEBUG).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from supervisor.provider import FrameTooLarge, LineReader, raw_failure
from supervisor.wire import (
    CloseOnce,
    FrameTooDeep,
    FrameWriter,
    Pending,
    PendingRequests,
    encode_frame,
    is_request_id,
    parse_frame,
)

__all__ = [
    "AppServerWire",
    "CloseReason",
    "Direction",
    "FrameTap",
    "Notification",
    "RpcError",
    "RunTap",
    "ServerRequest",
    "WireClosed",
    "WireError",
    "WireProtocolError",
]

log = logging.getLogger("supervisor")

METHOD_NOT_FOUND = -32601
_LOGGED_CHARS = 300

Direction = Literal["send", "recv"]
FrameTap = Callable[[Direction, Mapping[str, Any]], None]
"""Sees every frame of one connection, decoded, as it is sent or received."""
RunTap = Callable[[str, Direction, Mapping[str, Any]], None]
"""A provider-wide tap: the run id, then what a :data:`FrameTap` sees (tests, debugging)."""

ResultT = TypeVar("ResultT", bound=BaseModel)


class CloseReason(enum.StrEnum):
    EOF = "eof"
    BROKEN_PIPE = "broken-pipe"
    FRAME_TOO_LARGE = "frame-too-large"
    MALFORMED = "malformed"
    READ_FAILED = "read-failed"
    EXITED = "exited"
    STOPPED = "stopped"


# -- errors ----------------------------------------------------------------------------------


class WireError(Exception):
    """Base of every wire failure.  ``str()`` is a fixed, safe sentence."""


class WireClosed(WireError):
    """The wire closed before the awaited answer arrived."""

    def __init__(self, reason: CloseReason) -> None:
        super().__init__(f"the Codex app-server connection closed ({reason})")
        self.reason = reason

    @property
    def transport_lost(self) -> bool:
        """The stream itself ended (not a protocol fault): the process may have exited."""
        return self.reason in (CloseReason.EOF, CloseReason.BROKEN_PIPE, CloseReason.EXITED)


class WireProtocolError(WireError):
    """A response did not have the shape the protocol promises."""

    def __init__(self, method: str) -> None:
        super().__init__(f"the Codex app-server answered {method} with a malformed result")
        self.method = method


class RpcError(WireError):
    """The app-server answered a request with a JSON-RPC error.

    ``code`` and ``message`` are the child's values: attributes and the log only.
    """

    def __init__(self, method: str, code: object, message: object) -> None:
        super().__init__(f"the Codex app-server answered {method} with a JSON-RPC error")
        self.method = method
        self.code = code
        self.message = message


# -- inbound events --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ServerRequest:
    id: int | str
    method: str
    params: Mapping[str, Any]


Answer = Callable[[ServerRequest], Mapping[str, Any] | None]
OnNotification = Callable[[Notification], None]
OnClose = Callable[["CloseReason"], None]


class _Pending(Pending):
    """A request and the model its result is validated as."""

    __slots__ = ("model", "on_result")

    def __init__(self, method: str, model: type[BaseModel], on_result: Callable[[Any], None] | None) -> None:
        super().__init__(method)
        self.model = model
        self.on_result = on_result


class _Malformed(Exception):
    pass


class AppServerWire:
    """One app-server connection.  Start :meth:`run` in a task group before any request."""

    def __init__(
        self,
        reader: LineReader,
        writer: asyncio.StreamWriter,
        *,
        answer: Answer,
        notify: OnNotification,
        closed: OnClose | None = None,
        tap: FrameTap | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._answer = answer
        self._on_notification = notify
        self._on_close = closed
        self._tap = tap
        self._ids = itertools.count(1)
        self._pending: PendingRequests[_Pending] = PendingRequests()
        self._frames = FrameWriter(self._write)
        self._close: CloseOnce[CloseReason] = CloseOnce()
        self._close.on_close(self._closed_now)

    # -- state -------------------------------------------------------------------------

    @property
    def close_reason(self) -> CloseReason | None:
        return self._close.reason

    async def wait_closed(self) -> None:
        await self._close.wait()

    def closed_error(self) -> WireClosed:
        return WireClosed(self._close.reason or CloseReason.STOPPED)

    def close(self, reason: CloseReason) -> None:
        """Close once (the first reason wins): fail pending requests, tell the owner."""
        self._close.close(reason)

    def _closed_now(self, reason: CloseReason) -> None:
        log.debug("codex wire closed: %s", reason)
        self._pending.fail_all(lambda: WireClosed(reason))
        if self._on_close is not None:
            self._on_close(reason)

    # -- outbound ----------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Mapping[str, Any],
        result: type[ResultT],
        *,
        on_result: Callable[[ResultT], None] | None = None,
    ) -> ResultT:
        """Send a request and wait for its answer, validated as ``result``.

        ``on_result`` runs in the reader the moment a valid answer arrives, before any
        later frame is handled (the caller resumes only some time after that).
        Raises :class:`RpcError`, :class:`WireProtocolError` or :class:`WireClosed`.
        """
        if self._close.closed:
            raise self.closed_error()
        request_id = next(self._ids)
        pending = self._pending.add(request_id, _Pending(method, result, on_result))
        try:
            await self._send({"id": request_id, "method": method, "params": dict(params)})
            answer = await pending.wait()
        finally:
            self._pending.discard(request_id)
        assert isinstance(answer, result)
        return answer

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        frame: dict[str, Any] = {"method": method}
        if params is not None:
            frame["params"] = dict(params)
        await self._send(frame)

    async def _send(self, frame: dict[str, Any]) -> None:
        if self._close.closed:
            raise self.closed_error()
        data = encode_frame(frame)
        if self._tap is not None:
            self._tap("send", frame)
        try:
            await self._frames.send(data)
        except (ConnectionError, OSError, RuntimeError) as exc:
            log.debug("codex wire: write failed: %r", exc)
            self.close(CloseReason.BROKEN_PIPE)
            raise WireClosed(CloseReason.BROKEN_PIPE) from exc

    async def _write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    # -- inbound -----------------------------------------------------------------------

    async def run(self) -> None:
        """Read frames until the stream ends; then close with the reason."""
        reason = CloseReason.STOPPED
        try:
            while not self._close.closed:
                line = await self._reader.read_line()
                if line is None:
                    reason = CloseReason.EOF
                    break
                if self._close.closed:
                    break
                if not line.strip():
                    continue
                await self._dispatch(line)
        except FrameTooLarge:
            log.warning("codex app-server: a frame exceeded max_frame_bytes")
            reason = CloseReason.FRAME_TOO_LARGE
        except _Malformed as exc:
            log.warning("codex app-server: malformed frame")
            raw_failure("codex app-server: malformed frame: %s", exc)
            reason = CloseReason.MALFORMED
        except (ConnectionError, OSError) as exc:
            log.warning("codex app-server: reading stdout failed")
            raw_failure("codex app-server: reading stdout failed", exc=exc)
            reason = CloseReason.READ_FAILED
        finally:
            self.close(reason)

    async def _dispatch(self, line: bytes) -> None:
        try:
            frame = parse_frame(line)  # invalid UTF-8 in a frame becomes U+FFFD
        except FrameTooDeep as exc:
            raise _Malformed(f"nested too deep ({len(line)} bytes)") from exc
        except ValueError as exc:
            raise _Malformed(f"not JSON: {line[:_LOGGED_CHARS]!r}") from exc
        if not isinstance(frame, dict):
            raise _Malformed(f"not an object: {line[:_LOGGED_CHARS]!r}")
        if self._tap is not None:
            self._tap("recv", frame)
        method = frame.get("method")
        params = frame.get("params")
        if method is not None:
            if not isinstance(method, str):
                raise _Malformed("a method that is not a string")
            params = params if isinstance(params, Mapping) else {}
            if "id" in frame:
                if not is_request_id(frame["id"]):
                    raise _Malformed("a request id that is neither an integer nor a string")
                await self._on_request(ServerRequest(frame["id"], method, params))
            else:
                self._on_notification(Notification(method, params))
            return
        if "id" in frame and ("result" in frame or "error" in frame):
            self._on_response(frame)
            return
        raise _Malformed(f"neither request, response nor notification: {line[:_LOGGED_CHARS]!r}")

    def _on_response(self, frame: dict[str, Any]) -> None:
        request_id = frame["id"]
        pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is None:
            raw_failure("codex app-server: a response to no pending request (%.80r)", request_id)
            return
        if "error" in frame:
            error = frame["error"]
            code = error.get("code") if isinstance(error, Mapping) else None
            message = error.get("message") if isinstance(error, Mapping) else None
            log.info("codex app-server answered %s with an error", pending.method)
            raw_failure("codex app-server answered %s with error %r: %r", pending.method, code, message)
            pending.settle(error=RpcError(pending.method, code, message))
            return
        try:
            value = pending.model.model_validate(frame["result"])
        except ValidationError as exc:
            log.info("codex app-server: malformed %s result", pending.method)
            raw_failure("codex app-server: malformed %s result", pending.method, exc=exc)
            error = WireProtocolError(pending.method)
            error.__cause__ = exc
            pending.settle(error=error)
            return
        if pending.on_result is not None:
            pending.on_result(value)
        pending.settle(result=value)

    async def _on_request(self, request: ServerRequest) -> None:
        result = self._answer(request)
        if result is not None:
            frame: dict[str, Any] = {"id": request.id, "result": dict(result)}
        else:
            log.warning("codex app-server sent an unsupported request")
            raw_failure("codex app-server: the unsupported request: %r", request.method[:_LOGGED_CHARS])
            frame = {"id": request.id, "error": {"code": METHOD_NOT_FOUND, "message": "unsupported request"}}
        # If the stream is gone, the owner learns it from the close callback.
        with contextlib.suppress(WireClosed):
            await self._send(frame)
