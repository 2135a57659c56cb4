"""Wake on "this file changed" with inotify: how a cgroup's ``cgroup.events`` is waited for.

``poll()`` on ``cgroup.events`` reports the change as POLLPRI, which the event loop's
readiness API cannot ask for (the file always reads as "readable").  inotify turns the
same kernel notification into an ordinary readable descriptor.  One inotify instance
serves every watch of an event loop (the per-user limit on instances is small, about
128).  It lives as long as its loop: closing an inotify descriptor waits for the
kernel's SRCU grace period (milliseconds), too long for the loop, so it is closed only
once its loop is closed (found at the next watch from another loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio

log = logging.getLogger("supervisor")

_IN_MODIFY = 0x00000002
_IN_IGNORED = 0x00008000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")
# Without inotify (it failed to start): look again this often.  Only a degraded path.
_DEGRADED_POLL_SECONDS = 0.05

_libc = ctypes.CDLL(None, use_errno=True)


class _Watch:
    def __init__(self) -> None:
        self.event = anyio.Event()

    async def changed(self) -> None:
        await self.event.wait()
        self.event = anyio.Event()


class _Instance:
    """One inotify descriptor on one event loop, and the watches that share it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd: int = fd
        self.loop = loop
        self.watches: dict[int, list[_Watch]] = {}
        loop.add_reader(fd, self._readable)

    def add(self, path: Path) -> tuple[int, _Watch]:
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), _IN_MODIFY)
        if wd < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch")
        watch = _Watch()
        self.watches.setdefault(wd, []).append(watch)
        return wd, watch

    def remove(self, wd: int, watch: _Watch) -> None:
        watches = self.watches.get(wd, [])
        if watch in watches:
            watches.remove(watch)
        if not watches:
            self.watches.pop(wd, None)
            _libc.inotify_rm_watch(self.fd, wd)  # fails harmlessly once the file is gone

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.remove_reader(self.fd)
        os.close(self.fd)

    def _readable(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return
            except OSError as exc:
                log.debug("inotify read failed: %r", exc)
                return
            offset = 0
            while offset + _EVENT.size <= len(data):
                wd, _mask, _cookie, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + length
                for watch in self.watches.get(wd, ()):
                    watch.event.set()


_instances: dict[asyncio.AbstractEventLoop, _Instance] = {}


@contextlib.asynccontextmanager
async def watch_file(path: Path) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Yield ``changed()``: an awaitable that returns after the next change of ``path``.

    A change that happens after the watch is set and before ``changed()`` is awaited is
    not lost, so "check, then await a change, then check again" never misses one.
    """
    loop = asyncio.get_running_loop()
    for other in [other for other in _instances if other is not loop and other.is_closed()]:
        _instances.pop(other).close()
    instance = _instances.get(loop)
    try:
        if instance is None:
            instance = _instances[loop] = _Instance(loop)
        wd, watch = instance.add(path)
    except OSError as exc:
        if instance is not None and not instance.watches:
            _instances.pop(loop, None)
            instance.close()
        log.warning("inotify unavailable (%r): looking at %s every %s s", exc, path, _DEGRADED_POLL_SECONDS)
        yield _degraded
        return
    try:
        yield watch.changed
    finally:
        instance.remove(wd, watch)


async def _degraded() -> None:
    await anyio.sleep(_DEGRADED_POLL_SECONDS)
