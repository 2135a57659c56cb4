"""The SDK's transport seam, over a process the supervisor owns.

claude-agent-sdk talks to the CLI through a ``Transport`` (``connect``, ``write``,
``read_messages``, ``end_input``, ``close``, ``is_ready``).  Its default,
``SubprocessCLITransport``, spawns the CLI itself and ends it with its own
multi-second close wait.  This one starts the CLI only through
:meth:`ManagedProcess.spawn` (new session, scrubbed env, run tag, tracked tree), and its
``close()`` never waits on the process: the supervisor's ladder owns the end of the tree.

A pump task in the run's task group reads stdout as bounded NDJSON frames for as long
as the CLI writes, whether or not the SDK still listens, so the CLI never blocks on a
full pipe.  Two kinds of control request are answered here, before the SDK sees them,
because the SDK has no unattended answer for them: MCP elicitations are declined and
blocking user dialogs are cancelled.  A warm child's prompt hook (``_warm_prompt``) is
answered here too, at once, as the CLI asks it at each user message.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from claude_agent_sdk import CLIConnectionError, Transport

from supervisor.provider import FrameTooLarge, LineReader, ManagedProcess, SpawnSpec, raw_failure
from supervisor.wire import DEFAULT_MAX_INFLIGHT_REQUESTS, InboundRequests, parse_frame

log = logging.getLogger("supervisor")

# Frames buffered between the pump and the SDK's reader (the SDK buffers 100 more).
_BUFFERED_FRAMES = 64
_DRAIN_CHUNK = 64 * 1024

Decided = Callable[[str, str], None]
"""``(request, decision)``: an unattended decision taken here, for the permission line."""

PromptHook = Callable[[object], Mapping[str, object]]
"""A ``UserPromptSubmit`` hook's answer to its input (the only such hook the CLI has)."""


class StreamFailure(Exception):
    """The CLI's stdout broke framing (a frame over the bound, or a frame that is not JSON).

    Its text is fixed; the raw error is ``__cause__`` (host log only).
    """


