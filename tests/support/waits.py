"""Waiting in a test for a fact that sends no event: an agent's own file write, a process
gone, a pool's background refill."""

from __future__ import annotations

from collections.abc import Callable

import anyio


async def until(condition: Callable[[], bool], within: float = 120.0) -> None:
    """Wait for ``condition`` (generously bounded: a hang fails, a slow machine does not)."""
    with anyio.fail_after(within):
        while not condition():  # noqa: ASYNC110 - the fact has no event to wait on
            await anyio.sleep(0.01)
