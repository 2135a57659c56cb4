"""One supervised child process and its whole tree: spawn, watch, read, tear down."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil
from anyio.abc import TaskGroup

from machines import TeardownLadder
from supervisor.process._framing import DEFAULT_MAX_FRAME_BYTES, READ_CHUNK, FrameTooLarge, LineReader
from supervisor.process._tree import (
    ASYNCIO_CHILDREN,
    PsutilTree,
    TreeBackend,
    is_gone,
    open_pidfd,
    reap_if_our_zombie,
    reap_strays,
    set_subreaper,
)

log = logging.getLogger("supervisor")
child_log = logging.getLogger("supervisor.child")  # child-controlled text: DEBUG only

DEFAULT_STDERR_TAIL_BYTES = 64 * 1024
DEFAULT_KILL_WAIT_SECONDS = 5.0


class StderrMode(enum.StrEnum):
    INHERIT = "inherit"
    LOG = "log"
    DISCARD = "discard"


class SpawnFailed(Exception):
    """The program could not be started (missing, not executable, cwd vanished).

    Its text is the OS error: host log and ``__cause__`` only.
    """


@dataclass(frozen=True, slots=True)
class ExitFacts:
    """How the direct child ended: exactly one of the two is set."""

    exit_code: int | None
    signal: str | None

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitFacts:
        if returncode >= 0:
            return cls(exit_code=returncode, signal=None)
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"SIG{-returncode}"
        return cls(exit_code=None, signal=name)


@dataclass(frozen=True, slots=True)
class TeardownReport:
    quiescent: bool
    rung: str
    exit: ExitFacts | None
    survivors: tuple[int, ...] = ()


@dataclass(frozen=True)
class SpawnSpec:
    """What to run.  ``env`` is final (already scrubbed and layered, run tag included)."""

    argv: Sequence[str]
    cwd: Path
    env: dict[str, str]
    run_tag: str
    stderr: StderrMode = StderrMode.INHERIT
    stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    subreaper: bool = True
    tree: TreeBackend = field(default_factory=PsutilTree)

    def __post_init__(self) -> None:
        if not self.argv or not self.argv[0]:
            raise ValueError("argv must name a program")


class _ChildProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's stream protocol plus two things the supervisor needs from the pipe layer.

    * An exit notification: ``Process.wait()`` returns only once every pipe is closed
      as well, which never happens while a descendant holds stdout, or once a reader
      stopped reading.  The exit itself is what must be observed.
    * The frame bound: no stdout line may exceed ``max_frame_bytes``.  Checked as the
      bytes arrive, so whoever reads stdout (a protocol SDK included) never buffers an
      oversized frame; past the bound the stream just ends, and ``frame_too_large``
      says why.
    """

    def __init__(self, exited: anyio.Event, loop: asyncio.AbstractEventLoop, max_frame_bytes: int) -> None:
        super().__init__(limit=2**16, loop=loop)
        self._exited = exited
        self._max_frame = max_frame_bytes
        self._line = 0
        self.frame_too_large = False
        self.stdout_ended = False

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if fd == 1 and isinstance(data, bytes):
            if self.frame_too_large:
                return
            cut = self._cut_at(data)
            if cut is not None:  # deliver the whole lines before the oversized one, then end
                if cut:
                    super().pipe_data_received(fd, data[:cut])
                self.frame_too_large = self.stdout_ended = True
                if self.stdout is not None:
                    self.stdout.feed_eof()
                return
        super().pipe_data_received(fd, data)

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
        if fd == 1:
            self.stdout_ended = True
        super().pipe_connection_lost(fd, exc)  # a second feed_eof after a cut is harmless

    def process_exited(self) -> None:
        super().process_exited()
        self._exited.set()


