"""The per-turn guard: a turn's time limit (``timeout_ms``) and silence limit
(``stall_timeout_ms``).

The base run wraps the one place a turn is driven in :func:`guard_turn`; a later turn
of a conversation is guarded the same way, from its own start.  When a limit is
reached the guard calls ``on_limit`` with the closed facts (the base settles the turn
``error`` with its failure line and the limit line, and stops the turn like a local
cancellation); the guard never touches the process itself.  The time limit is the
deadline of a cancel scope around the turn (the turn is cancelled, then ``on_limit``
is called); the silence limit is one watcher task.

Silence is not slowness.  A turn is *silent* when, for ``stall_timeout_ms``, no bytes
came on the child's stdout **and** its whole tree used (almost) no CPU: a child busy on
CPU without writing is working.  The guard looks at a coarse cadence derived from the
limit (a quarter of it, between 50 ms and 5 s), not in a hot loop: each look compares
the stdout counter and the tree's CPU time with the previous look.  An interval in
which the tree used at least :data:`BUSY_SHARE` of one CPU counts as work.  So a stall
is reported between ``stall_timeout_ms`` and ``stall_timeout_ms`` plus one look after
the last sign of life, never earlier.  Where the tree's CPU time cannot be read, stdout
alone decides.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from supervisor._diagnostic import LimitFacts, LimitResource

BUSY_SHARE = 0.01
"""CPU time over wall time above which a look interval counts as work (1% of one CPU)."""
MIN_LOOK_SECONDS = 0.05
MAX_LOOK_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class TurnLimits:
    """A turn's time and silence limits, in milliseconds (None: unlimited)."""

    timeout_ms: float | None = None
    stall_timeout_ms: float | None = None

    @property
    def any(self) -> bool:
        return self.timeout_ms is not None or self.stall_timeout_ms is not None


class Activity(Protocol):
    """What the guard reads of the running child (the run's ``ManagedProcess``)."""

    @property
    def stdout_chunks(self) -> int:
        """A counter that moves whenever bytes arrive on the child's stdout."""
        ...

    async def cpu_seconds(self) -> float | None:
        """CPU time the whole tree has used so far, or None where it cannot be read."""
        ...


OnLimit = Callable[[LimitFacts], None]


@contextlib.asynccontextmanager
async def guard_turn(
    limits: TurnLimits, *, started: float, activity: Activity | None, on_limit: OnLimit
) -> AsyncIterator[None]:
    """Watch the turn run inside the block; ``started`` is its start on anyio's clock
    (spawn for the first turn, the send for a later one)."""
    if not limits.any:
        yield
        return
    # The time limit is the deadline of a cancel scope around the turn (no task of its own).
    deadline = math.inf if limits.timeout_ms is None else started + limits.timeout_ms / 1000
    with anyio.CancelScope(deadline=deadline) as clock:
        if limits.stall_timeout_ms is None or activity is None:
            yield
        else:
            async with anyio.create_task_group() as watchers:
                watchers.start_soon(_silence_limit, limits.stall_timeout_ms, activity, on_limit)
                try:
                    yield
                finally:
                    watchers.cancel_scope.cancel()
    if clock.cancelled_caught:
        assert limits.timeout_ms is not None
        on_limit(LimitFacts(LimitResource.TIME, limits.timeout_ms))


def look_interval(stall_timeout_ms: float) -> float:
    """Seconds between two looks at a silent child: a quarter of the limit, within bounds."""
    return min(max(stall_timeout_ms / 4000, MIN_LOOK_SECONDS), MAX_LOOK_SECONDS)


async def _silence_limit(stall_timeout_ms: float, activity: Activity, on_limit: OnLimit) -> None:
    limit = stall_timeout_ms / 1000
    interval = look_interval(stall_timeout_ms)
    chunks = activity.stdout_chunks
    cpu = await activity.cpu_seconds()
    looked = last_sign = anyio.current_time()
    while True:
        await anyio.sleep(min(interval, max(last_sign + limit - looked, 0.0)))
        now = anyio.current_time()
        now_chunks = activity.stdout_chunks
        now_cpu = await activity.cpu_seconds()
        busy = now_cpu is not None and cpu is not None and now_cpu - cpu >= BUSY_SHARE * (now - looked)
        if now_chunks != chunks or busy:
            last_sign = now
        chunks, cpu, looked = now_chunks, now_cpu, now
        if now - last_sign >= limit:
            on_limit(LimitFacts(LimitResource.SILENCE, stall_timeout_ms))
            return
