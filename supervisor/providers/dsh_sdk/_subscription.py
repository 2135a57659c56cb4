"""One turn's view of the notification stream: the session tree it follows, buffered.

The reader fills it synchronously, in wire order; the turn drains it.  The buffer is
bounded (a runtime that outruns it fails the turn as a protocol error), and a
client-wide failure reaches the waiting turn through :meth:`Subscription.fail`.
"""

from __future__ import annotations

from collections import deque

import anyio

from supervisor.providers.dsh_sdk._errors import DshError, DshProtocolError
from supervisor.providers.dsh_sdk._fold import Notification

__all__ = ["Subscription"]


class Subscription:
    """Tree-scoped buffer: filled synchronously by the reader, drained by one turn."""

    def __init__(self, root: str, max_buffered_bytes: int) -> None:
        self.root = root
        self._items: deque[tuple[Notification, int]] = deque()
        self._size = 0
        self._max = max_buffered_bytes
        self._wake: anyio.Event | None = None
        self._failure: DshError | None = None

    def push(self, note: Notification, size: int) -> None:
        if self._failure is not None:
            return
        if self._size + size > self._max:
            self.fail(DshProtocolError("the DSH SDK runtime outran the notification buffer"))
            return
        self._items.append((note, size))
        self._size += size
        self._wakeup()

    def fail(self, error: DshError) -> None:
        if self._failure is None:
            self._failure = error
            self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()
            self._wake = None

    async def get(self) -> Notification:
        while not self._items:
            if self._failure is not None:
                raise self._failure.again()
            self._wake = anyio.Event()
            await self._wake.wait()
        note, size = self._items.popleft()
        self._size -= size
        return note
