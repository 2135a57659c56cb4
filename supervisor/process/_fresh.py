"""Reads of something every live run asks about at once (the process table, the cgroup
namespaces), shared: one read in a worker thread at a time, and a question asked while a
read is under way is answered by the next one, so every answer was observed after the
question was asked (a process that appeared before it is never missed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class FreshReads(Generic[T]):
    """``await fresh()``: the result of a ``read`` that started after the call."""

    def __init__(self, read: Callable[[], T], initial: T) -> None:
        self._read = read
        self._value = initial
        self._started = 0
        self._done = 0
        self._reading: anyio.Event | None = None
        self.reads = 0

    async def fresh(self) -> T:
        wanted = self._started + 1
        while self._done < wanted:
            if self._reading is None:
                self._started += 1
                generation = self._started
                reading = self._reading = anyio.Event()
                try:
                    self._value = await anyio.to_thread.run_sync(self._read)
                    self._done = generation
                    self.reads += 1
                finally:
                    self._reading = None
                    reading.set()
            else:
                await self._reading.wait()
        return self._value
