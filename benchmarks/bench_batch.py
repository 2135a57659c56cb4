"""A local batch: 1,000 example-agent tasks at concurrency = CPU count, through ``supervisor.batch``.

Run: python -m benchmarks.bench_batch [N]

The machine's load drifts, so the batch runs in 10 rounds, each made of 10 runs one at a
time (``concurrency=1``) and then N/10 runs at full concurrency, interleaved:

- ``ideal`` = (sum of single-run walls) / concurrency, a single-run wall being the mean
  ``duration_s`` of that round's lone runs;
- ``batch / ideal``: the rounds' batch wall times over that;
- the same against the batch's own records (their ``duration_s`` summed), which removes
  the runs' slowdown from sharing the CPUs and leaves the batch's own scheduling;
- this process's RSS (the batch's parent), sampled after every 100 records.

Goal: batch / ideal <= 1.15.  The load average is printed before and after.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

import anyio
import psutil

from supervisor import BatchRecord, batch

ROUNDS = 10
ALONE_PER_ROUND = 10


async def run(items: list[dict[str, str]], concurrency: int, rss: list[float]) -> tuple[float, list[float]]:
    me = psutil.Process()
    started = time.perf_counter()
    durations: list[float] = []
    async for outcome in batch(items, concurrency=concurrency):
        assert isinstance(outcome, BatchRecord)
        assert outcome.completed
        durations.append(outcome.duration_s)
        if len(durations) % 100 == 0:
            rss.append(me.memory_info().rss / 2**20)
    return time.perf_counter() - started, durations


async def main(n: int) -> None:
    concurrency = os.cpu_count() or 1
    print("load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    per_round = n // ROUNDS
    ideal = wall = own = 0.0
    singles: list[float] = []
    rss: list[float] = [psutil.Process().memory_info().rss / 2**20]
    await run([{"id": "warm", "task": "x"}], 1, [])  # the first run imports the ACP SDK
    for r in range(ROUNDS):
        alone = [{"id": f"a{r}-{i}", "task": f"task {i}"} for i in range(ALONE_PER_ROUND)]
        _, durations = await run(alone, 1, [])
        single = statistics.mean(durations)
        singles.append(single)
        items = [{"id": f"b{r}-{i}", "task": f"task {i}"} for i in range(per_round)]
        round_wall, durations = await run(items, concurrency, rss)
        wall += round_wall
        ideal += per_round * single / concurrency
        own += sum(durations) / concurrency
    print(f"{per_round * ROUNDS} tasks in {ROUNDS} rounds, concurrency {concurrency}")
    print(f"single run alone: mean per round {min(singles) * 1000:.1f} .. {max(singles) * 1000:.1f} ms")
    verdict = "met" if wall / ideal <= 1.15 else "NOT met"
    print(f"batch wall {wall:.2f} s; ideal {ideal:.2f} s; batch / ideal = {wall / ideal:.3f}")
    print(f"goal: batch / ideal <= 1.15: {verdict}")
    print(f"against the batch's own run walls: {own:.2f} s; batch / that = {wall / own:.3f}")
    print(f"parent RSS MiB every 100 records: {' '.join(f'{v:.1f}' for v in rss)}")
    print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


def cli(argv: list[str] | Any) -> None:
    anyio.run(main, int(argv[1]) if len(argv) > 1 else 1000, backend="asyncio")


if __name__ == "__main__":
    cli(sys.argv)
