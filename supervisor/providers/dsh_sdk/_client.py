"""The DSH SDK client: a typed async JSON-RPC client over NDJSON on a runtime's stdio.

The protocol, as the DSH runtimes speak it: one JSON-RPC 2.0 frame per line; a frame
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

Errors are :mod:`._errors`, the turn fold :mod:`._fold`, the byte streams :mod:`._streams`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import anyio
from anyio.abc import TaskGroup, TaskStatus

from supervisor.provider import DEFAULT_MAX_FRAME_BYTES
from supervisor.providers.dsh_sdk._errors import (
    DshError,
    DshProtocolError,
    DshRpcError,
    DshTimeout,
    DshTransportClosed,
)
from supervisor.providers.dsh_sdk._fold import (
    Notification,
    ServerInfo,
    SessionEvent,
    SessionStatus,
    SubagentFinished,
    SubagentStarted,
    TurnOutcome,
    TurnProgress,
    _Envelope,
    _InitializeResult,
    _is_receipt,
    _parse,
    _PromptResult,
    _RpcErrorBody,
    _SessionEventParams,
    _SessionStatusParams,
    _SubagentStartedParams,
)
from supervisor.providers.dsh_sdk._streams import AsyncioLineReader, AsyncioLineWriter, LineSink, LineSource
from supervisor.providers.dsh_sdk._subscription import Subscription
from supervisor.wire import (
    DEFAULT_MAX_INFLIGHT_REQUESTS,
    CloseOnce,
    FrameTooDeep,
    FrameWriter,
    InboundRequests,
    Pending,
    PendingRequests,
    encode_frame,
    is_request_id,
    parse_frame,
)

# Where text the child sent goes: DEBUG only (the package's filter cleans it there).
child_log = logging.getLogger("supervisor.child")

__all__ = ["SERVER_NAME", "DshClient"]


SERVER_NAME: Final = "deepseek-harness-sdk-runtime"
"""The ``serverInfo.name`` a DSH SDK runtime reports from ``initialize``."""

MAX_SAFE_INTEGER: Final = 2**53 - 1
_METHOD_NOT_FOUND: Final = -32601
_LOGGED_FRAME_CHARS: Final = 200


@dataclass(slots=True)
class _ShutdownState:
    done: anyio.Event
    error: DshError | None = None


def _encode(frame: Mapping[str, object]) -> bytes:
    return encode_frame(frame, ascii_only=True)


def _ignored(why: str, raw: object) -> None:
    child_log.debug("DSH SDK wire: ignored a frame (%s): %.*r", why, _LOGGED_FRAME_CHARS, raw)


# --------------------------------------------------------------------------- client


class DshClient:
    """A DSH SDK JSON-RPC client over one runtime's stdio.

    Run the reader either with ``async with client:`` (the client owns a task group) or
    with ``await task_group.start(client.serve)`` in a task group of your own.  Requests
    are only answered while the reader runs.  The client never closes the runtime's
    stdin by itself: call :meth:`close_input` (the supervisor's ladder does).

    ``max_frame_bytes`` bounds one line from stdout (a longer one fails the client with
    :class:`DshProtocolError`); ``max_buffered_bytes`` bounds what one turn may buffer
    while its prompt's response is outstanding (default: four frames);
    ``max_inflight_requests`` bounds the runtime's requests awaiting this client's answer
    (more at once fail the client with :class:`DshProtocolError`).
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
        self._pending: PendingRequests[Pending] = PendingRequests()
        self._subscriptions: set[Subscription] = set()
        self._parents: dict[str, str] = {}
        self._close: CloseOnce[DshError] = CloseOnce()
        self._close.on_close(self._failed_now)
        self._input_closed = False
        self._frames = FrameWriter(sink.send)
        self._serving = False
        self._answers: TaskGroup | None = None
        self._own_group: TaskGroup | None = None
        self._shutdown: _ShutdownState | None = None
        self._inbound = InboundRequests(max_inflight_requests)

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
        return self._close.reason

    async def wait_closed(self) -> None:
        """Return once the client has failed or closed (no more turns can run)."""
        await self._close.wait()

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
            if self._close.closed:
                return

    def _fail(self, error: DshError) -> None:
        """The first client-wide failure closes the client (later ones are ignored)."""
        self._close.close(error)

    def _failed_now(self, error: DshError) -> None:
        if not isinstance(error, DshTransportClosed) or error.reason != "stopped":
            child_log.debug("DSH SDK wire: client failed: %s", error, exc_info=error.__cause__)
        self._pending.fail_all(error.again)
        for subscription in self._subscriptions:
            subscription.fail(error)

    def _check_usable(self) -> None:
        failure = self._close.reason
        if failure is not None:
            raise failure.again()
        if self._input_closed:
            raise DshTransportClosed("input-closed")

    # ----------------------------------------------------------------- reading

    def _dispatch(self, line: bytes) -> None:
        stripped = line.strip()
        if not stripped:
            return
        try:
            frame = parse_frame(stripped)  # invalid UTF-8 in a frame becomes U+FFFD
        except FrameTooDeep:
            self._fail(DshProtocolError("a frame from the DSH SDK runtime is nested too deep"))
            return
        except ValueError:
            _ignored("not JSON", stripped)
            return
        if not isinstance(frame, dict):
            _ignored("not an object", stripped)
            return
        frame_id, method = frame.get("id"), frame.get("method")
        has_id, has_method = is_request_id(frame_id), isinstance(method, str)
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
        if self._answers is None or self._close.closed or self._input_closed:
            return
        if not self._inbound.admit():  # each answer costs a task: the runtime is not reading
            self._inbound.answered()
            self._fail(DshProtocolError("the DSH SDK runtime left too many requests unanswered"))
            return
        error = {"code": _METHOD_NOT_FOUND, "message": "method not found"}
        frame = {"jsonrpc": "2.0", "id": request_id, "error": error}
        self._answers.start_soon(self._send_quietly, _encode(frame))

    async def _send_quietly(self, data: bytes) -> None:
        try:
            with suppress(DshError):
                await self._send(data)
        finally:
            self._inbound.answered()

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
        try:
            await self._frames.send(data, check=self._check_usable)
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
        pending = self._pending.add(request_id, Pending(method))
        try:
            await self._send(_encode(frame))
            return await pending.wait()
        finally:
            self._pending.discard(request_id)

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
            child_log.debug(
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
        subscription = Subscription(session_id, self._max_buffered_bytes)
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
