"""The fallback containment where no cgroup can be had: a run is what the process table says.

Attribution
-----------
A process belongs to a run when, at some read of the shared process table
(:mod:`supervisor.process._proctable`), it

* descends from the run's direct child (the parent links of that read);
* carries the run tag in its environment (even after leaving the group with ``setsid``);
* is in the child's session or process group (even with a cleared environment);
* or was attributed at an earlier read (same pid *and* start time): once the run's,
  always the run's, whatever it did to its environment afterwards.

What this cannot see is written down in the README (section "Containment").  Where the
fallback cannot know, it does not claim quiescence: a live process re-parented to the
supervisor (with the child subreaper on) that no run claims, started after the run,
in a session of its own, "may be the run's", so the run is not reported quiescent
while it lives.  It is never signalled, though: only attributed processes are.

Unless this process owns its orphans (:func:`own_orphans`: it starts no children of its
own besides runs, as the CLI, ``subagents mcp`` and ``subagents batch`` declare).  Then
such an adopted process belongs to the runs alive at its birth, and the last of them to
reach its teardown claims it (signals it, waits for it, reaps it): a non-dumpable
daemon, whose environment a non-root supervisor cannot read, ends with its run.

Who reaps what
--------------
* The direct child of a run is reaped by asyncio's process handle only (a second
  reaper steals its status: asyncio then reports 255).
* With ``PR_SET_CHILD_SUBREAPER`` a daemonising descendant is re-parented to *us*;
  once it is a zombie it is reaped here, by pid, and only if a run claims it.  No
  ``waitpid(-1)`` ever: an embedder's own children and their statuses stay untouched.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import signal
import weakref
from collections.abc import Callable, Sequence
from signal import Signals

import anyio
import anyio.lowlevel

from supervisor._public import home
from supervisor.process import _proctable
from supervisor.process._childpin import ChildPin
from supervisor.process._keeper import keeper_pid
from supervisor.process._keeper_main import read_bytes
from supervisor.process._limit_support import LIMIT_KEYS
from supervisor.process._limit_values import NO_LIMITS, KernelHit, Limits, LimitUnavailable, Usage
from supervisor.process._pinned import signal_if
from supervisor.process._proctable import TABLE, Table, own_children

log = logging.getLogger("supervisor")

_PR_SET_CHILD_SUBREAPER = 36
PIDFD_BATCH = 64
# Only when no pidfd can be opened at all (EMFILE): look again this often.
_DEGRADED_POLL_SECONDS = 0.05

# Pids whose status belongs to asyncio (direct children of runs).  Never reaped here.
ASYNCIO_CHILDREN: set[int] = set()


class _Subreaper:
    enabled = False
    turned_off = 0  # how many times it was turned off: an epoch of "on all along"


def set_subreaper(on: bool) -> bool:
    """Make this process the subreaper of its descendants, or stop being it (Linux).

    Process-wide: it changes nothing for processes that never daemonise.  Spawning in
    the ``process-tree`` mode turns it on unless the provider's ``subreaper`` option is
    false; an embedder that must not adopt orphans calls ``set_subreaper(False)``.
    Returns whether it is on.
    """
    if _Subreaper.enabled == on:
        return on
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    except (OSError, AttributeError) as exc:
        log.warning("child subreaper could not be set to %s: %r", on, exc)
        return _Subreaper.enabled
    _Subreaper.enabled = on
    _Subreaper.turned_off += not on
    return on


def subreaper_enabled() -> bool:
    return _Subreaper.enabled


def subreaper_epoch() -> int | None:
    """None while the subreaper is off; else a number that stays the same for as long as it
    stays on (so "on then, and on all along since" is the same number now)."""
    return _Subreaper.turned_off if _Subreaper.enabled else None


class _Orphans:
    owned = False


def own_orphans(on: bool = True) -> None:
    """Declare that this process starts no children of its own besides runs.

    Process-wide, for the ``process-tree`` fallback with the child subreaper on: every
    orphan re-parented to this process while runs are alive is then a run's (of the
    runs alive at its birth, ended with the last of them), even when nothing else ties
    it to a run (a non-dumpable daemon whose environment cannot be read).  Without the
    declaration such an orphan only keeps its possible runs from reporting quiescence.
    The CLI's ``run``, ``mcp`` and ``batch`` declare it; an embedder that starts
    children of its own (outside runs) must not.  Processes in this process's own
    session are never claimed either way.
    """
    _Orphans.owned = on


def owns_orphans() -> bool:
    return _Orphans.owned


TABLE.descendants_only = subreaper_enabled


class ProcessTreeContainment:
    """Runs attributed over the process table (session, run tag, ancestry, subreaper)."""

    mode = "process-tree"

    def enclose(self, run_tag: str, limits: Limits = NO_LIMITS) -> TreeEnclosure:
        if limits.controllers:
            key = LIMIT_KEYS[limits.controllers[0]]
            raise LimitUnavailable(f"{key} cannot be enforced in process-tree containment")
        return TreeEnclosure(run_tag)


_live_enclosures: weakref.WeakSet[TreeEnclosure] = weakref.WeakSet()


class TreeEnclosure:
    """One run's processes as the process table shows them."""

    mode = "process-tree"

    def __init__(self, run_tag: str) -> None:
        self.run_tag = run_tag
        self._root: int | None = None
        self._root_start: int | None = None
        self._pin: ChildPin | None = None
        self._since: int | None = None  # when the run started, in clock ticks since boot
        self._known: dict[int, int] = {}  # pid -> start time: attributed at some read
        self._signalled: dict[int, Signals] = {}
        self._last: list[int] = []
        self._ending = False  # its teardown has begun: it no longer holds orphans back
        _live_enclosures.add(self)

    def command(self, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def pinned(self, pin: ChildPin) -> None:
        """The spawner's pidfd pin of the child (the spawner closes it)."""
        self._pin = pin

    def started(self, pid: int) -> None:
        self._root = pid
        if self._pin is None or self._pin.pid != pid:
            self._pin = ChildPin(pid, open_fd=False)  # by start time, until :meth:`pinned`
        self._root_start = self._pin.start if self._pin.start is not None else _start_time(pid)
        self._since = self._root_start if self._root_start is not None else _now_ticks() - 1

    # -- observation -----------------------------------------------------------------

    async def look(self) -> tuple[list[int], list[int]]:
        """One fresh observation: (live processes of the run, live ones that may be)."""
        self._ending = True  # only a teardown looks
        if self._nothing_below_us():
            self._last = []
            return [], []
        table = await TABLE.fresh()
        live = self._claim(table)
        uncertain = self._uncertain(table)
        self._last = [*live, *uncertain]
        return live, uncertain

    def _nothing_below_us(self) -> bool:
        """Whether this process has no child but its keeper and this run's exited child, with
        the child subreaper on.

        Then no process of any run is alive: each run's direct child is our child until it
        is reaped, and every orphan of a run is re-parented to us (the subreaper; the kernel
        does it before the exiting parent's pidfd turns readable), so a live process of a run
        is a child of ours or below one.  (The keeper starts nothing while this process
        lives.)  That is one listing and a file per thread, read here, instead of the shared
        walk of our descendants in a worker thread, whose hop costs more: the usual last look
        of a run when no other run is in flight (the teardown looks once the child exited).
        """
        if not (_Subreaper.enabled and _proctable.CHILDREN_FILES):
            return False
        keeper = keeper_pid()
        for pid in own_children():
            if pid == keeper:
                continue
            if pid == self._root and self._pin is not None and self._pin.has_exited():
                continue  # a zombie until asyncio reaps it: nothing is below it any more
            return False
        return True

    def _claim(self, table: Table) -> list[int]:
        """Attribute what this read shows, reap our claimed zombies; the live ones."""
        root = self._root
        entries = table.entries
        seeds = [pid for pid, start in self._known.items() if table.same(pid, start)]
        seeds += table.by_tag.get(self.run_tag, ())
        if root is not None and self._group_is_ours(table):
            seeds += table.by_group.get(root, ())
            if self._root_start is not None and table.same(root, self._root_start):
                seeds.append(root)
        if _Orphans.owned:
            seeds += self._orphans(table)
        found: set[int] = set()
        while seeds:
            pid = seeds.pop()
            if pid in found or pid not in entries:
                continue
            found.add(pid)
            seeds += table.children.get(pid, ())
        live: list[int] = []
        me = os.getpid()
        for pid in found:
            entry = entries[pid]
            self._known[pid] = entry.start
            if pid == root:
                continue  # the direct child belongs to its asyncio handle
            if not entry.zombie:
                live.append(pid)
            elif entry.ppid == me and pid not in ASYNCIO_CHILDREN:
                _reap(pid)
            elif not thread_group_gone(pid):
                live.append(pid)  # a leader that exited before its other threads
        return live

    def _adoptees(self, table: Table) -> list[int]:
        """Our children that no run started directly: orphans re-parented to us, born during
        this run, outside our own session (never the keeper)."""
        if not _Subreaper.enabled or self._since is None:
            return []
        me = os.getpid()
        own_session = os.getsid(0)
        keeper = keeper_pid()  # our own helper in a session of its own, never a run's
        found = []
        for pid in table.children.get(me, ()):
            entry = table.entries[pid]
            if pid in ASYNCIO_CHILDREN or pid == keeper or entry.sid == own_session:
                continue
            if entry.start >= self._since:
                found.append(pid)
        return found

    def _orphans(self, table: Table) -> list[int]:
        """The adopted orphans this run owns: no other run claims them by its own facts (tag,
        session, group, an earlier read), and every other run alive at their birth is in its
        teardown already (or gone), so this one is the last of them."""
        others = [e for e in _live_enclosures if e is not self]
        starts = [e._since for e in others if not e._ending and e._since is not None]
        return [
            pid
            for pid in self._adoptees(table)
            if all(table.entries[pid].start < since for since in starts)
            and not any(other._owns(table, pid) for other in others)
        ]

    def _uncertain(self, table: Table) -> list[int]:
        """Live adoptees no run claims that may be this run's (see the module docstring)."""
        others = [e for e in _live_enclosures if e is not self]
        return [
            pid
            for pid in self._adoptees(table)
            if not table.entries[pid].zombie
            and pid not in self._known
            and not any(other._owns(table, pid) for other in others)
        ]

    def _owns(self, table: Table, pid: int) -> bool:
        entry = table.entries[pid]
        if self._known.get(pid) == entry.start or entry.tag == self.run_tag:
            return True
        return self._root is not None and self._root in (entry.sid, entry.pgrp) and self._group_is_ours(table)

    def _group_is_ours(self, table: Table) -> bool:
        """Whether the child's group (and session) id still names the run's, at this read and now.

        At the read: no process has the number, or the child itself (pid *and* start time);
        a process with the number that is not the child means the number was handed out
        again, and its group and session are a stranger's (see :mod:`._childpin`).
        """
        root = self._root
        if root is None:
            return False
        entry = table.entries.get(root)
        if entry is not None and entry.start != self._root_start:
            return False
        return self._pin is None or self._pin.group_is_ours()

    async def empty(self) -> bool:
        live, uncertain = await self.look()
        return not live and not uncertain

    # -- limits and accounting: the kernel keeps no books for a process tree -------------

    def limit_hit(self) -> KernelHit | None:
        return None

    @property
    def usage(self) -> Usage | None:
        return None

    watches = False
    """:meth:`watch` has nothing to do: the run's task group starts no task for it."""

    async def watch(self) -> None:
        return None

    async def cpu_seconds(self) -> float | None:
        """CPU time of the direct child (its reaped children included) and of every live
        process a fresh read attributes to the run."""
        if self._root is None:
            return None
        live, _ = await self.look()
        total = 0
        for pid in [self._root, *live]:
            total += _cpu_ticks(pid, children=pid == self._root)
        return total / _CLOCK_TICKS

    # -- signals -----------------------------------------------------------------------

    async def signal(self, sig: Signals) -> None:
        """The child's group, then every live attributed process of a fresh read."""
        self._killpg(sig)
        live, _ = await self.look()
        self._killpg(sig)  # anything forked into the group since
        await in_slices(live, lambda pid: self._send(pid, sig))
        if sig == signal.SIGTERM:  # a stopped process handles SIGTERM only once continued
            self._killpg(signal.SIGCONT)
            await in_slices(live, lambda pid: self._send(pid, signal.SIGCONT))

    def _killpg(self, sig: Signals) -> None:
        if self._pin is not None:  # only while the group id is still the child's
            self._pin.signal_group(sig)

    def _send(self, pid: int, sig: Signals) -> None:
        """Signal ``pid`` if it is still the process attributed (pid *and* start time)."""
        start = self._known.get(pid)
        if signal_if(pid, sig, lambda: start is not None and _start_time(pid) == start):
            self._signalled[pid] = sig

    # -- waiting -------------------------------------------------------------------------

    async def wait_empty(self, resignal: Signals | None = None) -> None:
        """Return once a read finds nothing of the run alive.

        Between reads, wait on pidfds (at most :data:`PIDFD_BATCH` open at once) of
        what the last read found.  With ``resignal``, whatever a read finds that has
        not had that signal yet gets it (and the child's group again): a chain that
        forks and exits cannot outrun the rung.
        """
        while True:
            live, uncertain = await self.look()
            if not live and not uncertain:
                return
            if resignal is not None:
                self._killpg(resignal)
                fresh = [pid for pid in live if self._signalled.get(pid) != resignal]
                await in_slices(fresh, lambda pid: self._send(pid, resignal))
            await wait_gone([*live, *uncertain][:PIDFD_BATCH])

    def survivors(self) -> tuple[int, ...]:
        return tuple(sorted(self._last))

    def release(self) -> None:
        _live_enclosures.discard(self)


SLICE = 64


async def in_slices(pids: Sequence[int], act: Callable[[int], object]) -> None:
    """``act`` on each pid, letting the event loop run between slices (a signal costs a
    few syscalls; a thousand of them in one go would hold the loop for tens of ms)."""
    for start in range(0, len(pids), SLICE):
        if start:
            await anyio.lowlevel.checkpoint()
        for pid in pids[start : start + SLICE]:
            act(pid)


def _start_time(pid: int) -> int | None:
    try:
        raw = read_bytes(f"/proc/{pid}/stat")
        return int(raw[raw.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int, *, children: bool) -> int:
    """utime + stime (+ the reaped children's, with ``children``) of ``pid``, in clock ticks."""
    try:
        raw = read_bytes(f"/proc/{pid}/stat")
        fields = raw[raw.rindex(b")") + 2 :].split()
        used = int(fields[11]) + int(fields[12])
        return used + int(fields[13]) + int(fields[14]) if children else used
    except (OSError, ValueError, IndexError):
        return 0


def _now_ticks() -> int:
    with open("/proc/uptime", encoding="ascii") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _reap(pid: int) -> bool:
    """Reap ``pid`` if it is our exited child; never touches asyncio's pids."""
    if pid in ASYNCIO_CHILDREN:
        return False
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


async def _wait_readable(fd: int) -> None:
    await anyio.wait_readable(fd)


def thread_group_gone(pid: int) -> bool:
    """Whether every thread of a zombie-looking process has exited.

    A thread-group leader that exited before its other threads shows as a zombie while
    they still run; its pidfd becomes readable only once the whole group is gone.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return True
    try:
        return bool(select.select([fd], [], [], 0)[0])
    finally:
        os.close(fd)


async def wait_gone(pids: list[int]) -> None:
    """Wait until each of ``pids`` has exited (pidfds); degrade to a short pause on EMFILE."""
    fds: list[int] = []
    starved = False
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except OSError as exc:
                if exc.errno == errno.EMFILE:
                    starved = True
                    break
        if not fds:
            if starved:
                await anyio.sleep(_DEGRADED_POLL_SECONDS)
            return
        async with anyio.create_task_group() as tg:
            for fd in fds:
                tg.start_soon(_wait_readable, fd)
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


home("supervisor", own_orphans)
