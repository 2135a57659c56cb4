"""The journal's cost: parent CPU per run with the journal on against off, and the event
loop's longest stall while a large batch journals (run: python -m benchmarks.bench_journal).

1. **CPU per run.**  Batches of the example agent through ``supervisor.batch`` with a
   ``Registry(journal=...)`` (on) and a plain ``Registry()`` (off), interleaved round by
   round (on, off, off, on, ...) so the machine's drift hits both alike.  N = 1 (one run)
   and N = 100 (100 runs at concurrency = CPU count).  The figure is this process's own
   CPU time (``time.process_time``: the event loop *and* the journal's writer
   thread; the children are not counted) over the runs.  Goal: on / off <=
   1.10 (ratio of medians) at both N.
2. **Loop stall.**  First the journal's own writes for 10,000 runs (the hooks each run
   calls, without the runs), then a batch of ``BENCH_STALL_N`` (default 10,000) real runs, on and off, with
   a ticker task that sleeps 1 ms and records how late it wakes: the longest lateness
   and the p99, journal on against off.  The journal's writes are a queue put on the
   loop; the writer thread commits.  Goal: the longest stall with the journal on is not
   worse than 2x the one without it, and under 100 ms.

``BENCH_ROUNDS`` rounds of each (default 7); ``BENCH_STALL_N=0`` skips part 2.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import anyio.lowlevel

from benchmarks._stats import percentile
from supervisor import BatchRecord, Journal, Registry, batch
from supervisor._kinds import example_config, example_kind

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
STALL_N = int(os.environ.get("BENCH_STALL_N", "10000"))


def registry(journal: Journal | None) -> Registry:
    found = example_kind()
    assert found is not None
    name, kind = found
    reg = Registry(journal=journal)
    reg.register(kind.provider(example_config(kind, stderr="log"), name))
    return reg


def cpu() -> float:
    return time.process_time()  # every thread of this process (the writer's too), not the children


FAILED: list[str] = []  # runs that did not complete (counted, reported; never silently dropped)


async def cpu_per_run(journal: Journal | None, n: int, cwd: Path) -> float:
    items = [{"id": f"i{i}", "task": f"task {i}"} for i in range(n)]
    reg = registry(journal)
    started = cpu()
    async for outcome in batch(items, registry=reg, concurrency=os.cpu_count() or 1, cwd=cwd):
        assert isinstance(outcome, BatchRecord), outcome
        if not outcome.completed:
            FAILED.append(outcome.diagnostic or outcome.stop_reason or "?")
    if journal is not None:
        journal.flush()  # the writer's work is counted
    return (cpu() - started) / n


async def ticker(late: list[float], done: anyio.Event) -> None:
    """Sleep 1 ms at a time until ``done``, noting how late each wake-up came: the loop's stalls."""
    while not done.is_set():
        before = time.perf_counter()
        await anyio.sleep(0.001)
        late.append(time.perf_counter() - before - 0.001)


async def stalls(journal: Journal | None, n: int, cwd: Path) -> list[float]:
    late: list[float] = []
    done = anyio.Event()

    items = [{"id": f"s{i}", "task": f"task {i}"} for i in range(n)]
    reg = registry(journal)
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker, late, done)
        count = 0
        async for outcome in batch(items, registry=reg, concurrency=os.cpu_count() or 1, cwd=cwd):
            assert isinstance(outcome, BatchRecord), outcome
            if not outcome.completed:
                FAILED.append(outcome.diagnostic or outcome.stop_reason or "?")
            count += 1
            if count % 1000 == 0:
                print(f"  ... {count} runs", file=sys.stderr)
        done.set()
    return late


async def synthetic_stalls(journal: Journal | None, n: int) -> tuple[list[float], float]:
    """The journal's own writes for ``n`` runs (the hooks a run calls, 12 transitions each),
    made from the event loop as fast as it can, with the ticker running: the loop's
    lateness, and the wall time until everything is committed."""
    from types import SimpleNamespace

    from machines import Transition
    from supervisor import SubagentResult
    from supervisor.journal._observer import NOOP, RunJournal

    found = example_kind()
    assert found is not None
    config = example_config(found[1], stderr="log")
    result = SubagentResult(output="x", stop_reason="completed")
    late: list[float] = []
    done = anyio.Event()

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker, late, done)
        for i in range(n):
            run = SimpleNamespace(
                id=f"synthetic-{i}", kind="acp", provider_name="acp", turn=1, task="t", state="prompt",
                containment="cgroup", conversation=False, quiescent=True, config=config, audit=None,
                request=SimpleNamespace(parent_cwd="/"), resources=None, conversation_over=None,
            )  # fmt: skip
            hooks = NOOP if journal is None else RunJournal(journal)
            sink = hooks.sink(None)
            hooks.begin(run)
            for _ in range(12):
                if sink is not None:
                    sink(Transition(run.id, "e", "a", "b", time.monotonic(), "lifecycle", 1))
            hooks.published(run)
            hooks.settled(run, result)
            hooks.end(run)
            await anyio.lowlevel.checkpoint()  # a run's hooks come from different steps of the loop
        if journal is not None:
            await anyio.to_thread.run_sync(journal.flush)
        done.set()
    return late, time.perf_counter() - started


async def main() -> None:
    print("load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as tmp:
        work = Path(tmp)
        journal = Journal(work / "journal.db")
        await cpu_per_run(None, 2, work)  # the first runs import the ACP SDK
        await cpu_per_run(journal, 2, work)
        for n in (1, 100):
            on: list[float] = []
            off: list[float] = []
            for r in range(ROUNDS):
                order = (journal, None) if r % 2 == 0 else (None, journal)
                for which in order:
                    value = await cpu_per_run(which, n, work)
                    (on if which is not None else off).append(value)
            ratio = statistics.median(on) / statistics.median(off)
            print(
                f"N = {n:<4} parent CPU per run: journal on median {statistics.median(on) * 1000:7.2f} ms, "
                f"off {statistics.median(off) * 1000:7.2f} ms; on/off = {ratio:.3f} (goal <= 1.10)"
            )
        for label, which in (("off", None), ("on", journal)):
            late, wall = await synthetic_stalls(which, 10_000)
            worst, p99 = max(late) * 1000, percentile(late, 99) * 1000
            print(
                f"loop stall, 10000 runs' journal writes (synthetic), journal {label:<3}: "
                f"max {worst:7.2f} ms, "
                f"p99 {p99:6.2f} ms ({len(late)} ticks; all committed after {wall:.2f} s)"
            )
        if STALL_N:
            for label, which in (("off", None), ("on", journal)):
                late = await stalls(which, STALL_N, work)
                worst, p99 = max(late) * 1000, percentile(late, 99) * 1000
                middle = statistics.median(late) * 1000
                print(
                    f"loop stall, {STALL_N} runs, journal {label:<3}: max {worst:7.2f} ms, "
                    f"p99 {p99:6.2f} ms, median {middle:5.2f} ms ({len(late)} ticks)"
                )
        journal.close()
    if FAILED:
        print(f"runs that did not complete: {len(FAILED)} (first: {FAILED[0]})")
    print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
