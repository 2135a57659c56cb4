"""MCP over this process's stdin and stdout, for a server that must end cleanly however its
client stops it.

The SDK's own ``stdio_server`` reads stdin in a worker thread nothing can interrupt (so a
server asked to stop by a signal waits for the client's next line), and lets a write to a
stdout the client already closed raise out of the server (a ``BrokenPipeError`` traceback
and exit 1).  This transport:

* claims fds 0 and 1 as the SDK does: the wire moves to private descriptors (above 2,
  close-on-exec) and fd 0 / fd 1 then point at ``/dev/null`` and stderr, so no library's
  print and no child ever reaches the wire;
* reads and writes the wire with the event loop (non-blocking pipes), so the session can
  end at any moment (a signal) without waiting for the client;
* answers a request line longer than the frame bound with one JSON-RPC error (its id read
  from the line's first bytes when it comes before the large part, else null), drops the
  rest of that line unread into memory, and goes on with the next line: a client that sent
  too much learns it, and keeps its server;
* takes a client that went away for the end of the session, not an error: stdin at end of
  file, or stdout closed by the client (noticed at once through the pipe, or by a failed
  write), ends the read side, so the server's loop returns; whatever the server still
  writes is dropped.

A wire the event loop cannot watch (a regular file, or ``/dev/null``: epoll refuses both,
and asyncio would only log that refusal and wait for ever) is read in a worker thread and
written directly: a file never blocks for long.  Both descriptors are put back as they
were (blocking mode included: a terminal is shared with the shell) when the session ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import select
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import BinaryIO

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from supervisor.mcp._stdin import clean_frame
from supervisor.process import DEFAULT_MAX_FRAME_BYTES, FrameTooLarge, LineReader
from supervisor.wire import is_request_id

log = logging.getLogger("supervisor")

Inbound = SessionMessage | Exception
# How long the last frames may take to reach a client that stopped reading.
FINAL_FLUSH_SECONDS = 5.0


@dataclass
class _Session:
    """What both directions share: whether the client is gone, and how to stop reading."""

    gone: anyio.Event = field(default_factory=anyio.Event)
    reading: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def client_gone(self) -> None:
        self.gone.set()
        self.reading.cancel()


@dataclass
class _Claim:
    """A standard descriptor whose wire was moved to ``private``; ``fd`` now points elsewhere."""

    fd: int
    private: int
    blocking: bool

    def restore(self) -> None:
        with contextlib.suppress(OSError):
            os.set_blocking(self.private, self.blocking)
        with contextlib.suppress(OSError):
            os.dup2(self.private, self.fd)
        with contextlib.suppress(OSError):
            os.close(self.private)


def _pollable(fd: int) -> bool:
    """Whether the event loop can watch ``fd``: asyncio accepts a character device such as
    ``/dev/null`` as a pipe, but epoll refuses it (EPERM) in a callback nobody awaits."""
    with select.epoll() as probe:
        try:
            probe.register(fd, select.EPOLLIN)
        except PermissionError:
            return False
    return True


def _claim(fd: int, replacement: int) -> _Claim:
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    claim = _Claim(fd, private, os.get_blocking(private))
    os.dup2(replacement, fd)
    return claim


@contextlib.asynccontextmanager
async def stdio_transport(
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[Inbound], MemoryObjectSendStream[SessionMessage]]]:
    """The read and write streams for ``Server.run`` over this process's stdin and stdout."""
    devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        wire_in = _claim(0, devnull)
    finally:
        os.close(devnull)
    try:
        wire_out = _claim(1, 2)
    except OSError:
        wire_in.restore()
        raise
    session = _Session()
    inbound_send, inbound = anyio.create_memory_object_stream[Inbound](0)
    outbound, outbound_receive = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tg:
            refusals = outbound.clone()  # the reader's own answers (an oversized request)
            tg.start_soon(_read, wire_in.private, inbound_send, session, max_frame_bytes, refusals)
            tg.start_soon(_write, wire_out.private, outbound_receive, session)
            try:
                yield inbound, outbound
            except BaseException:
                tg.cancel_scope.cancel()
                raise
            # The server is done (its read side ended): the writer finishes what it was given.
            session.reading.cancel()
            await outbound.aclose()
    finally:
        wire_out.restore()
        wire_in.restore()


async def _read(
    fd: int,
    sink: MemoryObjectSendStream[Inbound],
    session: _Session,
    limit: int,
    refusals: MemoryObjectSendStream[SessionMessage],
) -> None:
    """Frames from the client until end of file, the client's departure, or cancellation."""
    async with sink, refusals:
        refuse = _Refuser(refusals, limit)
        with session.reading:
            loop = asyncio.get_running_loop()
            pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
            stream = asyncio.StreamReader(limit=limit, loop=loop)
            try:
                if not _pollable(fd):
                    raise ValueError("not pollable")
                transport, _ = await loop.connect_read_pipe(
                    lambda: asyncio.StreamReaderProtocol(stream, loop=loop), pipe
                )
            except ValueError:  # not a pipe, socket or terminal: a file, read in a thread
                with pipe:
                    await _read_file(pipe, sink, limit, refuse)
                return
            try:
                await _read_lines(LineReader(stream, limit), sink, refuse)
            finally:
                transport.close()


