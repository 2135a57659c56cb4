"""The direct child, pinned from its spawn on: signals by number reach it or nobody.

A run's direct child leads a process group whose id is its pid.  Once the child has been
reaped and nothing is left in its group, the kernel gives that number to a later process
(on a busy machine with ``pid_max`` 32768, within seconds), and a ``kill`` or ``killpg``
sent by number then ends a stranger.  The stranger is the *newest* process on the
machine, typically another run's fresh child during its ``initialize``: that run then
failed, rarely and only under load, as ``initialize/process-exit`` with ``SIGTERM`` (the
teardown rungs of some other run, in this process or another supervising process).

So the child's pid is pinned by a pidfd opened right after the spawn (a number just
handed out cannot come round again before a full wrap of the pid space), and:

* the child itself is only signalled through the pidfd (exact: once reaped, nothing);
* its group only while the group id is still the child's: the child is not reaped yet
  (running or a zombie: its pid is held), or no process has the number at all (then
  only members left in the group hold it, and the kernel gives no new process a number
  in use as a group id).  A process that has the number and is not the child means the
  group went empty and the number was handed out again: the group is not the run's.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import signal
from signal import Signals

import anyio

from supervisor.process._keeper_main import start_time

log = logging.getLogger("supervisor")


class ChildPin:
    """One direct child, held by a pidfd (or, out of descriptors, by its start time)."""

    def __init__(self, pid: int, *, open_fd: bool = True) -> None:
        self.pid = pid
        self.start = start_time(pid)
        self._fd: int | None = None
        if open_fd:
            try:
                self._fd = os.pidfd_open(pid)
            except OSError as exc:
                if exc.errno != errno.EMFILE:
                    self.start = None  # already reaped: nothing is held
                log.debug("pidfd_open(%d) failed: %r", pid, exc)

    def held(self) -> bool:
        """Whether the pid still names the child (running, or a zombie not reaped yet)."""
        if self._fd is None:
            return self.start is not None and start_time(self.pid) == self.start
        try:
            signal.pidfd_send_signal(self._fd, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True  # it exists (EPERM cannot happen to our own child; be safe anyway)
        return True

    def group_is_ours(self) -> bool:
        """Whether the group id ``pid`` still names the child's group (module docstring)."""
        if self.held():
            return True
        return not os.path.exists(f"/proc/{self.pid}")

    def signal(self, sig: Signals) -> bool:
        """Send ``sig`` to the child if it is still the child; whether it was sent."""
        try:
            if self._fd is not None:
                signal.pidfd_send_signal(self._fd, sig)
            elif self.held():
                os.kill(self.pid, sig)
            else:
                return False
        except OSError:
            return False
        return True

    def signal_group(self, sig: Signals) -> bool:
        """``killpg`` the child's group while its id is still the child's; whether it was sent."""
        if not self.group_is_ours():
            log.debug("group %d is no longer the run's: not signalled", self.pid)
            return False
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return False
        except PermissionError as exc:  # a foreign group took the id: do not touch it
            log.debug("killpg(%d) refused: %r", self.pid, exc)
            return False
        return True

    async def exited(self) -> bool:
        """Wait until the kernel says the child has exited (its pidfd turns readable: a
        zombie, reaped or not); False at once when no pidfd is held."""
        if self._fd is None:
            return False
        await anyio.wait_readable(self._fd)
        return True

    def has_exited(self) -> bool:
        """Whether the kernel says the child has exited (its pidfd is readable), now, without
        waiting; False when no pidfd is held."""
        if self._fd is None:
            return False
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(0))

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
