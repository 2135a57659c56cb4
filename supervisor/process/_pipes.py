"""The child's pipes as the supervisor reads them: the exit notification, the stdout
frame bound and early end, what ended in which order, and the stderr tail."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

import anyio

from supervisor.process._framing import READ_CHUNK, FrameTooLarge, LineReader

child_log = logging.getLogger("supervisor.child")  # child-controlled text: DEBUG only

_PIPE_FACTS = {0: "stdin-closed", 1: "stdout-eof", 2: "stderr-eof"}
LOST_FACTS = ("eof-sent", "stdin-closed", "stdin-broken", "stdout-eof", "stderr-eof", "exited")
"""What :attr:`ManagedProcess.lost_facts` may name: the supervisor closing the child's stdin
(``eof-sent``), a pipe of the child that ended (``stdin-broken``: a write found the child's
end closed), and the child's exit."""


class ChildProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's stream protocol plus what the supervisor needs from the pipe layer.

    * An exit notification: ``Process.wait()`` returns only once every pipe is closed
      as well, which never happens while a descendant holds stdout, or once a reader
      stopped reading.  The exit itself is what must be observed.
    * The frame bound: no stdout line may exceed ``max_frame_bytes``.  Checked as the
      bytes arrive, so whoever reads stdout (a protocol SDK included) never buffers an
      oversized frame; past the bound the stream just ends, and ``frame_too_large``
      says why.
    * An early end of stdout (:meth:`end_stdout`): once the child has exited, a
      descendant still holding the pipe must not keep the reader waiting.
    """

    def __init__(self, exited: anyio.Event, loop: asyncio.AbstractEventLoop, max_frame_bytes: int) -> None:
        super().__init__(limit=2**16, loop=loop)
        self._exited = exited
        self._max_frame = max_frame_bytes
        self._line = 0
        self._cut = False
        self.frame_too_large = False
        self.stdout_ended = False
        self.stdout_closed = anyio.Event()
        self.stdout_chunks = 0
        # What the pipe layer saw end, in order (closed names, see ``LOST_FACTS``).
        self.lost: list[str] = []
        # Called once, at the child's first output: the program itself runs (past any shim).
        self.on_first_output: Callable[[], None] | None = None

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if fd == 1 and self.on_first_output is not None:
            first, self.on_first_output = self.on_first_output, None
            first()
        if fd == 1 and isinstance(data, bytes):
            self.stdout_chunks += 1
            if self._cut:
                return
            cut = self._cut_at(data)
            if cut is not None:  # deliver the whole lines before the oversized one, then end
                if cut:
                    super().pipe_data_received(fd, data[:cut])
                self.frame_too_large = True
                self.end_stdout()
                return
        super().pipe_data_received(fd, data)

    def end_stdout(self) -> None:
        """End the stdout stream for its reader now; later bytes are dropped."""
        self._cut = self.stdout_ended = True
        if self.stdout is not None:
            self.stdout.feed_eof()
        self.stdout_closed.set()

    def _cut_at(self, data: bytes) -> int | None:
        """None if every line stays within the bound, else where the first oversized line starts."""
        start, line = 0, self._line
        while (newline := data.find(b"\n", start)) >= 0:
            if line + newline - start > self._max_frame:
                return start
            start, line = newline + 1, 0
        if line + len(data) - start > self._max_frame:
            return start
        self._line = line + len(data) - start
        return None

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in _PIPE_FACTS:
            self.lost.append(_PIPE_FACTS[fd] if exc is None or fd != 0 else "stdin-broken")
        if fd == 1:
            self.stdout_ended = True
            self.stdout_closed.set()
        super().pipe_connection_lost(fd, exc)  # a second feed_eof after a cut is harmless

    def process_exited(self) -> None:
        self.lost.append("exited")
        super().process_exited()
        self._exited.set()


class StderrTail:
    """The last ``limit`` bytes of a child's stderr (``log`` mode), drained to the end so the
    child never blocks on a full pipe: for the host log, never for a result."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0

    @property
    def data(self) -> bytes:
        return b"".join(self._chunks)

    async def drain(self, stream: asyncio.StreamReader, pid: int) -> None:
        reader = LineReader(stream, self._limit)
        while True:
            try:
                line = await reader.read_line()
            except FrameTooLarge:
                # A giant stderr line: keep draining in chunks so the child never blocks.
                chunk = await stream.read(READ_CHUNK)
                if not chunk:
                    return
                self._keep(chunk)
                continue
            if line is None:
                return
            self._keep(line + b"\n")
            if child_log.isEnabledFor(logging.DEBUG):
                child_log.debug("child %d stderr: %s", pid, line[:4096].decode("utf-8", "replace"))

    def _keep(self, data: bytes) -> None:
        data = data[-self._limit :]
        self._chunks.append(data)
        self._size += len(data)
        while self._size > self._limit and self._chunks:
            self._size -= len(self._chunks.popleft())
