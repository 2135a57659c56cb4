"""One supervised child process and its whole tree: spawn, watch, read, tear down."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from machines import TeardownLadder
from supervisor._public import home
from supervisor.process._childpin import ChildPin
from supervisor.process._containment import Enclosure
from supervisor.process._cshim import prepare_shim
from supervisor.process._cwd import spawn_cwd
from supervisor.process._env import HOST_TAG_VARIABLE
from supervisor.process._host import pdeathsig_argv, pdeathsig_preexec, this_host
from supervisor.process._keeper import register_run, unregister_run
from supervisor.process._limit_values import KernelHit, LimitUnavailable, Usage
from supervisor.process._pipes import ChildProtocol, StderrTail
from supervisor.process._spawn_command import check_program, private_tmpdir, release, shimmed, spawn_command
from supervisor.process._spawn_spec import (
    EnclosureFailed,
    ExitFacts,
    SpawnFailed,
    SpawnSpec,
    StderrMode,
    TeardownReport,
)
from supervisor.process._sweep import sweep_once
from supervisor.process._tree import ASYNCIO_CHILDREN, set_subreaper

log = logging.getLogger("supervisor")

DEFAULT_KILL_WAIT_SECONDS = 5.0
EXIT_REPORT_WAIT_SECONDS = 10.0  # the kernel says exited; asyncio's report is on its way (see _child_gone)


class ManagedProcess:
    """A spawned child whose whole tree this object owns until :meth:`teardown` ends.

    Background work (exit watch, stderr drain) runs in the task group given to
    :meth:`spawn`, which the run owns.
    """

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        spec: SpawnSpec,
        protocol: ChildProtocol,
        enclosure: Enclosure,
    ) -> None:
        self._proc = proc
        self._protocol = protocol
        self._spec = spec
        self._enclosure = enclosure
        self.pid = proc.pid
        self._exit: ExitFacts | None = None
        self._exited = anyio.Event()
        self._stderr_tail = StderrTail(spec.stderr_tail_bytes)
        self._force_kill = False
        self._grace_scope: anyio.CancelScope | None = None
        self._tmpdir: Path | None = None
        self._pin: ChildPin | None = None
        self.signalled: signal.Signals | None = None
        """The last signal the teardown sent while the child had not exited yet, or None: an
        exit by that signal is the supervisor's doing, not the child's."""

    # -- spawn -------------------------------------------------------------------------

    @classmethod
    async def spawn(cls, spec: SpawnSpec, task_group: TaskGroup) -> ManagedProcess:
        """Start ``spec.argv`` in a new session, inside its containment; raises :class:`SpawnFailed`."""
        check_program(spec)
        # Before the leaf is made: a cancellation at this hop to a worker thread leaves nothing
        # behind (after it, the leaf would stay, unknown to the keeper, past this process).
        await sweep_once()  # what dead hosts left: once per host process
        if shimmed(spec):  # the compiled shim checked (or built) off the loop
            await prepare_shim()
        try:
            if spec.containment.mode == "cgroup":
                # Off the loop: a leaf's mkdir takes the kernel's cgroup_mutex, which a migration
                # in flight (any process's) holds through an RCU grace period: p95 12 ms measured.
                enclosure = await anyio.to_thread.run_sync(
                    spec.containment.enclose, spec.run_tag, spec.limits
                )
            else:  # the process-tree enclosure is bookkeeping only: no hop to a worker thread
                enclosure = spec.containment.enclose(spec.run_tag, spec.limits)
        except (OSError, LimitUnavailable) as exc:
            raise EnclosureFailed(f"could not enclose the run: {exc!r}") from exc
        # process-tree, and cgroup where a process could leave its leaf (the look for it then
        # walks our own descendants): orphans of runs come back to us
        adopts = enclosure.mode == "process-tree" or getattr(enclosure, "wants_subreaper", False)
        if spec.subreaper and adopts:
            set_subreaper(True)
        tmpdir = private_tmpdir(spec, enclosure)
        env = {**spec.env, HOST_TAG_VARIABLE: str(this_host())}
        if tmpdir is not None:
            env["TMPDIR"] = str(tmpdir)
        try:
            argv = spawn_command(spec, enclosure, tmpdir)
        except BaseException:
            release(enclosure, tmpdir)
            raise
        stderr: int | None = {
            StderrMode.INHERIT: None,
            StderrMode.LOG: asyncio.subprocess.PIPE,
            StderrMode.DISCARD: asyncio.subprocess.DEVNULL,
        }[spec.stderr]
        loop = asyncio.get_running_loop()
        exited = anyio.Event()
        try:
            # Shielded: once forked, the child must end up in a ManagedProcess (whose teardown
            # waits for it).  Cut off while asyncio connects its pipes, asyncio kills it and
            # gives up waiting: nobody would wait for its exit, which the child watcher's
            # thread could then report to a closed event loop.  A cancellation still
            # arrives: at the caller's next checkpoint, with this process in its hands.
            with anyio.CancelScope(shield=True):
                transport, protocol = await loop.subprocess_exec(
                    lambda: ChildProtocol(exited, loop, spec.max_frame_bytes),
                    *argv,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                    cwd=spawn_cwd(spec.cwd),  # the directory held, when the workspace was pinned
                    env=env,
                    start_new_session=True,
                    preexec_fn=None if pdeathsig_argv() or shimmed(spec) else pdeathsig_preexec(),
                )
        except (OSError, ValueError) as exc:
            release(enclosure, tmpdir)
            raise SpawnFailed(f"could not start {spec.argv[0]!r}: {exc!r}") from exc
        # pinned before anything else: every signal to the child or its group goes through it
        pin = ChildPin(transport.get_pid())
        try:
            return cls._manage(transport, protocol, pin, spec, enclosure, tmpdir, task_group, exited)
        except BaseException:  # never an unmanaged child: kill it and wait for its exit
            pin.close()
            transport.close()
            with anyio.CancelScope(shield=True):
                await exited.wait()
            ASYNCIO_CHILDREN.discard(pin.pid)
            release(enclosure, tmpdir)
            raise

    @classmethod
    def _manage(
        cls,
        transport: asyncio.SubprocessTransport,
        protocol: ChildProtocol,
        pin: ChildPin,
        spec: SpawnSpec,
        enclosure: Enclosure,
        tmpdir: Path | None,
        task_group: TaskGroup,
        exited: anyio.Event,
    ) -> ManagedProcess:
        """The spawned child in the hands of a new ManagedProcess (no checkpoint in here)."""
        loop = asyncio.get_running_loop()
        proc = asyncio.subprocess.Process(transport, protocol, loop)
        ASYNCIO_CHILDREN.add(proc.pid)
        pinned = getattr(enclosure, "pinned", None)  # optional: signals by number go through the pin
        if pinned is not None:
            pinned(pin)  # first: ``started`` then reads the child's start time from the pin
        enclosure.started(proc.pid)
        # the keeper ends the run (its leaves, or its group and tagged processes) if this process dies
        register_run(spec.run_tag, proc.pid, leaves=getattr(enclosure, "leaves", ()), leader_start=pin.start)
        # optional: an enclosure that wants to look at the program once it runs (its namespace)
        protocol.on_first_output = getattr(enclosure, "program_running", None)
        managed = cls(proc, spec, protocol, enclosure)
        managed._tmpdir = tmpdir
        managed._pin = pin
        task_group.start_soon(managed._watch_exit, exited)
        if getattr(enclosure, "watches", True):  # optional: an enclosure with nothing to watch says so
            task_group.start_soon(enclosure.watch)
        if proc.stderr is not None:
            task_group.start_soon(managed._stderr_tail.drain, proc.stderr, proc.pid)
        return managed

    async def _watch_exit(self, exited: anyio.Event) -> None:
        await exited.wait()
        returncode = self._proc.returncode
        assert returncode is not None
        ASYNCIO_CHILDREN.discard(self.pid)
        self._exit = ExitFacts.from_returncode(returncode)
        self._exited.set()
        # A descendant may hold stdout open long after the child is gone: the reader
        # must still learn, within the EOF grace, that the child's stream is over.
        with anyio.move_on_after(self._spec.eof_grace):
            await self._protocol.stdout_closed.wait()
        if not self._protocol.stdout_ended:
            log.debug("child %d exited; its stdout is still held open: ending it", self.pid)
            self._protocol.end_stdout()

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
    def lost_facts(self) -> tuple[str, ...]:
        """What ended so far, in the order this process saw it (names from :data:`LOST_FACTS`):
        which came first says whether the child chose to go (``exited``) or its pipes did."""
        return tuple(self._protocol.lost)

    @property
    def frame_too_large(self) -> bool:
        """Whether stdout ended because one line exceeded ``max_frame_bytes``."""
        return self._protocol.frame_too_large

    @property
    def exit_facts(self) -> ExitFacts | None:
        """Set once the direct child has been reaped; never inferred."""
        return self._exit

    @property
    def stdout_chunks(self) -> int:
        """How many times bytes arrived on stdout so far (the silence guard's "frames")."""
        return self._protocol.stdout_chunks

    async def cpu_seconds(self) -> float | None:
        """CPU time the whole tree has used so far (None where it cannot be read)."""
        return await self._enclosure.cpu_seconds()

    def limit_hit(self) -> KernelHit | None:
        """The limit the kernel enforced on the run so far (read from its counters)."""
        return self._enclosure.limit_hit()

    @property
    def usage(self) -> Usage | None:
        """What the tree used, once torn down (None in process-tree containment)."""
        return self._enclosure.usage

    @property
    def stderr_tail(self) -> bytes:
        """The last bytes of stderr in ``log`` mode: for the host log, never for a result."""
        return self._stderr_tail.data

    async def wait_exit(self, within: float | None = None) -> ExitFacts | None:
        """The exit facts once the direct child exits, or None if ``within`` seconds pass first."""
        with anyio.move_on_after(within):
            await self._exited.wait()
        return self._exit

    def close_stdin(self) -> None:
        """Send EOF.  A child that already closed its end is not an error."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            self._protocol.lost.append("eof-sent")
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()

    # -- teardown ----------------------------------------------------------------------

    @property
    def containment(self) -> str:
        """The containment mode this child runs in (``cgroup`` or ``process-tree``)."""
        return self._enclosure.mode

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

        Each rung waits, event-driven, for the direct child's exit and then for the
        enclosure to be empty.  A rung whose grace expired is only escalated after one
        more look: a loaded event loop may notice the timer before the exit.
        """
        try:
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
                    await self._signal_tree(signal.SIGTERM)
                    if await self._wait_tree_gone(term_grace, interruptible=True, resignal=signal.SIGTERM):
                        return self._finish(ladder, "tree_exited")
            if self._force_kill and ladder.rung != "kill-wait":
                ladder.send("kill_forced")
            elif ladder.rung == "term-wait":
                ladder.send("term_grace_expired")
            self.close_stdin()
            await self._signal_tree(signal.SIGKILL)
            within = DEFAULT_KILL_WAIT_SECONDS if kill_wait is None else kill_wait
            if await self._wait_tree_gone(within, resignal=signal.SIGKILL):
                return self._finish(ladder, "tree_exited")
            return self._finish(ladder, "kill_wait_expired")
        finally:
            tmpdir, self._tmpdir = self._tmpdir, None
            let_go = getattr(self._enclosure, "let_go", None)  # optional: a release off the loop
            if let_go is not None:
                await let_go()
            else:
                self._enclosure.release()
            if self._pin is not None:
                self._pin.close()
            if tmpdir is not None:  # off the loop: the agent may have left a large tree there
                await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, tmpdir, ignore_errors=True))

    def _finish(self, ladder: TeardownLadder, event: str) -> TeardownReport:
        rung = ladder.rung
        ladder.send(event)
        quiescent = event == "tree_exited"
        survivors = () if quiescent else self._enclosure.survivors()
        if self._exit is None:
            survivors = (self.pid, *(p for p in survivors if p != self.pid))
        if quiescent:  # else the keeper still ends what is left when this process exits
            unregister_run(self._spec.run_tag, self.pid)
        self._close_transport()
        return TeardownReport(
            quiescent=quiescent,
            rung=rung,
            exit=self._exit,
            survivors=survivors,
            containment=self._enclosure.mode,
        )

    def _close_transport(self) -> None:
        self.close_stdin()
        transport: Any = getattr(self._proc, "_transport", None)
        if transport is not None:
            transport.close()

    async def _signal_tree(self, sig: signal.Signals) -> None:
        # Through the pidfd, never by number: asyncio's child watcher may have reaped the
        # child already (its report not yet delivered) and the number be a stranger's.
        if self._exit is None:
            self.signalled = sig
            if self._pin is not None:
                self._pin.signal(sig)
        await self._enclosure.signal(sig)

    async def _child_gone(self) -> bool:
        """Whether the direct child has exited, asking the kernel if asyncio has not said yet.

        ``waitid(WNOWAIT)`` only peeks: the status stays for asyncio to reap.  Once the kernel
        says the child exited, asyncio's report always follows (its watcher thread reaps it, or
        reports an unknown status if something else did): the bound only keeps a broken watcher
        from hanging the ladder, and is long enough that an overloaded machine's late thread is
        not mistaken for a child that did not go.
        """
        if self._exited.is_set():
            return True
        try:
            result = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)  # noqa: ASYNC222
        except ChildProcessError:  # already reaped: asyncio's report is on its way
            result = None
        else:
            if result is None:
                return False
        with anyio.move_on_after(EXIT_REPORT_WAIT_SECONDS):
            await self._exited.wait()
        return self._exited.is_set()

    async def _look(self) -> bool:
        """One more look before escalating: the child exited and nothing of the run is alive."""
        return await self._child_gone() and await self._enclosure.empty()

    async def _wait_tree_gone(
        self, within: float, *, interruptible: bool = False, resignal: signal.Signals | None = None
    ) -> bool:
        """Wait up to ``within`` seconds for the child and the whole enclosure to be gone.

        An ``interruptible`` wait (a grace) ends early when :meth:`force_kill` is called.
        Gone is decided by an observation taken after the last signal, never by a timer.
        """
        if within > 0:
            with anyio.move_on_after(within) as scope:
                self._grace_scope = scope if interruptible else None
                try:
                    # The kernel's word that the child exited (its pidfd) starts the look at the
                    # rest of the tree; asyncio's report (the exit status, from its reaping) comes
                    # from a thread, late on a loaded loop: it is awaited after the look, not before.
                    if self._pin is None or not await self._pin.exited():
                        await self._exited.wait()
                    await self._enclosure.wait_empty(resignal)
                    await self._exited.wait()
                    return True
                finally:
                    self._grace_scope = None
        if self._force_kill and interruptible:
            return False
        return await self._look()


home("supervisor.provider", ManagedProcess)
