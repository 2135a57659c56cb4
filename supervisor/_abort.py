"""``AbortSignal``: the caller's single cancellation channel, before and after publication."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import anyio

from supervisor._public import home


class AbortSignal:
    """Fire once with :meth:`abort`; observers are called synchronously, in order.

    Awaitable: ``await signal`` returns once it has fired.
    """

    def __init__(self) -> None:
        self._aborted = False
        self._callbacks: list[Callable[[], None]] = []
        self._event: anyio.Event | None = None

    @property
    def aborted(self) -> bool:
        return self._aborted

    def abort(self) -> None:
        if self._aborted:
            return
        self._aborted = True
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def add_callback(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on abort (at once if already aborted); returns a remover."""
        if self._aborted:
            callback()
            return lambda: None
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    async def wait(self) -> None:
        if self._aborted:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

    def __await__(self) -> Generator[Any, None, None]:
        return self.wait().__await__()

    def __repr__(self) -> str:
        return f"<AbortSignal aborted={self._aborted}>"


home("supervisor", AbortSignal)
