"""This process's mount table (``/proc/self/mountinfo``), read again only when it changed.

Why: a root child's spawn decides what its mount view shows from the cgroup mounts, and
reading the table cost a run about 150 us of the parent's CPU on a loaded machine (the
kernel formats every mount at each read), for a table that changes about never.

How: the file stays open, and the kernel marks such a descriptor with ``POLLPRI`` once
a mount or unmount happened in its namespace since the last ``poll`` (``proc(5)``): one
``poll`` with no wait per call says whether the text kept is still the table.  The
descriptor's mark is set when it is opened, so a change between the open and the read
is seen by the next call, never lost.  A different mount namespace (``setns``,
``unshare``) opens the file again; so does a child after ``fork`` (a shared descriptor's
mark would be taken by whichever process polls first).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from dataclasses import dataclass

_PATH = "/proc/self/mountinfo"
_NAMESPACE = "/proc/self/ns/mnt"


@dataclass
class _Open:
    fd: int
    namespace: str
    text: str


_lock = threading.Lock()
_open: _Open | None = None


def mount_table() -> str:
    """The text of ``/proc/self/mountinfo`` as it is now; the same ``str`` object as the last
    call's while nothing was mounted or unmounted.  Raises ``OSError`` as reading it would."""
    global _open
    with _lock:
        namespace = os.readlink(_NAMESPACE)  # "mnt:[inode]": which namespace this is now
        held = _open
        if held is not None and held.namespace == namespace:
            if not _changed(held.fd):
                return held.text
            held.text = _read(held.fd)
            return held.text
        _close()
        fd = os.open(_PATH, os.O_RDONLY | os.O_CLOEXEC)
        try:
            held = _Open(fd, namespace, _read(fd))
        except BaseException:
            os.close(fd)
            raise
        _open = held
        return held.text


def _changed(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLPRI)
    return any(events & (select.POLLPRI | select.POLLERR) for _fd, events in poller.poll(0))


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _close() -> None:
    global _open
    held, _open = _open, None
    if held is not None:
        with contextlib.suppress(OSError):
            os.close(held.fd)


def _forget_in_child() -> None:
    """After ``fork``: the child's own descriptor, opened at its first call (the parent's
    stays the parent's; closing the inherited copy leaves the parent's open)."""
    global _lock
    _lock = threading.Lock()  # a thread of the parent may have held it at the fork
    _close()


os.register_at_fork(after_in_child=_forget_in_child)