class ManagedProcess:
    """A spawned child whose whole tree this object owns until :meth:`teardown` ends.

    Background work (exit watch, stderr drain) runs in the task group given to
    :meth:`spawn`, which the run owns.
    """

    def __init__(self, proc: asyncio.subprocess.Process, spec: SpawnSpec, protocol: _ChildProtocol) -> None:
        self._proc = proc
        self._protocol = protocol
        self._spec = spec
        self.pid = proc.pid
        self._exit: ExitFacts | None = None
        self._exited = anyio.Event()
        self._tracked: dict[int, psutil.Process] = {}
        self._stderr_tail: deque[bytes] = deque()
        self._stderr_tail_size = 0
        self._force_kill = False
        self._grace_scope: anyio.CancelScope | None = None

    # -- spawn -------------------------------------------------------------------------

    @classmethod
    async def spawn(cls, spec: SpawnSpec, task_group: TaskGroup) -> ManagedProcess:
        """Start ``spec.argv`` in a new session; raises :class:`SpawnFailed`."""
        if spec.subreaper:
            set_subreaper(True)
        stderr: int | None = {
            StderrMode.INHERIT: None,
            StderrMode.LOG: asyncio.subprocess.PIPE,
            StderrMode.DISCARD: asyncio.subprocess.DEVNULL,
        }[spec.stderr]
        loop = asyncio.get_running_loop()
        exited = anyio.Event()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _ChildProtocol(exited, loop, spec.max_frame_bytes),
                *spec.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                cwd=spec.cwd,
                env=spec.env,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            raise SpawnFailed(f"could not start {spec.argv[0]!r}: {exc!r}") from exc
        proc = asyncio.subprocess.Process(transport, protocol, loop)
        ASYNCIO_CHILDREN.add(proc.pid)
        managed = cls(proc, spec, protocol)
        task_group.start_soon(managed._watch_exit, exited)
        if proc.stderr is not None:
            task_group.start_soon(managed._drain_stderr, proc.stderr)
        return managed

    async def _watch_exit(self, exited: anyio.Event) -> None:
        await exited.wait()
        returncode = self._proc.returncode
        assert returncode is not None
        ASYNCIO_CHILDREN.discard(self.pid)
        self._exit = ExitFacts.from_returncode(returncode)
        self._exited.set()

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        reader = LineReader(stream, self._spec.stderr_tail_bytes)
        while True:
            try:
                line = await reader.read_line()
            except FrameTooLarge:
                # A giant stderr line: keep draining in chunks so the child never blocks.
                chunk = await stream.read(READ_CHUNK)
                if not chunk:
                    return
                self._keep_tail(chunk)
                continue
            if line is None:
                return
            self._keep_tail(line + b"\n")
            if child_log.isEnabledFor(logging.DEBUG):
                child_log.debug("child %d stderr: %s", self.pid, line[:4096].decode("utf-8", "replace"))

    def _keep_tail(self, data: bytes) -> None:
        limit = self._spec.stderr_tail_bytes
        data = data[-limit:]
        self._stderr_tail.append(data)
        self._stderr_tail_size += len(data)
        while self._stderr_tail_size > limit and self._stderr_tail:
            self._stderr_tail_size -= len(self._stderr_tail.popleft())

    # -- facts -------------------------------------------------------------------------

    @property
    def stdin(self) -> asyncio.StreamWriter:
        assert self._proc.stdin is not None
        return self._proc.stdin

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self._proc.stdout is not None
        return self._proc.stdout

    @property
    def stdout_ended(self) -> bool:
        """Whether the child's stdout has ended (closed, or cut at an oversized frame)."""
        return self._protocol.stdout_ended

    @property
    def frame_too_large(self) -> bool:
        """Whether stdout ended because one line exceeded ``max_frame_bytes``."""
        return self._protocol.frame_too_large

    @property
    def exit_facts(self) -> ExitFacts | None:
        """Set once the direct child has been reaped; never inferred."""
        return self._exit

    @property
    def stderr_tail(self) -> bytes:
        """The last bytes of stderr in ``log`` mode: for the host log, never for a result."""
        return b"".join(self._stderr_tail)

    async def wait_exit(self, within: float | None = None) -> ExitFacts | None:
        """The exit facts once the direct child exits, or None if ``within`` seconds pass first."""
        with anyio.move_on_after(within):
            await self._exited.wait()
        return self._exit

    def close_stdin(self) -> None:
        """Send EOF.  A child that already closed its end is not an error."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()

    # -- teardown ----------------------------------------------------------------------

    def force_kill(self) -> None:
        """Skip the remaining graces: the ladder goes straight to SIGKILL (still reaping)."""
        self._force_kill = True
        if self._grace_scope is not None:
            self._grace_scope.cancel()

    async def teardown(
        self,
        ladder: TeardownLadder,
        *,
        eof_grace: float,
        term_grace: float,
        kill_wait: float | None = None,
    ) -> TeardownReport:
        """Stdin EOF, then SIGTERM, then SIGKILL over the whole tree.  Call it shielded.

        Each rung waits, event-driven, for the direct child's exit and then for every
        tracked descendant's pidfd; a rung is skipped as soon as the tree is gone.
        """
        self._track()
        if not self._force_kill:
            ladder.send("stdin_closed")
            self.close_stdin()
            # EOF asks the child to finish; once it is dead, what is left are orphans
            # that will not read our stdin, so they get no EOF grace.
            if self._exit is not None:
                eof_grace = 0.0
            if await self._wait_tree_gone(eof_grace, interruptible=True):
                return self._finish(ladder, "tree_exited")
            if not self._force_kill:
                ladder.send("eof_grace_expired")
                self._signal_tree(signal.SIGTERM)
                if await self._wait_tree_gone(term_grace, interruptible=True):
                    return self._finish(ladder, "tree_exited")
        if self._force_kill and ladder.rung != "kill-wait":
            ladder.send("kill_forced")
        elif ladder.rung == "term-wait":
            ladder.send("term_grace_expired")
        self.close_stdin()
        self._signal_tree(signal.SIGKILL)
        if await self._wait_tree_gone(DEFAULT_KILL_WAIT_SECONDS if kill_wait is None else kill_wait):
            return self._finish(ladder, "tree_exited")
        return self._finish(ladder, "kill_wait_expired")

    def _finish(self, ladder: TeardownLadder, event: str) -> TeardownReport:
        rung = ladder.rung
        ladder.send(event)
        reap_strays()
        survivors = tuple(sorted(self._live_tracked()))
        if self._exit is None:
            survivors = (self.pid, *survivors)
        quiescent = event == "tree_exited"
        self._close_transport()
        return TeardownReport(quiescent=quiescent, rung=rung, exit=self._exit, survivors=survivors)

    def _close_transport(self) -> None:
        self.close_stdin()
        transport: Any = getattr(self._proc, "_transport", None)
        if transport is not None:
            transport.close()

    def _track(self) -> list[psutil.Process]:
        """Merge a fresh snapshot into the tracked set; return the live tracked processes."""
        reap_strays()
        for proc in self._spec.tree.snapshot(self.pid, self._spec.run_tag):
            self._tracked.setdefault(proc.pid, proc)
        live = [p for p in self._tracked.values() if not is_gone(p)]
        for proc in list(self._tracked.values()):
            if proc not in live:
                reap_if_our_zombie(proc.pid)
        return live

    def _live_tracked(self) -> list[int]:
        return [p.pid for p in self._tracked.values() if not is_gone(p)]

    def _signal_tree(self, sig: signal.Signals) -> None:
        live = self._track()
        if self._exit is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)
        self._spec.tree.send_signal(live, self.pid, sig)

    async def _wait_tree_gone(self, within: float, *, interruptible: bool = False) -> bool:
        """Wait up to ``within`` seconds for the child and every tracked descendant to be gone.

        An ``interruptible`` wait (a grace) ends early when :meth:`force_kill` is called.
        """
        if within <= 0:
            return self._exited.is_set() and not self._track()
        with anyio.move_on_after(within) as scope:
            self._grace_scope = scope if interruptible else None
            try:
                await self._exited.wait()
                while True:
                    live = self._track()
                    if not live:
                        return True
                    await _wait_all_gone(live)
            finally:
                self._grace_scope = None
        return False


async def _wait_all_gone(procs: Sequence[psutil.Process]) -> None:
    """Wait on the pidfds of ``procs`` until each has exited (reaping our own)."""

    async def wait_one(proc: psutil.Process) -> None:
        fd = open_pidfd(proc)
        if fd is None:
            reap_if_our_zombie(proc.pid)
            return
        try:
            await anyio.wait_readable(fd)
        finally:
            os.close(fd)
        reap_if_our_zombie(proc.pid)

    async with anyio.create_task_group() as tg:
        for proc in procs:
            tg.start_soon(wait_one, proc)