async def _read_lines(reader: LineReader, sink: MemoryObjectSendStream[Inbound], refuse: _Refuser) -> None:
    while True:
        try:
            line = await reader.read_line()
        except FrameTooLarge:
            await refuse(await reader.skip_line(HEAD_BYTES))
            continue
        if line is None:
            return
        await _deliver(line, sink)


async def _read_file(
    file: BinaryIO, sink: MemoryObjectSendStream[Inbound], limit: int, refuse: _Refuser
) -> None:
    while line := await anyio.to_thread.run_sync(file.readline, limit + 1):
        if len(line.rstrip(b"\n")) > limit:
            head = line[:HEAD_BYTES]
            while line and not line.endswith(b"\n"):  # the rest of it, a bounded piece at a time
                line = await anyio.to_thread.run_sync(file.readline, limit + 1)
            await refuse(head)
            continue
        await _deliver(line.rstrip(b"\n"), sink)


HEAD_BYTES = 4096
"""How much of an oversized line is kept to find its request id."""


class _Refuser:
    """Answers a request line over the frame bound: one JSON-RPC error, then on."""

    def __init__(self, answers: MemoryObjectSendStream[SessionMessage], limit: int) -> None:
        self._answers = answers
        self._limit = limit

    async def __call__(self, head: bytes) -> None:
        request_id = top_level_id(head)
        log.warning("MCP client sent a frame over %d bytes: refused", self._limit)
        error = types.ErrorData(
            code=types.INVALID_REQUEST, message=f"request too large: a frame is at most {self._limit} bytes"
        )
        answer = types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._answers.send(SessionMessage(answer))


def top_level_id(head: bytes) -> int | str | None:
    """The ``id`` member of the JSON object ``head`` begins, when it comes before anything
    ``head`` cuts short (clients write ``{"jsonrpc":"2.0","id":7,"method":...,"params":...}``);
    None otherwise.  Reads the members one value at a time (``raw_decode``), never the
    cut-off remainder."""
    text = head.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    at = _skip_blanks(text, 0)
    if not text.startswith("{", at):
        return None
    at += 1
    try:
        while True:
            at = _skip_blanks(text, at)
            if not text.startswith('"', at):
                return None
            key, at = decoder.raw_decode(text, at)
            at = _skip_blanks(text, at)
            if not text.startswith(":", at):
                return None
            value, at = decoder.raw_decode(text, _skip_blanks(text, at + 1))
            if key == "id":
                return value if is_request_id(value) else None
            at = _skip_blanks(text, at)
            if not text.startswith(",", at):
                return None
            at += 1
    except (ValueError, RecursionError):  # the value is cut short (or absurdly deep)
        return None


def _skip_blanks(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


async def _deliver(line: bytes, sink: MemoryObjectSendStream[Inbound]) -> None:
    if not line.strip():
        return
    try:
        # A lone surrogate escape becomes U+FFFD (the SDK would drop such a frame unanswered).
        text = clean_frame(line.decode("utf-8", "replace"))
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except Exception as exc:  # the SDK's convention: a bad frame is an item of its own
        await sink.send(exc)
        return
    await sink.send(SessionMessage(message))


class _WireOut(asyncio.Protocol):
    """Flow control for the client's stdout pipe, and the moment the client closes it."""

    def __init__(self, session: _Session) -> None:
        self._session = session
        self._paused = False
        self._resumed = anyio.Event()

    def pause_writing(self) -> None:
        self._paused = True
        self._resumed = anyio.Event()

    def resume_writing(self) -> None:
        self._paused = False
        self._resumed.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._session.client_gone()
        self._resumed.set()

    async def drained(self) -> None:
        if self._paused:
            await self._resumed.wait()


async def _write(fd: int, source: MemoryObjectReceiveStream[SessionMessage], session: _Session) -> None:
    """Frames to the client until the server closes its side; after the client left, dropped."""
    loop = asyncio.get_running_loop()
    pipe = os.fdopen(os.dup(fd), "wb", buffering=0)
    protocol = _WireOut(session)
    transport: asyncio.WriteTransport | None = None
    with contextlib.suppress(ValueError):  # a file: plain writes
        if _pollable(fd):
            transport, _ = await loop.connect_write_pipe(lambda: protocol, pipe)
    try:
        async with source:
            async for message in source:
                if session.gone.is_set():
                    continue  # nobody reads any more: drain the server's side, write nothing
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                payload = data.encode("utf-8", "replace")
                try:
                    if transport is None:
                        _write_file(pipe, payload)
                    else:
                        transport.write(payload)
                        await protocol.drained()
                except OSError:
                    session.client_gone()
        if transport is not None and not session.gone.is_set():  # the last frames reach the client
            with anyio.move_on_after(FINAL_FLUSH_SECONDS):
                transport.set_write_buffer_limits(0, 0)
                await protocol.drained()
    finally:
        if transport is not None:
            transport.close()
        else:
            pipe.close()


def _write_file(pipe: BinaryIO, payload: bytes) -> None:
    fileno = pipe.fileno()
    view = memoryview(payload)
    while view:
        view = view[os.write(fileno, view) :]
