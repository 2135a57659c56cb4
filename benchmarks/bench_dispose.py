"""Teardown cost, measured against the processes' own exit (run: python -m benchmarks.bench_dispose).

1. EOF-obeying child: time from its exit (seen on a pidfd registered with the event
   loop, independent of the supervisor's own watcher) to ``teardown`` returning.
2. TERM-trapping child with graces e and g: total teardown time / (e + g).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import anyio

from benchmarks._stats import summary
from machines import TeardownLadder
from supervisor.process import ManagedProcess, SpawnSpec, StderrMode, child_environment

BEHAVE = str(Path(__file__).resolve().parent.parent / "tests" / "children" / "behave.py")


def spec(behaviour: str) -> SpawnSpec:
    tag = os.urandom(8).hex()
    return SpawnSpec(
        argv=[sys.executable, "-I", BEHAVE, behaviour],
        cwd=Path.cwd(),
        env=child_environment({}, run_tag=tag),
        run_tag=tag,
        stderr=StderrMode.DISCARD,
    )


def _stamp(loop: asyncio.AbstractEventLoop, pidfd: int, stamps: list[float]) -> None:
    stamps.append(time.perf_counter())
    loop.remove_reader(pidfd)


async def eof_exit_to_dispose(runs: int) -> list[float]:
    samples = []
    loop = asyncio.get_running_loop()
    for _ in range(runs):
        async with anyio.create_task_group() as tg:
            proc = await ManagedProcess.spawn(spec("eof"), tg)
            await proc.stdout.readline()  # "ready"
            pidfd = os.pidfd_open(proc.pid)
            exited_at: list[float] = []
            loop.add_reader(pidfd, _stamp, loop, pidfd, exited_at)
            report = await proc.teardown(TeardownLadder(), eof_grace=5, term_grace=5)
            done = time.perf_counter()
            os.close(pidfd)
            assert report.quiescent
            assert exited_at
            samples.append(done - exited_at[0])
            tg.cancel_scope.cancel()
    return samples


async def term_trapper_ratio(runs: int, eof: float, term: float) -> list[float]:
    ratios = []
    for _ in range(runs):
        async with anyio.create_task_group() as tg:
            proc = await ManagedProcess.spawn(spec("trap-term"), tg)
            await proc.stdout.readline()
            started = time.perf_counter()
            report = await proc.teardown(TeardownLadder(), eof_grace=eof, term_grace=term)
            ratios.append((time.perf_counter() - started) / (eof + term))
            assert report.quiescent
            assert report.rung == "kill-wait"
            tg.cancel_scope.cancel()
    return ratios


async def main() -> None:
    runs = int(os.environ.get("BENCH_RUNS", "30"))
    print(summary("EOF child: exit -> dispose returned", await eof_exit_to_dispose(runs)))
    ratios = await term_trapper_ratio(max(5, runs // 3), eof=1.0, term=1.0)
    print(summary("TERM trapper: dispose time / (e+g), e=1 g=1", ratios, unit="", scale=1.0))


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
