"""The DSH SDK wire: a typed async JSON-RPC client over NDJSON on a runtime's stdio.

Facts (research/ts-original.md section 7): one JSON-RPC 2.0 frame per line; a frame
with ``id`` and ``method`` is a request, ``id`` alone a response, ``method`` alone a
notification; blank lines and frames that are not JSON are ignored.  Requests sent here:
``initialize {cwd, provider, model, maxTokens?}`` (answered with the server identity),
``session/prompt {sessionId, contentBlocks}`` (answered with ``{messageId}``, an enqueue
receipt, not the end of the turn) and ``shutdown``.

The turn trap: the runtime may emit a whole turn's notifications *before* the response
that names the ``messageId``.  :meth:`DshClient.run_turn` therefore subscribes to the
session tree before it sends the prompt, buffers what arrives, and only once the message
id is known skips to the inbox receipt (``agent/inbox/spliced`` listing that id) and
folds the turn from there until the root session reports ``idle``.

Errors form one small hierarchy under :class:`DshError`.  ``str()`` of every error is a
fixed sentence: nothing the runtime sent (codes, messages, data, payloads) is ever in it.
The raw facts stay on attributes, ``__cause__`` and the ``supervisor`` debug log.

The client does not own the process: it reads lines from a :class:`LineSource`, writes
bytes to a :class:`LineSink`, and leaves spawning, stdin EOF, signals and reaping to the
supervisor.  :class:`AsyncioLineReader` and :class:`AsyncioLineWriter` adapt asyncio
streams (``asyncio.create_subprocess_exec`` pipes).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal, Protocol, Self, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus
from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "SERVER_NAME",
    "AsyncioLineReader",
    "AsyncioLineWriter",
    "DshClient",
    "DshError",
    "DshProtocolError",
    "DshRpcError",
    "DshTimeout",
    "DshTransportClosed",
    "LineSink",
    "LineSource",
    "Notification",
    "ServerInfo",
    "SessionEvent",
    "SessionStatus",
    "SubagentFinished",
    "SubagentStarted",
    "TurnEnd",
    "TurnEndKind",
    "TurnOutcome",
    "TurnProgress",
    "new_session_id",
]

_log = logging.getLogger("supervisor")
_child_log = logging.getLogger("supervisor.child")  # child-controlled text: DEBUG only

SERVER_NAME: Final = "deepseek-harness-sdk-runtime"
"""The ``serverInfo.name`` a DSH SDK runtime reports from ``initialize``."""

DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
DEFAULT_MAX_INFLIGHT_REQUESTS: Final = 64
MAX_SAFE_INTEGER: Final = 2**53 - 1
_METHOD_NOT_FOUND: Final = -32601
_LOGGED_FRAME_CHARS: Final = 200


# --------------------------------------------------------------------------- errors


class DshError(Exception):
    """Base of every DSH SDK wire failure.  ``str()`` is a fixed, safe sentence.

    A bare ``DshError`` (no subclass) means an unexpected fault of the wire itself.
    """

    def again(self) -> Self:
        """A fresh instance with the same facts (to raise one stored failure in many places)."""
        clone = type(self).__new__(type(self))
        clone.args = self.args
        clone.__dict__.update(self.__dict__)
        clone.__cause__ = self.__cause__
        return clone


class DshProtocolError(DshError):
    """The runtime broke the protocol: a malformed answer to a request, a wrong server
    identity, a malformed event of the owned turn, or a frame over ``max_frame_bytes``."""


class DshRpcError(DshError):
    """The runtime answered a request with a JSON-RPC error.

    ``code``, ``message`` and ``data`` are the runtime's own (child-controlled) values;
    they are kept as attributes for the host log and never appear in ``str()``/``repr()``.
    """

    def __init__(self, method: str, code: int, message: str, data: object) -> None:
        super().__init__(f"the DSH SDK runtime answered {method} with a JSON-RPC error")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


TransportCloseReason = Literal["eof", "broken-pipe", "read-failed", "input-closed", "stopped"]

_CLOSE_TEXT: Final[dict[TransportCloseReason, str]] = {
    "eof": "the DSH SDK runtime closed its output (EOF on stdout)",
    "broken-pipe": "the DSH SDK runtime's input is gone (broken pipe on stdin)",
    "read-failed": "reading the DSH SDK runtime's output failed",
    "input-closed": "the DSH SDK runtime's input was already closed by the supervisor",
    "stopped": "the DSH SDK client stopped reading the runtime's output",
}


class DshTransportClosed(DshError):
    """The transport is gone: EOF on stdout or a broken stdin, whichever came first.

    ``reason`` says which (``eof``, ``broken-pipe``, ``read-failed``, ``input-closed``,
    ``stopped``); the first closing fact wins and later calls report the same one.
    """

    def __init__(self, reason: TransportCloseReason) -> None:
        super().__init__(_CLOSE_TEXT[reason])
        self.reason: TransportCloseReason = reason


class DshTimeout(DshError):
    """A request's own bound (the ``timeout`` argument) elapsed before its answer."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"{method} timed out after {timeout:g}s waiting for the DSH SDK runtime")
        self.method = method
        self.timeout = timeout


