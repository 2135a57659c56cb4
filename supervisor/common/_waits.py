"""Waiting for whichever of several things happens first."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from supervisor._public import home


async def first_of(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return as soon as any of ``waits`` returns (the others are cancelled): e.g. an idle
    session is lost when the child exits *or* its wire ends, whichever is seen first."""
    async with anyio.create_task_group() as first:

        async def until(wait: Callable[[], Awaitable[object]]) -> None:
            await wait()
            first.cancel_scope.cancel()

        for wait in waits:
            first.start_soon(until, wait)


home("supervisor.provider", first_of)
