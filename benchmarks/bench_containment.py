"""Per-run cost of the supervisor against a lean baseline, in both containment modes.

Run: ``python -m benchmarks.bench_containment``.  ``BENCH_N`` (default ``1,10,100,200,400``)
picks the concurrency levels, ``BENCH_ROUNDS`` (default 3) how often each is repeated,
``BENCH_SERIAL`` (default 20) how many runs one after another make the N = 1 figure,
``BENCH_FOREIGN`` (default 1000) how many idle foreign processes the last part starts.

The baseline is what a careful hand-written harness does: a plain asyncio subprocess
(new session), the same NDJSON ACP handshake with the example agent (initialize,
session/new, one prompt), close stdin, wait.  No SDK, no containment, no ladder.

Each level runs the baseline and the supervisor in each mode interleaved, round after
round, and prints per-run parent CPU (``time.process_time``, worker threads included),
the children's CPU (``getrusage(RUSAGE_CHILDREN)``: the spawn shim, where there is one, and the
agent), and wall time (of the whole batch, divided by N), the ratios to the baseline, and the
spurious escalations: runs whose audit shows ``eof_grace_expired`` although the
example agent exits at stdin EOF at once.

Goals, printed with a verdict at the end: parent CPU per run <= 3x the baseline
at N = 1 and N = 100, wall per run <= 1.25x at N = 100.  The machine's load average is
printed before and after: ratios taken while other work loads the cores are noisy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio

from supervisor import Registry, StopReason, SubagentRequest
from supervisor.process import ContainmentMode, detect_containment, set_subreaper, subreaper_enabled
from supervisor.providers.acp import EXAMPLE_AGENT, Provider, example_agent_config


def levels() -> list[int]:
    return [int(n) for n in os.environ.get("BENCH_N", "1,10,100,200,400").split(",") if n.strip()]


ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SERIAL = int(os.environ.get("BENCH_SERIAL", "20"))
FOREIGN = int(os.environ.get("BENCH_FOREIGN", "1000"))


# -- the lean baseline ---------------------------------------------------------------------


async def _request(
    proc: asyncio.subprocess.Process, rid: int, method: str, params: dict[str, object]
) -> dict[str, object]:
    assert proc.stdin is not None
    assert proc.stdout is not None
    frame = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    proc.stdin.write(json.dumps(frame).encode() + b"\n")
    await proc.stdin.drain()
    while True:
        line = await proc.stdout.readline()
        if not line:
            raise RuntimeError("agent closed stdout")
        message = json.loads(line)
        if message.get("id") == rid and "method" not in message:
            return message  # type: ignore[no-any-return]


async def baseline_run(cwd: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        str(EXAMPLE_AGENT),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    await _request(proc, 1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    session = await _request(proc, 2, "session/new", {"cwd": str(cwd), "mcpServers": []})
    session_id = session["result"]["sessionId"]  # type: ignore[index]
    prompt = [{"type": "text", "text": "say hello"}]
    await _request(proc, 3, "session/prompt", {"sessionId": session_id, "prompt": prompt})
    assert proc.stdin is not None
    proc.stdin.close()
    await proc.wait()


# -- the supervisor --------------------------------------------------------------------------


def supervisor_run(
    mode: ContainmentMode, escalations: list[int]
) -> Callable[[Path], Coroutine[Any, Any, None]]:
    registry = Registry()
    registry.register(Provider(example_agent_config(containment=mode)))

    async def one(cwd: Path) -> None:
        async with registry.run("acp", SubagentRequest(task="say hello", parent_cwd=cwd)) as run:
            result = await run.result()
        assert result.stop_reason == StopReason.COMPLETED, result
        assert run.quiescent
        assert run.containment == mode.value
        if any(entry.event == "eof_grace_expired" for entry in run.audit.entries):
            escalations[0] += 1

    return one


# -- measuring ---------------------------------------------------------------------------


Figures = tuple[float, float, int, float]  # parent CPU, wall, escalations, children's CPU (per run)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def batch(
    run: Callable[[Path], Coroutine[Any, Any, None]], n: int, cwd: Path
) -> tuple[float, float, float]:
    """(parent CPU, wall, children's CPU) per run of ``n`` concurrent runs (``n`` = 1: serial runs)."""
    count = SERIAL if n == 1 else n
    cpu, wall, children = time.process_time(), time.perf_counter(), _children_cpu()
    if n == 1:
        for _ in range(count):
            await run(cwd)
    else:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(run, cwd)
    return (
        (time.process_time() - cpu) / count,
        (time.perf_counter() - wall) / count,
        (_children_cpu() - children) / count,
    )


async def measure(n: int, cwd: Path, modes: list[ContainmentMode]) -> dict[str, Figures]:
    """Median per-run CPU and wall per contender, interleaved over the rounds; escalations summed."""
    samples: dict[str, list[tuple[float, float, float]]] = {"baseline": [], **{m.value: [] for m in modes}}
    escalations = {m.value: [0] for m in modes}
    runners = {"baseline": baseline_run, **{m.value: supervisor_run(m, escalations[m.value]) for m in modes}}
    for runner in runners.values():  # warm-up: imports, page cache, schema builds
        await runner(cwd)
    for e in escalations.values():
        e[0] = 0
    for _ in range(ROUNDS):
        for name, runner in runners.items():
            samples[name].append(await batch(runner, n, cwd))
    return {
        name: (
            statistics.median(s[0] for s in got),
            statistics.median(s[1] for s in got),
            escalations[name][0] if name in escalations else 0,
            statistics.median(s[2] for s in got),
        )
        for name, got in samples.items()
    }


def report(title: str, figures: dict[str, Figures]) -> None:
    base_cpu, base_wall, _, _ = figures["baseline"]
    print(f"\n{title}")
    header = f"{'CPU/run':>10} {'wall/run':>10} {'CPU x':>7} {'wall x':>7} {'escalations':>12}"
    print(f"  {'':14} {header} {'child CPU/run':>14}")
    for name, (cpu, wall, escalated, children) in figures.items():
        print(
            f"  {name:14} {cpu * 1000:8.2f}ms {wall * 1000:8.2f}ms "
            f"{cpu / base_cpu:7.2f} {wall / base_wall:7.2f} {escalated:12d} {children * 1000:12.2f}ms"
        )


CPU_GOAL, WALL_GOAL = 3.0, 1.25


def verdicts(figures: dict[int, dict[str, Figures]]) -> None:
    """The goals (in the module's docstring) against the levels measured."""
    print("\ngoals:")
    for n, wall_too in ((1, False), (100, True)):
        if n not in figures:
            continue
        base_cpu, base_wall, _, _ = figures[n]["baseline"]
        for name, (cpu, wall, _, _) in figures[n].items():
            if name == "baseline":
                continue
            cpu_x = cpu / base_cpu
            line = f"  N = {n:<4} {name:14} CPU {cpu_x:5.2f}x (<= {CPU_GOAL}: {_met(cpu_x <= CPU_GOAL)})"
            if wall_too:
                wall_x = wall / base_wall
                line += f"; wall {wall_x:5.2f}x (<= {WALL_GOAL}: {_met(wall_x <= WALL_GOAL)})"
            print(line)


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def foreign_processes(count: int) -> list[int]:
    """``count`` idle ``sleep``s that are no descendants of this process (children of PID 1)."""
    was = subreaper_enabled()
    set_subreaper(False)  # let them be orphaned to PID 1, not to us
    try:
        script = f"i=0; while [ $i -lt {count} ]; do sleep 3600 >/dev/null 2>&1 & echo $!; i=$((i+1)); done"
        shell = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    finally:
        set_subreaper(was)
    return [int(pid) for pid in shell.stdout.split()]


async def main() -> None:
    found = detect_containment()
    modes = [ContainmentMode.PROCESS_TREE]
    if found.cgroup_base is not None:
        modes.insert(0, ContainmentMode.CGROUP)
    print(f"containment available: {found.mode.value} ({found.reason}); rounds {ROUNDS}, serial {SERIAL}")
    print(f"load average before: {load()}")
    by_level: dict[int, dict[str, Figures]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        quiet: dict[str, Figures] = {}
        for n in levels():
            figures = await measure(n, cwd, modes)
            by_level[n] = figures
            if n == 1:
                quiet = figures
            report(f"N = {n}", figures)
        if FOREIGN and quiet:
            procs = foreign_processes(FOREIGN)
            try:
                figures = await measure(1, cwd, modes)
            finally:
                for pid in procs:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            report(f"N = 1 with {FOREIGN} idle foreign processes", figures)
            print("  per-run CPU with / without the foreign processes:")
            for name in figures:
                print(f"    {name:14} {figures[name][0] / quiet[name][0]:5.2f}x")
    verdicts(by_level)
    print(f"load average after: {load()}")


if __name__ == "__main__":
    anyio.run(main)
