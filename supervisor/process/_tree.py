"""Whole-tree bookkeeping over the OS process table (psutil), and the one test seam.

Who reaps what
--------------
* The direct child of a run is reaped by asyncio's process handle only; psutil never
  waits on it (a second reaper steals its status: asyncio then reports 255).
* With ``PR_SET_CHILD_SUBREAPER`` on the supervising process, a descendant that
  daemonises (double fork, ``setsid``) is re-parented to *us* instead of PID 1.  It is
  attributed to its run by the run tag in ``/proc/<pid>/environ`` and reaped here, by
  pid (never ``waitpid(-1)``, which would steal asyncio's statuses).
* Zombies re-parented to us that no run can claim are reaped by pid too, except pids
  asyncio is waiting for.

:class:`TreeBackend` is the single injected seam: a test can substitute it to model
the one thing no real process can do, a tree that survives SIGKILL.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import select
import signal
from collections.abc import Iterable
from typing import Protocol

import psutil

from supervisor.process._env import RUN_TAG_VARIABLE

log = logging.getLogger("supervisor")

_PR_SET_CHILD_SUBREAPER = 36

# Pids whose status belongs to asyncio (direct children of runs).  Never reaped here.
ASYNCIO_CHILDREN: set[int] = set()


class _Subreaper:
    enabled = False


def set_subreaper(on: bool) -> bool:
    """Make this process the subreaper of its descendants, or stop being it (Linux).

    Process-wide: it changes nothing for processes that never daemonise.  Spawning
    turns it on unless the provider's ``subreaper`` option is false; an embedder that
    must not adopt orphans calls ``set_subreaper(False)``.  Returns whether it is on.
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
    return on


def run_tag_of(proc: psutil.Process) -> str | None:
    """The run tag in a live process's environment, or None (gone, zombie, unreadable)."""
    try:
        return proc.environ().get(RUN_TAG_VARIABLE)
    except (psutil.Error, OSError):
        return None


def is_gone(proc: psutil.Process) -> bool:
    """Whether every thread of the process has exited (it may still await reaping).

    A zombie *status* is not enough: a thread-group leader that exited before its
    other threads shows as a zombie while those threads still run.  The pidfd says
    it right: it becomes readable only once the whole thread group is gone.
    """
    try:
        if not proc.is_running():
            return True
        if proc.status() != psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:
        return True
    try:
        return bool(select.select([fd], [], [], 0)[0])
    finally:
        os.close(fd)


def reap_if_our_zombie(pid: int) -> bool:
    """Reap ``pid`` if it is our child and has exited; never touches asyncio's pids."""
    if pid in ASYNCIO_CHILDREN:
        return False
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


class TreeBackend(Protocol):
    """Finds a run's processes and signals them.  The real one is :class:`PsutilTree`."""

    def snapshot(self, root_pid: int, run_tag: str) -> list[psutil.Process]:
        """Every live descendant of the run, except the root itself."""
        ...

    def send_signal(self, procs: Iterable[psutil.Process], pgid: int, sig: signal.Signals) -> None:
        """Send ``sig`` to the process group and to every listed process."""
        ...


class PsutilTree:
    """The real backend: the root's descendants plus our tagged adoptees."""

    def snapshot(self, root_pid: int, run_tag: str) -> list[psutil.Process]:
        found: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.Error):
            for proc in psutil.Process(root_pid).children(recursive=True):
                found[proc.pid] = proc
        if _Subreaper.enabled:
            for proc in _our_children():
                if proc.pid in ASYNCIO_CHILDREN or proc.pid in found:
                    continue
                if run_tag_of(proc) == run_tag:
                    found[proc.pid] = proc
                    with contextlib.suppress(psutil.Error):
                        for sub in proc.children(recursive=True):
                            found[sub.pid] = sub
                elif _exiting(proc):
                    # Its tag can no longer be read, but its children may be this run's
                    # and are re-parented to us only once it is fully gone: wait for it.
                    found[proc.pid] = proc
        return list(found.values())

    def send_signal(self, procs: Iterable[psutil.Process], pgid: int, sig: signal.Signals) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as exc:  # a foreign group took the id: do not touch it
            log.debug("killpg(%d) refused: %r", pgid, exc)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)


def _exiting(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _our_children() -> list[psutil.Process]:
    try:
        return psutil.Process().children()
    except psutil.Error:
        return []


def reap_strays() -> None:
    """Reap zombie children of ours that asyncio does not own (adoptees that died)."""
    if not _Subreaper.enabled:
        return
    for proc in _our_children():
        if proc.pid in ASYNCIO_CHILDREN:
            continue
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                reap_if_our_zombie(proc.pid)


def open_pidfd(proc: psutil.Process) -> int | None:
    """A pidfd for ``proc`` if it is still the same process, else None."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError as exc:
        if exc.errno in (errno.ESRCH, errno.EINVAL):
            return None
        raise
    # The pid may have been reused between the snapshot and pidfd_open.
    try:
        same = proc.is_running()
    except psutil.Error:
        same = False
    if not same:
        os.close(fd)
        return None
    return fd
