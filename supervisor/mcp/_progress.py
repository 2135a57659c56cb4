"""Progress while a blocking tool call waits for its turn: ``notifications/progress``.

A client may abort a call that sends nothing for a while: the Claude Code CLI aborts a
stdio tool call after 30 minutes without a response or a progress notification
(``CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT``, measured at 60 s: "sent no response or progress
for 60s; aborting").  One notification per stage could not reset that clock during a
long turn (a 180 s turn reported ``prompt`` once), so while the call waits the current
status line is sent once a second, whatever changed: at most once a second, and never a
silence a client's limit could take for a dead server.

The line is :func:`status_line`, the run's progress line (:func:`supervisor.progress_line`),
built from closed facts only (never child text).  A ticker reading ``run.progress`` once a
second gives both the cap and the heartbeat in one loop (``run.watch()`` coalesces at
250 ms and goes quiet while nothing changes, so it could not be the heartbeat).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.server import ServerRequestContext

from supervisor import progress_line
from supervisor.mcp._desk import DeskRun

PROGRESS_INTERVAL_SECONDS = 1.0


def status_line(entry: DeskRun) -> str:
    """The one line that says where a run is: its progress line (stage, turn, elapsed
    time, tool calls by closed kind, ...), e.g. ``prompt · turn 2 · 42 s · 5 tool calls``."""
    return progress_line(entry.run.progress)


def progress_token(ctx: ServerRequestContext[Any]) -> str | int | None:
    meta: Any = ctx.meta
    if not meta:
        return None
    token = meta.get("progress_token", meta.get("progressToken"))
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


@contextlib.asynccontextmanager
async def progress(ctx: ServerRequestContext[Any], entry: DeskRun) -> AsyncIterator[None]:
    """Send the run's status line as progress while the block runs (when the request
    carries a progress token): at once, then once a second."""
    token = progress_token(ctx)
    if token is None:
        yield
        return
    async with anyio.create_task_group() as tg:
        tg.start_soon(_send_progress, ctx, token, entry)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


async def _send_progress(ctx: ServerRequestContext[Any], token: str | int, entry: DeskRun) -> None:
    count = 0
    while True:
        count += 1
        await ctx.session.send_progress_notification(
            token, count, message=status_line(entry), related_request_id=str(ctx.request_id)
        )
        await anyio.sleep(PROGRESS_INTERVAL_SECONDS)
