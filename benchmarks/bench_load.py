"""Load and soak over the built-in example agent (run: python -m benchmarks.bench_load).

Load: ``BENCH_CONCURRENT`` runs (default 200) started at once, in ``BENCH_BATCHES``
batches (default 3).  Within a batch every run is held published until all of them have
settled, so all the children are alive together; the parent's RSS is read at that
moment.  Reported per batch: wall time, completions, the parent's RSS per run in flight
((RSS with all children alive - baseline) / runs; goal < 1 MiB), open file descriptors
before and after, and orphans (processes on the machine still carrying a run tag, plus
children of this process).

Soak: ``BENCH_SEQUENTIAL`` runs (default 2000) one after another; every
``BENCH_SAMPLE_EVERY`` runs (default 100) the fd count and RSS are sampled and printed,
then the spread of the fd count and the RSS drift after the first sample are summarised.
"""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import sys
import time
from pathlib import Path

import anyio
import psutil

from benchmarks._stats import summary
from supervisor import Registry, StopReason, SubagentRequest
from supervisor.process import RUN_TAG_VARIABLE
from supervisor.providers.acp import Provider, example_agent_config

MiB = 1024 * 1024
ME = psutil.Process()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss() -> int:
    gc.collect()
    return int(ME.memory_info().rss)


def orphans(run_ids: set[str]) -> list[psutil.Process]:
    """Live processes carrying one of ``run_ids``, and any child of ours that is left."""
    found = {p.pid: p for p in ME.children(recursive=True)}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(RUN_TAG_VARIABLE) in run_ids:
                found[proc.pid] = proc
    return list(found.values())


async def one_run(registry: Registry, cwd: Path, task: str) -> str:
    async with registry.run("acp", SubagentRequest(task=task, parent_cwd=cwd)) as run:
        result = await run.result()
    assert result.stop_reason == StopReason.COMPLETED, result
    assert run.quiescent
    return run.id


async def batch(registry: Registry, cwd: Path, runs: int) -> None:
    baseline_rss, baseline_fds = rss(), open_fds()
    settled = 0
    all_settled = anyio.Event()
    in_flight_rss = 0
    run_ids: set[str] = set()
    completed = 0

    async def one(i: int) -> None:
        nonlocal settled, in_flight_rss, completed
        request = SubagentRequest(task=f"task {i}", parent_cwd=cwd)
        async with registry.run("acp", request) as run:
            run_ids.add(run.id)
            result = await run.result()
            completed += result.stop_reason == StopReason.COMPLETED
            settled += 1
            if settled == runs:
                in_flight_rss = rss()  # every child is alive now: none has been disposed yet
                all_settled.set()
            await all_settled.wait()

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(runs):
            tg.start_soon(one, i)
    elapsed = time.perf_counter() - started
    left = orphans(run_ids)
    after_fds = open_fds()
    per_run = (in_flight_rss - baseline_rss) / runs
    print(
        f"  {runs} concurrent: {elapsed:6.2f}s wall, {completed}/{runs} completed, "
        f"parent RSS {baseline_rss / MiB:6.1f} -> {in_flight_rss / MiB:6.1f} MiB in flight "
        f"({per_run / 1024:6.1f} KiB per run), after {rss() / MiB:6.1f} MiB; "
        f"fds {baseline_fds} -> {after_fds}; orphans {len(left)}"
    )
    assert completed == runs
    assert not left, left


async def soak(registry: Registry, cwd: Path, runs: int, every: int) -> None:
    samples: list[tuple[int, int, int]] = []
    durations: list[float] = []
    run_ids: set[str] = set()
    print(f"  {'runs':>6} {'fds':>5} {'RSS MiB':>8}")
    for i in range(1, runs + 1):
        started = time.perf_counter()
        run_ids.add(await one_run(registry, cwd, f"task {i}"))
        durations.append(time.perf_counter() - started)
        if i % every == 0:
            samples.append((i, open_fds(), rss()))
            print(f"  {i:>6} {samples[-1][1]:>5} {samples[-1][2] / MiB:>8.2f}")
    fds = [s[1] for s in samples]
    memory = [s[2] for s in samples]
    drift = (memory[-1] - memory[0]) / 1024
    per_thousand = drift / max(1, samples[-1][0] - samples[0][0]) * 1000
    left = orphans(run_ids)
    print(summary("  soak: one run, start to quiescence", durations))
    print(
        f"  fds min/max {min(fds)}/{max(fds)}; RSS {memory[0] / MiB:.2f} -> {memory[-1] / MiB:.2f} MiB "
        f"(drift {drift:+.0f} KiB after run {samples[0][0]}, {per_thousand:+.0f} KiB per 1000 runs; "
        f"median sample {statistics.median(memory) / MiB:.2f} MiB); orphans {len(left)}"
    )
    assert max(fds) == min(fds)
    assert not left, left


async def main() -> None:
    concurrent = int(os.environ.get("BENCH_CONCURRENT", "200"))
    batches = int(os.environ.get("BENCH_BATCHES", "3"))
    sequential = int(os.environ.get("BENCH_SEQUENTIAL", "2000"))
    every = int(os.environ.get("BENCH_SAMPLE_EVERY", "100"))
    cwd = Path.cwd()
    registry = Registry()
    registry.register(Provider(example_agent_config()))
    await one_run(registry, cwd, "warm up")  # imports and first-use allocations
    print(f"load: example agent, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    for _ in range(batches):
        await batch(registry, cwd, concurrent)
    print(f"soak: {sequential} sequential runs")
    await soak(registry, cwd, sequential, every)


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
