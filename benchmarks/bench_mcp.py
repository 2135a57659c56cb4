"""``run_subagent`` over MCP against the same run through the embedding API, interleaved
(run: python -m benchmarks.bench_mcp).

One ``subagents mcp`` server is started once and reached through the official SDK's
client over real stdio; each round then does, in alternating order, one batch of N runs
of the built-in example agent through ``Registry.run`` in this process and one batch of
N concurrent ``run_subagent`` calls.  A batch's wall time is divided by N; the ratio of
the medians is the overhead the MCP hop adds.  ``BENCH_ROUNDS`` (default 30) and
``BENCH_CONCURRENT`` (default "1,4").
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks._stats import summary
from supervisor import Registry, StderrMode, SubagentRequest
from supervisor.providers.acp import Provider, example_agent_config

TASK = "say hello"


async def embedded(registry: Registry, cwd: Path, n: int) -> float:
    async def one() -> None:
        async with registry.run("acp", SubagentRequest(task=TASK, parent_cwd=cwd)) as run:
            result = await run.result()
        assert result.stop_reason == "completed", result

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return (time.perf_counter() - started) / n


async def over_mcp(session: ClientSession, n: int) -> float:
    async def one() -> None:
        result = await session.call_tool("run_subagent", {"task": TASK})
        assert not result.is_error, result

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return (time.perf_counter() - started) / n


async def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "30"))
    levels = [int(n) for n in os.environ.get("BENCH_CONCURRENT", "1,4").split(",")]
    cwd = Path.cwd()
    registry = Registry()
    registry.register(Provider(example_agent_config(stderr=StderrMode.LOG)))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor.cli", "mcp", "--max-concurrent", str(max(levels))],
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await over_mcp(session, 1)  # warm both paths (imports, first spawn)
        await embedded(registry, cwd, 1)
        for n in levels:
            api: list[float] = []
            mcp: list[float] = []
            for index in range(rounds):
                if index % 2:
                    mcp.append(await over_mcp(session, n))
                    api.append(await embedded(registry, cwd, n))
                else:
                    api.append(await embedded(registry, cwd, n))
                    mcp.append(await over_mcp(session, n))
            print(summary(f"N={n} embedding API, wall per run", api))
            print(summary(f"N={n} run_subagent over MCP, wall per run", mcp))
            ratio = statistics.median(mcp) / statistics.median(api)
            print(f"N={n} ratio MCP / embedding (medians): {ratio:.3f}x (goal <= 1.10x)")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