# --------------------------------------------------------------------------- wire models

_M = TypeVar("_M", bound=BaseModel)


class _Wire(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class _RpcErrorBody(_Wire):
    code: int
    message: str
    data: Any = None


class _ServerInfo(_Wire):
    name: str
    version: str


class _InitializeResult(_Wire):
    serverInfo: _ServerInfo


class _PromptResult(_Wire):
    messageId: str


class _SessionEventParams(_Wire):
    sessionId: str
    event: Any = None


class _SessionStatusParams(_Wire):
    sessionId: str
    status: Literal["idle", "running"]


class _SubagentStartedParams(_Wire):
    parentSessionId: str
    childSessionId: str


class _Envelope(_Wire):
    type: str
    data: Any = None


class _ContentBlock(_Wire):
    type: str
    text: Any = None


class _AssistantMessage(_Wire):
    content: list[_ContentBlock]


class _AssistantMessageData(_Wire):
    message: _AssistantMessage


class _Chunk(_Wire):
    type: str
    text: str


class _AssistantChunkData(_Wire):
    chunk: _Chunk


class _Cause(_Wire):
    kind: str


class _Reason(_Wire):
    kind: str
    reason: Any = None


class _TurnEndData(_Wire):
    reason: _Reason


class _InsertedMessage(_Wire):
    id: Any = None


class _InboxSplicedData(_Wire):
    inserted: list[Any]


def _parse(model: type[_M], value: object) -> _M | None:
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


# --------------------------------------------------------------------------- public values


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The runtime's identity from ``initialize``."""

    name: str
    version: str


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """``session.event``: one session-log envelope (raw JSON, validated only for the owned turn)."""

    session_id: str
    event: object

    @property
    def type(self) -> str | None:
        return _event_type(self.event)


@dataclass(frozen=True, slots=True)
class SessionStatus:
    """``session.status``."""

    session_id: str
    status: Literal["idle", "running"]


@dataclass(frozen=True, slots=True)
class SubagentStarted:
    """``subagent.started``: teaches the client the session lineage."""

    parent_session_id: str
    child_session_id: str


@dataclass(frozen=True, slots=True)
class SubagentFinished:
    """``subagent.finished`` (local in-process child runs only); ``params`` is raw."""

    parent_session_id: str
    child_session_id: str
    params: Mapping[str, object]


Notification = SessionEvent | SessionStatus | SubagentStarted | SubagentFinished


class TurnEndKind(enum.StrEnum):
    """The closed turn-end kinds the client recognises; anything else is ``UNKNOWN``."""

    COMPLETED = "completed"
    MAX_TOKENS = "max-tokens"
    ABORTED = "aborted"
    BLOCKED = "blocked"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"


_KNOWN_KINDS: Final = {kind.value: kind for kind in TurnEndKind if kind is not TurnEndKind.UNKNOWN}


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """The ``reason`` of a root ``turn/end`` event.

    ``raw_kind`` is the runtime's string (``None`` when the reason was malformed); ``cause``
    is the nested ``reason.kind`` of an ``aborted`` end (``user``, ``parent``, ``hook``,
    ``disposed``, ``legacy``, or whatever the runtime sent), else ``None``.  Both are
    child-controlled: classify with :attr:`kind` / :attr:`disposed`, never display them.
    """

    raw_kind: str | None
    cause: str | None = None

    @property
    def kind(self) -> TurnEndKind:
        if self.raw_kind is None:
            return TurnEndKind.UNKNOWN
        return _KNOWN_KINDS.get(self.raw_kind, TurnEndKind.UNKNOWN)

    @property
    def disposed(self) -> bool:
        """An ``aborted`` end whose cause is ``disposed``."""
        return self.kind is TurnEndKind.ABORTED and self.cause == "disposed"


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """A turn that reached the root session's ``idle``."""

    output: str
    turn_end: TurnEnd | None
    """The last root ``turn/end`` of the turn; ``None`` when the runtime sent none."""


class _BoundedText:
    """Text accumulated up to ``limit`` UTF-8 bytes (a prefix, never a split code point)."""

    __slots__ = ("_limit", "_parts", "_size", "truncated")

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._parts: list[str] = []
        self._size = 0
        self.truncated = False

    def append(self, text: str) -> None:
        if not text or self.truncated:
            return
        size = len(text.encode("utf-8", "surrogatepass"))
        if self._limit is not None and self._size + size > self._limit:
            room = self._limit - self._size
            text = text.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
            size = room
            self.truncated = True
        self._parts.append(text)
        self._size += size

    @property
    def text(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""


class TurnProgress:
    """The fold of one owned turn, readable while the turn runs and after it failed.

    Output rule: the text of the last *non-empty* root ``assistant/message`` (content
    with at least one block; a block-ful message without text blocks counts and yields
    ``""``), else the root ``text-delta`` chunks accumulated.  Only notifications after
    the inbox receipt are folded, so a rejected or malformed prompt attributes no text.
    ``max_output_bytes`` bounds both texts (a prefix is kept).
    """

    def __init__(self, *, max_output_bytes: int | None = None) -> None:
        if max_output_bytes is not None and max_output_bytes < 0:
            raise ValueError("max_output_bytes must be non-negative")
        self._max_output_bytes = max_output_bytes
        self._message: _BoundedText | None = None
        self._deltas = _BoundedText(max_output_bytes)
        self.received = False
        """Whether the inbox receipt of the prompt has been seen."""
        self.turn_end: TurnEnd | None = None
        """The last root ``turn/end`` seen so far."""

    @property
    def output(self) -> str:
        if self._message is not None:
            return self._message.text
        return self._deltas.text

    @property
    def truncated(self) -> bool:
        """Whether the current output hit ``max_output_bytes``."""
        return (self._message if self._message is not None else self._deltas).truncated

    def _fold(self, envelope: _Envelope) -> None:
        if envelope.type == "assistant/message":
            data = _parse(_AssistantMessageData, envelope.data)
            if data is None:
                raise DshProtocolError("an assistant/message event of the turn carried malformed content")
            content = data.message.content
            if content:
                message = _BoundedText(self._max_output_bytes)
                for block in content:
                    if block.type == "text" and isinstance(block.text, str):
                        message.append(block.text)
                self._message = message
        elif envelope.type == "assistant/chunk":
            chunk = _parse(_AssistantChunkData, envelope.data)
            if chunk is not None and chunk.chunk.type == "text-delta":
                self._deltas.append(chunk.chunk.text)
        elif envelope.type == "turn/end":
            self.turn_end = _turn_end(envelope.data)


def _turn_end(data: object) -> TurnEnd:
    parsed = _parse(_TurnEndData, data)
    if parsed is None:
        return TurnEnd(raw_kind=None)
    cause = None
    if parsed.reason.kind == TurnEndKind.ABORTED:
        nested = _parse(_Cause, parsed.reason.reason)
        cause = nested.kind if nested is not None else None
    return TurnEnd(raw_kind=parsed.reason.kind, cause=cause)


def _event_type(event: object) -> str | None:
    if isinstance(event, dict):
        value = event.get("type")
        if isinstance(value, str):
            return value
    return None


def _is_receipt(note: Notification, session_id: str, message_id: str) -> bool:
    if not isinstance(note, SessionEvent) or note.session_id != session_id:
        return False
    envelope = _parse(_Envelope, note.event)
    if envelope is None or envelope.type != "agent/inbox/spliced":
        return False
    data = _parse(_InboxSplicedData, envelope.data)
    if data is None:
        return False
    return any(
        entry is not None and entry.id == message_id
        for entry in (_parse(_InsertedMessage, item) for item in data.inserted)
    )


def new_session_id() -> str:
    """A fresh child session id, minted by the client (``session-<uuid hex>``)."""
    return f"session-{uuid.uuid4().hex}"


# --------------------------------------------------------------------------- byte streams


class LineSource(Protocol):
    """Whole lines from the runtime's stdout, without the newline; ``None`` at EOF."""

    async def receive_line(self) -> bytes | None: ...


class LineSink(Protocol):
    """The runtime's stdin."""

    async def send(self, data: bytes) -> None: ...

    async def close_input(self) -> None: ...


class AsyncioLineReader:
    """:class:`LineSource` over an :class:`asyncio.StreamReader`.

    Reads in chunks and splits on ``\\n`` itself (``StreamReader.readline`` has its own
    64 KiB limit).  A line longer than ``max_frame_bytes`` raises
    :class:`DshProtocolError` without buffering more than that.  A final unterminated
    line is returned at EOF.
    """

    def __init__(
        self, reader: asyncio.StreamReader, *, max_frame_bytes: int, chunk_size: int = 65536
    ) -> None:
        if max_frame_bytes <= 0 or chunk_size <= 0:
            raise ValueError("max_frame_bytes and chunk_size must be positive")
        self._reader = reader
        self._max = max_frame_bytes
        self._chunk = chunk_size
        self._buffer = bytearray()
        self._scanned = 0
        self._eof = False

    async def receive_line(self) -> bytes | None:
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline >= 0:
                if newline > self._max:
                    raise DshProtocolError("a frame from the DSH SDK runtime exceeds max_frame_bytes")
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                self._scanned = 0
                return line
            if len(self._buffer) > self._max:
                raise DshProtocolError("a frame from the DSH SDK runtime exceeds max_frame_bytes")
            self._scanned = len(self._buffer)
            if self._eof:
                if not self._buffer:
                    return None
                line = bytes(self._buffer)
                self._buffer.clear()
                self._scanned = 0
                return line
            chunk = await self._reader.read(self._chunk)
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True


class AsyncioLineWriter:
    """:class:`LineSink` over an :class:`asyncio.StreamWriter`.

    Raw ``ConnectionError``s surface from :meth:`send` (the client maps them); a writer
    someone else already closed raises ``BrokenPipeError`` instead of silently dropping
    the frame.  :meth:`close_input` does not wait for the pipe to drain: a runtime that
    never reads its stdin must not stall the supervisor's EOF step.
    """

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def send(self, data: bytes) -> None:
        if self._writer.is_closing():
            raise BrokenPipeError("the runtime's stdin is already closed")
        self._writer.write(data)
        await self._writer.drain()

    async def close_input(self) -> None:
        self._writer.close()


# --------------------------------------------------------------------------- client internals


class _Pending:
    __slots__ = ("done", "error", "method", "result")

    def __init__(self, method: str) -> None:
        self.method = method
        self.done = anyio.Event()
        self.result: object = None
        self.error: DshError | None = None

    def settle(self, result: object = None, error: DshError | None = None) -> None:
        if self.done.is_set():
            return
        self.result = result
        self.error = error
        self.done.set()


class _Subscription:
    """Tree-scoped buffer: filled synchronously by the reader, drained by one turn."""

    def __init__(self, root: str, max_buffered_bytes: int) -> None:
        self.root = root
        self._items: deque[tuple[Notification, int]] = deque()
        self._size = 0
        self._max = max_buffered_bytes
        self._wake: anyio.Event | None = None
        self._failure: DshError | None = None

    def push(self, note: Notification, size: int) -> None:
        if self._failure is not None:
            return
        if self._size + size > self._max:
            self.fail(DshProtocolError("the DSH SDK runtime outran the notification buffer"))
            return
        self._items.append((note, size))
        self._size += size
        self._wakeup()

    def fail(self, error: DshError) -> None:
        if self._failure is None:
            self._failure = error
            self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()
            self._wake = None

    async def get(self) -> Notification:
        while not self._items:
            if self._failure is not None:
                raise self._failure.again()
            self._wake = anyio.Event()
            await self._wake.wait()
        note, size = self._items.popleft()
        self._size -= size
        return note


@dataclass(slots=True)
class _ShutdownState:
    done: anyio.Event
    error: DshError | None = None


def _encode(frame: Mapping[str, object]) -> bytes:
    return json.dumps(frame, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def _is_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _ignored(why: str, raw: object) -> None:
    _child_log.debug("DSH SDK wire: ignored a frame (%s): %.*r", why, _LOGGED_FRAME_CHARS, raw)


# --------------------------------------------------------------------------- client


class DshClient:
    """A DSH SDK JSON-RPC client over one runtime's stdio.

    Run the reader either with ``async with client:`` (the client owns a task group) or
    with ``await task_group.start(client.serve)`` in a task group of your own.  Requests
    are only answered while the reader runs.  The client never closes the runtime's
    stdin by itself: call :meth:`close_input` (the supervisor's ladder does).

    ``max_frame_bytes`` bounds one line from stdout (a longer one fails the client with
    :class:`DshProtocolError`); ``max_buffered_bytes`` bounds what one turn may buffer
    while its prompt's response is outstanding (default: four frames).
    """

    def __init__(
        self,
        source: LineSource,
        sink: LineSink,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_buffered_bytes: int | None = None,
        server_name: str = SERVER_NAME,
        max_inflight_requests: int = DEFAULT_MAX_INFLIGHT_REQUESTS,
    ) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        if max_buffered_bytes is not None and max_buffered_bytes <= 0:
            raise ValueError("max_buffered_bytes must be positive")
        self._source = source
        self._sink = sink
        self._max_frame_bytes = max_frame_bytes
        self._max_buffered_bytes = max_buffered_bytes or 4 * max_frame_bytes
        self._server_name = server_name
        self._pending: dict[str, _Pending] = {}
        self._subscriptions: set[_Subscription] = set()
        self._parents: dict[str, str] = {}
        self._failure: DshError | None = None
        self._input_closed = False
        self._send_lock = anyio.Lock()
        self._serving = False
        self._answers: TaskGroup | None = None
        self._own_group: TaskGroup | None = None
        self._shutdown: _ShutdownState | None = None
        # Runtime-to-client requests whose answer is not written yet: each costs a task,
        # so a runtime that floods requests without reading fails the client instead.
        self._max_inflight = max_inflight_requests
        self._unanswered = 0

    @classmethod
    def from_asyncio_streams(
        cls,
        stdout: asyncio.StreamReader,
        stdin: asyncio.StreamWriter,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_buffered_bytes: int | None = None,
        max_inflight_requests: int = DEFAULT_MAX_INFLIGHT_REQUESTS,
    ) -> DshClient:
        return cls(
            AsyncioLineReader(stdout, max_frame_bytes=max_frame_bytes),
            AsyncioLineWriter(stdin),
            max_frame_bytes=max_frame_bytes,
            max_buffered_bytes=max_buffered_bytes,
            max_inflight_requests=max_inflight_requests,
        )

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Self:
        group = anyio.create_task_group()
        await group.__aenter__()
        try:
            await group.start(self.serve)
        except BaseException as exc:
            group.cancel_scope.cancel()
            await group.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._own_group = group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        group, self._own_group = self._own_group, None
        assert group is not None, "DshClient.__aexit__ without __aenter__"
        group.cancel_scope.cancel()
        try:
            return await group.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group_error:
            # The reader never raises, so a group holding only the body's own exception
            # is anyio wrapping it: let the original propagate, typed and unchanged.
            if exc is not None and len(group_error.exceptions) == 1 and group_error.exceptions[0] is exc:
                return False
            raise

    @property
    def failure(self) -> DshError | None:
        """The first client-wide failure (transport closed, oversize frame, reader fault)."""
        return self._failure

    @property
    def pending_requests(self) -> int:
        return len(self._pending)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read stdout until EOF or a fatal frame; never raises for a wire failure."""
        if self._serving:
            raise RuntimeError("DshClient.serve is already running")
        self._serving = True
        try:
            async with anyio.create_task_group() as answers:
                self._answers = answers
                task_status.started()
                await self._read_loop()
                answers.cancel_scope.cancel()
        finally:
            self._answers = None
            self._fail(DshTransportClosed("stopped"))

    async def _read_loop(self) -> None:
        while True:
            try:
                line = await self._source.receive_line()
            except DshError as exc:
                self._fail(exc)
                return
            except OSError as exc:
                self._fail(_caused(DshTransportClosed("read-failed"), exc))
                return
            except Exception as exc:
                self._fail(_caused(DshError("the DSH SDK wire reader failed"), exc))
                return
            if line is None:
                self._fail(DshTransportClosed("eof"))
                return
            if len(line) > self._max_frame_bytes:
                self._fail(DshProtocolError("a frame from the DSH SDK runtime exceeds max_frame_bytes"))
                return
            self._dispatch(line)
            if self._failure is not None:
                return

    def _fail(self, error: DshError) -> None:
        if self._failure is not None:
            return
        self._failure = error
        if not isinstance(error, DshTransportClosed) or error.reason != "stopped":
            _child_log.debug("DSH SDK wire: client failed: %s", error, exc_info=error.__cause__)
        for pending in self._pending.values():
            pending.settle(error=error.again())
        for subscription in self._subscriptions:
            subscription.fail(error)

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise self._failure.again()
        if self._input_closed:
            raise DshTransportClosed("input-closed")

    # ----------------------------------------------------------------- reading

    def _dispatch(self, line: bytes) -> None:
        stripped = line.strip()
        if not stripped:
            return
        try:
            frame = json.loads(stripped.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            _ignored("not JSON", stripped)
            return
        if not isinstance(frame, dict):
            _ignored("not an object", stripped)
            return
        frame_id, method = frame.get("id"), frame.get("method")
        has_id, has_method = _is_id(frame_id), isinstance(method, str)
        if has_id and has_method:
            self._answer_unknown_request(frame_id)
        elif has_id:
            self._settle_response(frame_id if isinstance(frame_id, str) else None, frame)
        elif has_method:
            assert isinstance(method, str)
            note = self._notification(method, frame.get("params"))
            if note is None:
                _ignored("unknown or malformed notification", stripped)
            else:
                self._deliver(note, len(line))
        else:
            _ignored("neither request, response nor notification", stripped)

    def _answer_unknown_request(self, request_id: object) -> None:
        self._unanswered += 1
        if self._unanswered > self._max_inflight:
            self._fail(DshProtocolError("the DSH SDK runtime left too many requests unanswered"))
            return
        error = {"code": _METHOD_NOT_FOUND, "message": "method not found"}
        frame = {"jsonrpc": "2.0", "id": request_id, "error": error}
        if self._answers is not None and self._failure is None and not self._input_closed:
            self._answers.start_soon(self._send_quietly, _encode(frame))

    async def _send_quietly(self, data: bytes) -> None:
        try:
            with suppress(DshError):
                await self._send(data)
        finally:
            self._unanswered -= 1

    def _settle_response(self, request_id: str | None, frame: dict[str, Any]) -> None:
        pending = self._pending.get(request_id) if request_id is not None else None
        if pending is None:
            _ignored("response to no pending request", request_id)
            return
        if "error" in frame:
            body = _parse(_RpcErrorBody, frame["error"])
            if body is None:
                pending.settle(error=DshProtocolError("the DSH SDK runtime answered with a malformed error"))
            else:
                pending.settle(error=DshRpcError(pending.method, body.code, body.message, body.data))
        elif "result" in frame:
            pending.settle(result=frame["result"])
        else:
            error = DshProtocolError("the DSH SDK runtime answered with neither result nor error")
            pending.settle(error=error)

    def _notification(self, method: str, params: object) -> Notification | None:
        if method == "session.event":
            event = _parse(_SessionEventParams, params)
            return None if event is None else SessionEvent(event.sessionId, event.event)
        if method == "session.status":
            status = _parse(_SessionStatusParams, params)
            return None if status is None else SessionStatus(status.sessionId, status.status)
        if method in ("subagent.started", "subagent.finished"):
            lineage = _parse(_SubagentStartedParams, params)
            if lineage is None:
                return None
            if method == "subagent.started":
                if lineage.childSessionId != lineage.parentSessionId:
                    self._parents.setdefault(lineage.childSessionId, lineage.parentSessionId)
                return SubagentStarted(lineage.parentSessionId, lineage.childSessionId)
            assert isinstance(params, dict)
            return SubagentFinished(lineage.parentSessionId, lineage.childSessionId, dict(params))
        return None

    def _in_tree(self, session_id: str, root: str) -> bool:
        for _ in range(len(self._parents) + 1):
            if session_id == root:
                return True
            parent = self._parents.get(session_id)
            if parent is None:
                return False
            session_id = parent
        return False

    def _deliver(self, note: Notification, size: int) -> None:
        if isinstance(note, SubagentStarted | SubagentFinished):
            session_id = note.parent_session_id
        else:
            session_id = note.session_id
        for subscription in self._subscriptions:
            if self._in_tree(session_id, subscription.root):
                subscription.push(note, size)

    # ----------------------------------------------------------------- writing and requests

    async def _send(self, data: bytes) -> None:
        self._check_usable()
        async with self._send_lock:
            self._check_usable()
            try:
                await self._sink.send(data)
            except OSError as exc:
                if self._input_closed:
                    raise DshTransportClosed("input-closed") from exc
                if isinstance(exc, ConnectionError):
                    error: DshError = _caused(DshTransportClosed("broken-pipe"), exc)
                else:
                    error = _caused(DshError("writing to the DSH SDK runtime failed"), exc)
                self._fail(error)
                raise error.again() from exc

    async def request(self, method: str, params: Mapping[str, object] | None = None) -> object:
        """Send one request and return its raw ``result``.

        Raises :class:`DshRpcError` for an error answer, :class:`DshProtocolError` for an
        answer with neither result nor a well-formed error, :class:`DshTransportClosed`
        when the transport is or becomes closed.  Bound it with the caller's own cancel
        scope (``anyio.fail_after``); a cancelled request leaves nothing pending.
        """
        self._check_usable()
        request_id = f"req_{uuid.uuid4().hex}"
        frame: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            frame["params"] = dict(params)
        pending = _Pending(method)
        self._pending[request_id] = pending
        try:
            await self._send(_encode(frame))
            await pending.done.wait()
        finally:
            self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def initialize(
        self,
        *,
        cwd: str,
        provider: str,
        model: str,
        max_tokens: int | None = None,
    ) -> ServerInfo:
        """The handshake; checks the server identity (``serverInfo.name``).

        Bound it with the caller's cancel scope (a runtime may hang here).
        """
        if not os.path.isabs(cwd):
            raise ValueError("initialize cwd must be absolute")
        if max_tokens is not None and (
            isinstance(max_tokens, bool)
            or not isinstance(max_tokens, int)
            or not 0 < max_tokens <= MAX_SAFE_INTEGER
        ):
            raise ValueError("initialize max_tokens must be a positive safe integer")
        params: dict[str, object] = {"cwd": cwd, "provider": provider, "model": model}
        if max_tokens is not None:
            params["maxTokens"] = max_tokens
        result = _parse(_InitializeResult, await self.request("initialize", params))
        if result is None:
            raise DshProtocolError("initialize returned no server identity")
        if result.serverInfo.name != self._server_name:
            _child_log.debug(
                "DSH SDK wire: unexpected server identity %.*r", _LOGGED_FRAME_CHARS, result.serverInfo.name
            )
            raise DshProtocolError("initialize answered with an unexpected server identity")
        return ServerInfo(result.serverInfo.name, result.serverInfo.version)

    async def run_turn(
        self,
        prompt: str,
        *,
        session_id: str,
        progress: TurnProgress | None = None,
        on_notification: Callable[[Notification], None] | None = None,
    ) -> TurnOutcome:
        """Send ``prompt`` on ``session_id`` and fold the turn until the root is ``idle``.

        Pass your own ``progress`` to read partial output after a failure or a
        cancellation.  ``on_notification`` sees every notification of the session tree
        (the root and descendants learned from ``subagent.started``) from the inbox
        receipt on, in wire order.  Root events of the turn are validated: an event that
        is no envelope, or an ``assistant/message`` with malformed content, raises
        :class:`DshProtocolError`; every other malformed frame is ignored.
        """
        progress = progress if progress is not None else TurnProgress()
        subscription = _Subscription(session_id, self._max_buffered_bytes)
        self._subscriptions.add(subscription)
        try:
            result = await self.request(
                "session/prompt",
                {"sessionId": session_id, "contentBlocks": [{"type": "text", "text": prompt}]},
            )
            accepted = _parse(_PromptResult, result)
            if accepted is None:
                raise DshProtocolError("session/prompt returned no message id")
            while True:
                note = await subscription.get()
                if not progress.received:
                    if not _is_receipt(note, session_id, accepted.messageId):
                        continue
                    progress.received = True
                if isinstance(note, SessionEvent) and note.session_id == session_id:
                    envelope = _parse(_Envelope, note.event)
                    if envelope is None:
                        raise DshProtocolError("a session.event of the turn carried no event envelope")
                    progress._fold(envelope)
                if on_notification is not None:
                    on_notification(note)
                if (
                    isinstance(note, SessionStatus)
                    and note.session_id == session_id
                    and note.status == "idle"
                ):
                    return TurnOutcome(output=progress.output, turn_end=progress.turn_end)
        finally:
            self._subscriptions.discard(subscription)

    async def shutdown(self, timeout: float) -> None:  # noqa: ASYNC109 - the contract's own bound
        """The ``shutdown`` request, sent at most once per client.

        Every call waits for that one exchange, bounded by its own ``timeout`` (seconds),
        and returns if the runtime acknowledged it, else raises the same typed failure
        (:class:`DshTimeout`, :class:`DshRpcError`, :class:`DshTransportClosed`, ...).
        """
        if not timeout > 0:
            raise ValueError("shutdown timeout must be positive")
        state = self._shutdown
        if state is None:
            state = self._shutdown = _ShutdownState(done=anyio.Event())
            try:
                with anyio.fail_after(timeout):
                    await self.request("shutdown")
            except TimeoutError:
                state.error = DshTimeout("shutdown", timeout)
            except DshError as exc:
                state.error = exc
            except BaseException:
                state.error = DshError("the shutdown exchange was cancelled")
                raise
            finally:
                state.done.set()
        else:
            try:
                with anyio.fail_after(timeout):
                    await state.done.wait()
            except TimeoutError:
                raise DshTimeout("shutdown", timeout) from None
        if state.error is not None:
            raise state.error.again()

    async def close_input(self) -> None:
        """Close the runtime's stdin (EOF).  Idempotent; later requests raise
        :class:`DshTransportClosed` (``input-closed``)."""
        if self._input_closed:
            return
        self._input_closed = True
        with suppress(OSError):
            await self._sink.close_input()


_E = TypeVar("_E", bound=DshError)


def _caused(error: _E, cause: BaseException) -> _E:
    error.__cause__ = cause
    return error
