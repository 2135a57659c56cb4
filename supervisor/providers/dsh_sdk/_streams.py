"""The DSH SDK client's byte streams: what it reads lines from and writes frames to.

The client does not own the process: it reads lines from a :class:`LineSource`, writes
bytes to a :class:`LineSink`, and leaves spawning, stdin EOF, signals and reaping to the
supervisor.  :class:`AsyncioLineReader` and :class:`AsyncioLineWriter` adapt asyncio
streams (the managed child's pipes).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from supervisor.provider import FrameTooLarge, LineReader
from supervisor.providers.dsh_sdk._errors import DshProtocolError

__all__ = ["AsyncioLineReader", "AsyncioLineWriter", "LineSink", "LineSource"]


class LineSource(Protocol):
    """Whole lines from the runtime's stdout, without the newline; ``None`` at EOF."""

    async def receive_line(self) -> bytes | None: ...


class LineSink(Protocol):
    """The runtime's stdin."""

    async def send(self, data: bytes) -> None: ...

    async def close_input(self) -> None: ...


class AsyncioLineReader:
    """:class:`LineSource` over an :class:`asyncio.StreamReader`, through the process
    layer's one bounded line reader: a line longer than ``max_frame_bytes`` raises
    :class:`DshProtocolError`.  A final unterminated line is returned at EOF."""

    def __init__(self, reader: asyncio.StreamReader, *, max_frame_bytes: int) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._lines = LineReader(reader, max_frame_bytes)

    async def receive_line(self) -> bytes | None:
        try:
            return await self._lines.read_line()
        except FrameTooLarge as exc:
            raise DshProtocolError("a frame from the DSH SDK runtime exceeds max_frame_bytes") from exc


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
