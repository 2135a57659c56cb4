"""One repository's worktrees are added and removed one at a time, across processes.

``git worktree add`` (``remove``, ``prune`` too) reads the administrative files of every
worktree the repository has; one being added at the same moment, by this process or by
another supervisor on the machine, may have its folder but not yet its files, and git
dies reading them (``failed to read .git/worktrees/<id>/commondir``): a run on a
repository other runs were starting on failed to start now and then.  So each such
command holds, for its repository:

* an :class:`anyio.Lock` of this process (its tasks take turns in order, and at most one
  of them waits for the file lock), and
* an exclusive ``flock`` on ``<git common dir>/subagent-worktrees.lock``, which every
  supervisor process holds around the same commands (the keeper and the sweep too, when
  they remove a dead host's worktrees).

The ``flock`` is tried without blocking and tried again after a short pause that grows:
waiting blocks neither the event loop nor a worker thread, and a cancellation ends it at
once.  The lock goes with the file descriptor (a process that dies lets go).  The file is
never removed: removing a lock file another process may hold open would let two holders
in.  Where it cannot be opened or locked (a read-only git directory, a file system without
``flock``), the command runs under the in-process lock alone, as before; so it does after
:data:`PATIENCE` seconds of waiting (with a warning): a holder that never lets go (a
stopped process, or a confined run's child, which may read the git directory and so open
the file and lock it) only delays another process's worktrees.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from supervisor.process._keeper_main import WORKTREE_LOCK_FILE

log = logging.getLogger("supervisor")

FIRST_PAUSE = 0.005
LONGEST_PAUSE = 0.1
"""Seconds between two tries of a busy file lock: doubling from the first to the longest."""
PATIENCE = 30.0
"""Seconds a busy file lock is waited for before the command goes on without it."""

_IN_PROCESS: dict[Path, anyio.Lock] = {}


@contextlib.asynccontextmanager
async def administration(common_dir: Path) -> AsyncIterator[None]:
    """Hold the repository's worktree lock (``common_dir``: its git common directory)."""
    async with _IN_PROCESS.setdefault(common_dir, anyio.Lock()):
        fd = _open(common_dir / WORKTREE_LOCK_FILE)
        try:
            if fd is not None:
                await _lock(fd, common_dir)
            yield
        finally:
            if fd is not None:
                os.close(fd)  # lets the lock go


def _open(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        log.debug("worktree lock %s not opened (%s): this process's lock only", path, exc.strerror)
        return None


async def _lock(fd: int, common_dir: Path) -> None:
    """``flock`` ``fd`` exclusively, trying again while another process holds it."""
    pause = FIRST_PAUSE
    waiting = False
    give_up = anyio.current_time() + PATIENCE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                log.debug("worktree lock of %s not taken (%s): this process's only", common_dir, exc.strerror)
                return
        if not waiting:
            waiting = True
            log.debug("worktree lock of %s: another process holds it; waiting", common_dir)
        elif anyio.current_time() >= give_up:
            log.warning("worktree lock of %s: held for over %g s; going on without it", common_dir, PATIENCE)
            return
        await anyio.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE)
