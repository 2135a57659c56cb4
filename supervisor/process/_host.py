"""Who the supervising host is, whether it still lives, and the child's death signal.

The host identity is ``<pid>:<start time>`` of the supervising process, the start
time being field 22 of ``/proc/<pid>/stat`` (clock ticks since boot): a pid alone may
be reused, the pair names one process for the machine's uptime.  Every child gets it
in ``SUBAGENT_SUPERVISOR_HOST`` next to its run tag, so whatever a dead host left is
recognisable by anyone (the keeper, the sweep at start, ``subagents reap``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import select
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass

from supervisor.process._keeper_main import start_time

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class HostIdentity:
    pid: int
    start: int

    def __str__(self) -> str:
        return f"{self.pid}:{self.start}"

    @classmethod
    def parse(cls, text: str) -> HostIdentity | None:
        """The identity written by :meth:`__str__`, or None for anything else."""
        pid, sep, start = text.partition(":")
        if not sep or not (pid + start).isascii() or not pid.isdigit() or not start.isdigit():
            return None
        return cls(int(pid), int(start))


class _This:
    identity: HostIdentity | None = None


def this_host() -> HostIdentity:
    """This process's identity (recomputed in a forked child, whose pid differs)."""
    cached = _This.identity
    pid = os.getpid()
    if cached is None or cached.pid != pid:
        start = start_time(pid)
        cached = _This.identity = HostIdentity(pid, 0 if start is None else start)
    return cached


def host_is_alive(identity: HostIdentity) -> bool:
    """Whether the process named by ``identity`` still runs.

    A zombie leader may still have running threads; its pidfd turns readable only
    once the whole thread group has exited, so that decides.
    """
    if start_time(identity.pid) != identity.start:
        return False
    try:
        with open(f"/proc/{identity.pid}/stat", "rb") as file:
            state = file.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state not in (b"Z", b"X"):
        return True
    try:
        fd = os.pidfd_open(identity.pid)
    except OSError:
        return False
    try:
        return not select.select([fd], [], [], 0)[0]
    finally:
        os.close(fd)


class _Libc:
    prctl: Callable[..., int] | None = None


def _load_prctl() -> Callable[..., int] | None:
    if _Libc.prctl is None:
        with contextlib.suppress(OSError, AttributeError):
            _Libc.prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _Libc.prctl


@functools.cache
def pdeathsig_argv() -> tuple[str, ...]:
    """``setpriv --pdeathsig KILL --`` to put in front of argv, or ``()`` without setpriv.

    The preferred way to give the child ``PR_SET_PDEATHSIG(SIGKILL)``: a ``preexec_fn``
    makes Python fork the whole parent instead of ``vfork``-ing, which measured ~5 ms of
    parent CPU per spawn for a parent holding the protocol SDKs.  ``setpriv`` looks the
    program up after the fork, so the spawn path checks first that the program can be
    executed (a missing one stays a spawn failure, not an exit status).  The setting
    survives the ``exec`` into the program (not into a set-user-ID one).
    """
    setpriv = shutil.which("setpriv")
    return (setpriv, "--pdeathsig", "KILL", "--") if setpriv else ()


def pdeathsig_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` that gives the child ``PR_SET_PDEATHSIG(SIGKILL)``, or None off Linux
    (the fallback where :func:`pdeathsig_argv` has no ``setpriv``).

    The kernel sends the signal when the *thread* that forked the child exits, not the
    process: asyncio forks from the event loop's thread, so a loop run in a worker
    thread that ends while its runs live kills them too (which is what a host that
    stops supervising should get).  The setting survives ``execve`` except into a
    set-user-ID program.  If the host died between fork and ``prctl``, the child is
    already orphaned: it kills itself at once.

    """
    prctl = _load_prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return set_pdeathsig
