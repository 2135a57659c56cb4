"""What progress costs the parent: runs with progress off, fed but unwatched, and watched
(run: python -m benchmarks.bench_progress).

Three contenders, interleaved round after round in one process (each round starts with the
next one), each the built-in example agent through ``Registry.run`` in process-tree
containment:

* ``off``: the progress feed is switched off (every ``ProgressTracker`` feed method
  replaced by a no-op for the contender's rounds): what a run cost before progress existed;
* ``fed``: progress as shipped, nobody watching (``run.progress`` is never read);
* ``watched``: as shipped, and one ``async for p in run.watch()`` per run rendering each
  snapshot with ``progress_line`` (what ``subagents run`` on a terminal does); the run is
  disposed once it settled, the watcher ends at its own pace (the last snapshot comes at
  most 250 ms after the one before it).

Two workloads: ``plain`` ("say hello": a streamed answer of ~30 chunks) and ``chatty``
(``@tools execute*N`` with ``@slow``: one tool call every 3 ms, each a ``tool_call`` and two
``tool_call_update`` notifications: ~1,000 updates a second for ``BENCH_CHATTY_S`` seconds,
default 1).  Each at ``BENCH_N`` concurrency levels (default ``1,100``; at N = 1,
``BENCH_SERIAL`` runs one after another, default 10).  ``BENCH_ROUNDS`` rounds (default 3).

Then, in-process and without children, the two costs themselves (``BENCH_MICRO=0`` skips
them): the feed's CPU per update (a call noted pending, in progress, completed: three
updates), and a watcher's whole CPU over a short turn (100 turns at once, each 30 updates
over 150 ms, watched against not).

Printed: parent CPU per run (``time.process_time``: this process, worker threads included,
never the children), wall per run, and the ratios to ``off``.  Goal: ``watched / off`` and
``fed / off`` within 1.05x.  The load average is printed before and after: ratios taken
while other work loads the cores are noisy.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import anyio

from supervisor import Registry, Run, StopReason, SubagentRequest, progress_line
from supervisor.process import ContainmentMode
from supervisor.provider import TOOL_KINDS
from supervisor.providers.acp import Provider, example_agent_config
from supervisor.run._progress import ProgressTracker

FEED = ("tool_call", "plan", "permission", "answer_bytes", "usage", "touch")
CONTENDERS = ("off", "fed", "watched")
GOAL = 1.05
CALL_EVERY_MS = 3  # three updates per call: ~1,000 updates a second


@contextlib.contextmanager
def feed_off() -> Iterator[None]:
    """Every feed method of the tracker a no-op, for the ``off`` contender's rounds."""
    saved = {name: getattr(ProgressTracker, name) for name in FEED}
    for name in FEED:
        setattr(ProgressTracker, name, lambda self, *args, **kwargs: None)
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(ProgressTracker, name, method)


def workload(name: str) -> str:
    if name == "plain":
        return "say hello"
    calls = int(float(os.environ.get("BENCH_CHATTY_S", "1")) * 1000 / CALL_EVERY_MS)
    return f"work\n@tools execute*{calls}\n@slow {CALL_EVERY_MS}"


def contender(name: str, task: str) -> Callable[[Path], Coroutine[Any, Any, None]]:
    registry = Registry()
    registry.register(
        Provider(example_agent_config(containment=ContainmentMode.PROCESS_TREE, stderr="discard"))
    )

    async def watch(run: Run) -> None:
        async for p in run.watch():
            progress_line(p)

    async def one(cwd: Path) -> None:
        # The watcher outlives the run's block: the run is disposed as soon as it settled,
        # as ``subagents run`` does; the watcher's last snapshot comes at its own pace.
        request = SubagentRequest(task=task, parent_cwd=cwd)
        async with anyio.create_task_group() as tg, registry.run("acp", request) as run:
            if name == "watched":
                tg.start_soon(watch, run)
            result = await run.result()
        assert result.stop_reason == StopReason.COMPLETED, result

    return one


