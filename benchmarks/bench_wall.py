"""Where the wall of N concurrent runs goes: CPU, the cores left idle, and when each stage happens.

Run: ``python -m benchmarks.bench_wall [N] [ROUNDS] [MODE...]`` (default 100 runs at once, 2
rounds, every containment mode available), as ``bench_containment`` runs them: the lean
baseline and the supervisor on the example agent, interleaved round after round.

Per contender and round it prints the wall per run; the CPU per run of this process
(``self``, worker threads included) and of its reaped children (``children``: the agents,
the spawn shim, the keeper), from ``getrusage``; the cores that CPU kept busy on average
(CPU / wall); and ``idle``, the core time per run this batch left unused (cores x wall - CPU),
which is what a supervisor adds to the wall beyond its CPU.  Then the timeline of the last
round: for each stage of a run (from the runs' audit trails; for the baseline, its own
marks), when the first, the median and the last run reached it, in ms from the batch's start.

The machine's other work takes cores too and shows up as ``idle`` here: compare a
supervisor's figure with the baseline's of the same round, and give the load average.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio

from benchmarks.bench_containment import _request
from supervisor import Registry, StopReason, SubagentRequest
from supervisor.process import ContainmentMode, detect_containment
from supervisor.providers.acp import EXAMPLE_AGENT, Provider, example_agent_config

Marks = dict[str, list[float]]
Runner = Callable[[Path, Marks], Coroutine[Any, Any, None]]
STAGES = (
    "spawned",
    "initialize_answered",
    "session_created",
    "stop_reason_received",
    "answered",
    "stdin_closed",
    "tree_exited",
    "end",
)


async def baseline(cwd: Path, marks: Marks) -> None:
    """``bench_containment``'s lean baseline, with its marks."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        str(EXAMPLE_AGENT),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    marks["spawned"].append(time.monotonic())
    await _request(proc, 1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    marks["initialize_answered"].append(time.monotonic())
    session = await _request(proc, 2, "session/new", {"cwd": str(cwd), "mcpServers": []})
    prompt = [{"type": "text", "text": "say hello"}]
    await _request(proc, 3, "session/prompt", {"sessionId": session["result"]["sessionId"], "prompt": prompt})  # type: ignore[index]
    marks["answered"].append(time.monotonic())
    assert proc.stdin is not None
    proc.stdin.close()
    await proc.wait()
    marks["end"].append(time.monotonic())


def supervised(mode: ContainmentMode) -> Runner:
    registry = Registry()
    registry.register(Provider(example_agent_config(containment=mode)))

    async def one(cwd: Path, marks: Marks) -> None:
        async with registry.run("acp", SubagentRequest(task="say hello", parent_cwd=cwd)) as run:
            result = await run.result()
        marks["end"].append(time.monotonic())
        assert result.stop_reason == StopReason.COMPLETED, result
        assert run.quiescent
        for entry in run.audit.entries:
            marks[entry.event].append(entry.t)

    return one


def cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


async def batch(runner: Runner, n: int, cwd: Path) -> tuple[list[float], Marks]:
    """(wall, self CPU, children CPU, per run; cores busy; idle core time per run), marks."""
    marks: Marks = defaultdict(list)
    own, children = cpu()
    started = time.monotonic()
    marks["start"].append(started)
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(runner, cwd, marks)
    wall = time.monotonic() - started
    own_after, children_after = cpu()
    used = (own_after - own) + (children_after - children)
    cores = len(os.sched_getaffinity(0))
    figures = [wall / n, (own_after - own) / n, (children_after - children) / n, used / wall]
    return [*figures, (cores * wall - used) / n], marks


def timeline(marks: Marks) -> None:
    start = marks["start"][0]
    for stage in STAGES:
        if stage in marks:
            got = sorted(t - start for t in marks[stage])
            first, median, last = (1000 * x for x in (got[0], statistics.median(got), got[-1]))
            print(f"    {stage:22} first {first:7.0f}  median {median:7.0f}  last {last:7.0f} ms")


async def main(argv: list[str]) -> None:
    n = int(argv[1]) if len(argv) > 1 else 100
    rounds = int(argv[2]) if len(argv) > 2 else 2
    modes = [ContainmentMode(m) for m in argv[3:]]
    if not modes:
        modes = [ContainmentMode.PROCESS_TREE]
        if detect_containment().cgroup_base is not None:
            modes.insert(0, ContainmentMode.CGROUP)
    runners: dict[str, Runner] = {"baseline": baseline, **{m.value: supervised(m) for m in modes}}
    print(f"{n} runs at once, {rounds} rounds; load average {os.getloadavg()[0]:.2f}")
    last: dict[str, Marks] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for runner in runners.values():  # warm-up: imports, page cache, schema builds
            await runner(cwd, defaultdict(list))
        for round_ in range(rounds):
            for name, runner in runners.items():
                (wall, own, children, cores, idle), last[name] = await batch(runner, n, cwd)
                print(
                    f"  round {round_ + 1} {name:13} wall/run {wall * 1000:6.2f} ms  self {own * 1000:5.2f}"
                    f"  children {children * 1000:6.2f}  cores busy {cores:4.2f}  idle {idle * 1000:6.2f} ms"
                )
    for name, marks in last.items():
        print(f"  timeline of the last round, {name}:")
        timeline(marks)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    anyio.run(main, sys.argv)