class SupervisedTransport(Transport):
    """A claude-agent-sdk ``Transport`` whose CLI process belongs to the supervisor."""

    def __init__(
        self,
        *,
        spec: SpawnSpec,
        task_group: TaskGroup,
        max_frame_bytes: int,
        on_spawned: Callable[[ManagedProcess], None],
        on_decided: Decided,
        max_inflight_requests: int = DEFAULT_MAX_INFLIGHT_REQUESTS,
        prompt_hook: PromptHook | None = None,
    ) -> None:
        self._spec = spec
        self._prompt_hook = prompt_hook
        # Control requests handed to the SDK and not answered yet: the SDK handles each in
        # a task of its own, so a CLI flooding them without reading fails the stream.
        self._inbound = InboundRequests(max_inflight_requests)
        self._task_group = task_group
        self._max_frame_bytes = max_frame_bytes
        self._on_spawned = on_spawned
        self._on_decided = on_decided
        self._process: ManagedProcess | None = None
        self._ready = False
        self._closed = False
        self._write_lock = anyio.Lock()
        self._receive: MemoryObjectReceiveStream[dict[str, Any]] | None = None
        self.spawned = anyio.Event()
        self.output_ended = anyio.Event()  # no frame will reach the SDK any more
        self.stream_failure: StreamFailure | None = None
        self.refused_before_a_turn = False
        """An error ``result`` with no turn taken arrived (``is_error``, ``num_turns`` 0): the
        CLI gave up before any model turn, as it does for a ``--resume`` of a session it does
        not have (closed fields only; its ``errors`` text goes nowhere)."""

    @property
    def process(self) -> ManagedProcess | None:
        return self._process

    # -- the Transport interface ------------------------------------------------------------

    async def connect(self) -> None:
        """Spawn the CLI under the supervisor.  Raises ``SpawnFailed`` if it cannot start."""
        if self._process is not None:
            return
        if self._closed:
            raise CLIConnectionError("the transport is closed")
        process = await ManagedProcess.spawn(self._spec, self._task_group)
        self._process = process
        self._on_spawned(process)
        send, self._receive = anyio.create_memory_object_stream[dict[str, Any]](_BUFFERED_FRAMES)
        self._task_group.start_soon(self._pump, process, send)
        self._ready = True
        self.spawned.set()

    async def write(self, data: str) -> None:
        if '"control_response"' in data:
            # The SDK answers the CLI's control requests (a permission decision, ...) from a
            # task of its own that nobody awaits: a CLI whose stdin is already gone must not
            # make that an exception nobody retrieves.  The run learns of the broken pipe
            # from the CLI's exit and its stdout, as for any other write.
            try:
                await self._write(data)
            except CLIConnectionError:
                log.debug("a control response was not written: the Claude Code CLI's stdin is gone")
                return
        else:
            await self._write(data)
        if self._inbound.open > 0 and '"control_response"' in data:
            try:
                answered = json.loads(data).get("type") == "control_response"
            except (ValueError, AttributeError):
                answered = False
            if answered:
                self._inbound.answered()

    async def _write(self, data: str) -> None:
        async with self._write_lock:
            process = self._process
            if not self._ready or process is None:
                raise CLIConnectionError("the Claude Code transport is not connected")
            stdin = process.stdin
            if stdin.is_closing():
                raise CLIConnectionError("the Claude Code CLI's stdin is closed")
            try:
                stdin.write(data.encode("utf-8"))
                await stdin.drain()
            except (OSError, RuntimeError) as exc:
                self._ready = False
                raise CLIConnectionError("could not write to the Claude Code CLI") from exc

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self._messages()

    async def end_input(self) -> None:
        async with self._write_lock:
            if self._process is not None:
                self._process.close_stdin()

    async def close(self) -> None:
        """Stop delivering to the SDK.  Never waits on the process: teardown is the ladder's."""
        self._ready = False
        self._closed = True
        if self._receive is not None:
            self._receive.close()

    def is_ready(self) -> bool:
        return self._ready

    # -- internals --------------------------------------------------------------------------

    async def _messages(self) -> AsyncIterator[dict[str, Any]]:
        receive = self._receive
        if receive is None:
            raise CLIConnectionError("the Claude Code transport is not connected")
        try:
            async for message in receive:
                yield message
        except anyio.ClosedResourceError:
            return
        if self.stream_failure is not None:
            # Raised (fixed text) so the SDK fails a pending control request at once.
            raise self.stream_failure

    async def _pump(self, process: ManagedProcess, send: MemoryObjectSendStream[dict[str, Any]]) -> None:
        try:
            await self._deliver(process, send)
        finally:
            self.output_ended.set()
        # Keep the pipe drained so the CLI never blocks writing; the run fails regardless.
        if self.stream_failure is not None:
            while await process.stdout.read(_DRAIN_CHUNK):
                pass

    async def _deliver(self, process: ManagedProcess, send: MemoryObjectSendStream[dict[str, Any]]) -> None:
        reader = LineReader(process.stdout, self._max_frame_bytes)
        with send:
            while True:
                try:
                    line = await reader.read_line()
                    if line is None:
                        if process.frame_too_large:  # the supervisor cut an oversized frame
                            raise FrameTooLarge
                        return
                    message = _decode(line)
                except (FrameTooLarge, ValueError) as exc:
                    if isinstance(exc, ValueError) and reader.exhausted and not process.frame_too_large:
                        # The output ended inside a frame (the CLI died mid-write): that is the
                        # end of the stream, and the exit, if observed, is what explains it.
                        log.info("Claude Code CLI %d: stdout ended inside a frame", process.pid)
                        return
                    failure = StreamFailure("the Claude Code CLI's output broke stream-json framing")
                    failure.__cause__ = exc
                    log.warning("Claude Code CLI %d: unreadable stdout frame", process.pid)
                    raw_failure("Claude Code CLI %d: the unreadable frame", process.pid, exc=exc)
                    self.stream_failure = failure
                    return
                if message is None or await self._answered_here(message):
                    continue
                if message.get("type") == "result" and _gave_up_before_a_turn(message):
                    self.refused_before_a_turn = True
                if message.get("type") == "control_request" and not self._inbound.admit():
                    log.warning("Claude Code CLI %d: too many unanswered control requests", process.pid)
                    self.stream_failure = StreamFailure(
                        "the Claude Code CLI left too many control requests unanswered"
                    )
                    return
                if not self._closed:
                    # The SDK may have stopped listening: keep draining regardless.
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        await send.send(message)

    async def _answered_here(self, message: dict[str, Any]) -> bool:
        """Answer the control requests the SDK cannot answer unattended."""
        if message.get("type") != "control_request":
            return False
        request = message.get("request")
        subtype = request.get("subtype") if isinstance(request, dict) else None
        if subtype == "elicitation":
            self._on_decided("MCP elicitation", "declined")
            await self._reply(message.get("request_id"), {"action": "decline"})
            return True
        if subtype == "request_user_dialog":
            self._on_decided("user dialog", "cancelled")
            await self._reply(message.get("request_id"), {"behavior": "cancelled"})
            return True
        if subtype == "hook_callback" and self._prompt_hook is not None:
            assert isinstance(request, dict)
            hook_input = request.get("input")
            if isinstance(hook_input, dict) and hook_input.get("hook_event_name") == "UserPromptSubmit":
                await self._reply(message.get("request_id"), dict(self._prompt_hook(hook_input)))
                return True
        return False

    async def _reply(self, request_id: object, response: dict[str, Any]) -> None:
        if not isinstance(request_id, str):
            return
        frame = {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_id, "response": response},
        }
        try:
            await self._write(json.dumps(frame) + "\n")
        except CLIConnectionError as exc:
            log.debug("could not answer a Claude Code control request", exc_info=exc)


def _gave_up_before_a_turn(result: dict[str, Any]) -> bool:
    return result.get("is_error") is True and result.get("num_turns") == 0


def _decode(line: bytes) -> dict[str, Any] | None:
    """One stdout frame: None for a blank or non-JSON line (some builds print debug lines).

    Invalid UTF-8 inside a frame becomes U+FFFD; a frame nested too deep raises
    (``FrameTooDeep`` is a ``ValueError``, like any frame that breaks the framing)."""
    text = line.strip()
    if not text or not text.startswith(b"{"):
        return None
    data = parse_frame(text)
    if not isinstance(data, dict):
        raise ValueError("a stream-json frame must be an object")
    return data
