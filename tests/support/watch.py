"""A trace sink a test awaits: wake when a transition has been recorded (no polling, no sleeps)."""

from __future__ import annotations

import anyio

from machines import Transition


class Watch:
    """Pass as ``trace=`` to ``Registry.run``; ``await watch.reached(name, turn=...)``."""

    def __init__(self) -> None:
        self.seen: list[Transition] = []
        self._waiting: list[tuple[str, int | None, anyio.Event]] = []

    def __call__(self, entry: Transition) -> None:
        self.seen.append(entry)
        for name, turn, event in self._waiting:
            if self._matches(entry, name, turn):
                event.set()

    @staticmethod
    def _matches(entry: Transition, name: str, turn: int | None) -> bool:
        return name in (entry.event, entry.target) and (turn is None or entry.turn == turn)

    async def reached(self, name: str, turn: int | None = None) -> None:
        """Return once a transition with this event or target (in ``turn``) has been recorded."""
        if any(self._matches(e, name, turn) for e in self.seen):
            return
        event = anyio.Event()
        self._waiting.append((name, turn, event))
        await event.wait()
