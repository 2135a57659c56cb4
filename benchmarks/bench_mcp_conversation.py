"""An MCP conversation's second turn (``send_subagent``, call to answer) against a fresh
``run_subagent`` of the same task, interleaved over one server (run: python -m
benchmarks.bench_mcp_conversation).

One ``subagents mcp`` server (the built-in example agent) is reached through the official
SDK's client over real stdio.  Each pair: a conversation is started with ``run_subagent``
``keep_alive`` (untimed), its second turn is timed from the ``send_subagent`` call to its
answer, and it is closed (untimed); then a one-shot ``run_subagent`` of the same task is
timed from the call to its answer (spawn, handshake, the task, the tree gone).  The order
alternates per pair.  ``BENCH_ROUNDS`` pairs (default 20).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks._stats import summary

TASK = "say hello"


async def second_turn(session: ClientSession) -> float:
    first = await session.call_tool("run_subagent", {"task": TASK, "keep_alive": True})
    assert not first.is_error, first
    assert first.structured_content is not None
    run_id = first.structured_content["run_id"]
    started = time.perf_counter()
    second = await session.call_tool("send_subagent", {"run_id": run_id, "task": TASK})
    elapsed = time.perf_counter() - started
    assert not second.is_error, second
    closed = await session.call_tool("close_subagent", {"run_id": run_id})
    assert not closed.is_error, closed
    return elapsed


async def one_shot(session: ClientSession) -> float:
    started = time.perf_counter()
    result = await session.call_tool("run_subagent", {"task": TASK})
    elapsed = time.perf_counter() - started
    assert not result.is_error, result
    return elapsed


async def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "20"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "supervisor.cli", "mcp"])
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await one_shot(session)  # warm the server (imports, first spawn)
        await second_turn(session)
        sends: list[float] = []
        fresh: list[float] = []
        for index in range(rounds):
            if index % 2:
                fresh.append(await one_shot(session))
                sends.append(await second_turn(session))
            else:
                sends.append(await second_turn(session))
                fresh.append(await one_shot(session))
    print(summary("send_subagent, second turn (call to answer)", sends))
    print(summary("run_subagent, fresh one-shot (call to answer)", fresh))
    ratio = statistics.median(sends) / statistics.median(fresh)
    print(f"ratio second turn / fresh one-shot (medians): {ratio:.3f}x (expect a large win)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