async def level(one: Callable[[Path], Coroutine[Any, Any, None]], n: int, cwd: Path) -> tuple[float, float]:
    """(parent CPU per run, wall per run) of ``n`` concurrent runs (N = 1: serial runs)."""
    count = int(os.environ.get("BENCH_SERIAL", "10")) if n == 1 else n
    cpu, wall = time.process_time(), time.perf_counter()
    if n == 1:
        for _ in range(count):
            await one(cwd)
    else:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one, cwd)
    return (time.process_time() - cpu) / count, (time.perf_counter() - wall) / count


def feed_cost() -> float:
    """CPU seconds per update the feed costs (median of 5 passes of 30,000 updates)."""
    samples = []
    for _ in range(5):
        tracker = ProgressTracker(TOOL_KINDS, lambda: ("prompt", 1))
        started = time.process_time()
        for i in range(10_000):
            tracker.tool_call(i, "execute", "pending")
            tracker.tool_call(i, None, "in_progress")
            tracker.tool_call(i, None, "completed")
        samples.append((time.process_time() - started) / 30_000)
    return statistics.median(samples)


async def watcher_cost() -> tuple[float, float]:
    """CPU per turn of 100 short turns at once: (unwatched, watched), medians of 5."""

    async def turn(watched: bool) -> None:
        tracker = ProgressTracker(TOOL_KINDS, lambda: ("prompt", 1))
        async with anyio.create_task_group() as tg:
            if watched:

                async def watch() -> None:
                    async for p in tracker.watch():
                        progress_line(p)

                tg.start_soon(watch)
            for _ in range(30):
                tracker.answer_bytes(5)
                await anyio.sleep(0.005)
            tracker.settle(final=True)

    samples: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(5):
        for watched in (False, True):
            started = time.process_time()
            async with anyio.create_task_group() as tg:
                for _ in range(100):
                    tg.start_soon(turn, watched)
            samples[watched].append((time.process_time() - started) / 100)
    return statistics.median(samples[False]), statistics.median(samples[True])


async def main() -> None:
    levels = [int(n) for n in os.environ.get("BENCH_N", "1,100").split(",")]
    rounds = int(os.environ.get("BENCH_ROUNDS", "3"))
    workloads = os.environ.get("BENCH_WORKLOADS", "plain,chatty").split(",")
    cwd = Path(tempfile.mkdtemp(prefix="bench-progress-"))
    print(f"load average before: {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}")
    await contender("fed", "say hello")(cwd)  # warm the imports
    verdicts: list[str] = []
    for work in workloads:
        task = workload(work)
        for n in levels:
            samples: dict[str, list[tuple[float, float]]] = {c: [] for c in CONTENDERS}
            for r in range(rounds):
                for name in CONTENDERS[r % 3 :] + CONTENDERS[: r % 3]:  # each goes first in turn
                    one = contender(name, task)
                    with feed_off() if name == "off" else contextlib.nullcontext():
                        samples[name].append(await level(one, n, cwd))
            cpu = {c: statistics.median(s[0] for s in samples[c]) for c in CONTENDERS}
            wall = {c: statistics.median(s[1] for s in samples[c]) for c in CONTENDERS}
            print(f"\n{work}, N = {n}, {rounds} rounds (medians per run)")
            for name in CONTENDERS:
                print(
                    f"  {name:<8} parent CPU {cpu[name] * 1000:8.2f} ms ({cpu[name] / cpu['off']:.3f}x)"
                    f"   wall {wall[name] * 1000:8.1f} ms ({wall[name] / wall['off']:.3f}x)"
                )
            for name in ("fed", "watched"):
                ratio = cpu[name] / cpu["off"]
                verdicts.append(
                    f"{work} N={n} {name}/off CPU {ratio:.3f}x: {'met' if ratio <= GOAL else 'NOT met'}"
                )
    if os.environ.get("BENCH_MICRO", "1") != "0":
        per_update = feed_cost()
        bare, watched = await watcher_cost()
        print(f"\nthe feed: {per_update * 1e6:.2f} us of CPU per update")
        print(
            f"a watcher over a 150 ms turn of 30 updates: {(watched - bare) * 1e3:.3f} ms of CPU"
            f" ({bare * 1e3:.3f} ms unwatched, {watched * 1e3:.3f} ms watched)"
        )
    print(f"\nload average after: {os.getloadavg()[0]:.1f}; goal {GOAL}x")
    for line in verdicts:
        print("  " + line)


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
