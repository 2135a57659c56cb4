"""The one line reader: bounded NDJSON framing over a byte stream."""

from __future__ import annotations

import asyncio

from supervisor._public import home

DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
READ_CHUNK = 64 * 1024


class FrameTooLarge(Exception):
    """One protocol frame (line) exceeded ``max_frame_bytes``."""


class LineReader:
    """Bounded NDJSON framing over a byte stream: no frame may exceed ``max_frame_bytes``.

    Lines are returned without their newline.  Bytes are never decoded here, so a
    multibyte character split across reads is whole by the time a line is returned.
    """

    def __init__(self, stream: asyncio.StreamReader, max_frame_bytes: int) -> None:
        self._stream = stream
        self._max = max_frame_bytes
        self._buffer = bytearray()
        self._eof = False

    @property
    def exhausted(self) -> bool:
        """Whether the stream ended and every byte was returned: right after a final
        unterminated line, this tells it apart from a whole one."""
        return self._eof and not self._buffer

    async def read_line(self) -> bytes | None:
        """The next line, or None at EOF (a final unterminated line is returned first)."""
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                if newline > self._max:
                    raise FrameTooLarge
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                return line
            if len(self._buffer) > self._max:
                raise FrameTooLarge
            if self._eof:
                if self._buffer:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                return None
            chunk = await self._stream.read(READ_CHUNK)
            if not chunk:
                self._eof = True
            else:
                self._buffer += chunk

    async def skip_line(self, keep: int = 4096) -> bytes:
        """After :class:`FrameTooLarge`: drop the rest of that line (through its newline, or
        to EOF) and return its first ``keep`` bytes, so a reader that can answer an
        oversized frame (a server) goes on with the next one.  Memory stays bounded: what
        is read past the frame bound is dropped chunk by chunk."""
        head = bytes(self._buffer[:keep])
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                del self._buffer[: newline + 1]
                return head
            self._buffer.clear()
            if self._eof:
                return head
            chunk = await self._stream.read(READ_CHUNK)
            if not chunk:
                self._eof = True
            else:
                self._buffer += chunk


home("supervisor.provider", LineReader, FrameTooLarge)
