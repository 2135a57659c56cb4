"""What limits cost a run: every limit set against none, interleaved in one run
(run: python -m benchmarks.bench_limits).

Three contenders, all the built-in example agent in cgroup containment:

* ``none``: no limit (the run still gets its accounting leaves where the host has the
  memory and pids controllers, as every cgroup-mode run does);
* ``limits``: ``memory_max``, ``pids_max``, ``cpu_max``, ``timeout_ms`` and
  ``stall_timeout_ms`` all set (roomy values: no limit is reached);
* ``bare``: no limit and no accounting leaves (the v2 leaf alone, as before bounded runs;
  the benchmark switches them off in-process to show what accounting costs).

Per round, ``BENCH_RUNS`` (default 20) serial runs of each, alternating contender per run;
``BENCH_ROUNDS`` (default 5) rounds.  Printed: the median over rounds of the per-run
parent CPU (``time.process_time``, worker threads included) and of the wall from the
start of the run (spawn) to the child's ``initialize`` answer (the audit's
``initialize_answered``), with the ratios to ``none`` (goals: limits / none <= 1.10 each).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from supervisor import Registry, StopReason, SubagentRequest
from supervisor.process import ContainmentMode, _limits, detect_containment, limit_support
from supervisor.providers.acp import Provider, example_agent_config

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
RUNS = int(os.environ.get("BENCH_RUNS", "20"))
LIMITS = {
    "memory_max": "512M",
    "pids_max": 256,
    "cpu_max": 2,
    "timeout_ms": 600_000,
    "stall_timeout_ms": 120_000,
}


def registry(**limits: object) -> Registry:
    found = Registry()
    found.register(Provider(example_agent_config(containment=ContainmentMode.CGROUP, **limits)))
    return found


async def one(contender: Registry, cwd: Path, *, accounting: bool = True) -> tuple[float, float]:
    """(parent CPU, spawn-to-initialize wall) of one run."""
    _limits.ACCOUNTED = ("memory", "pids") if accounting else ()
    cpu = time.process_time()
    async with contender.run("acp", SubagentRequest(task="say hello", parent_cwd=cwd)) as run:
        result = await run.result()
    used = time.process_time() - cpu
    assert result.stop_reason == StopReason.COMPLETED, result
    assert run.quiescent
    initialized = next(entry for entry in run.audit.entries if entry.event == "initialize_answered")
    return used, initialized.t - run.audit.started_at  # the trail starts with the run


async def main() -> None:
    found = detect_containment()
    if found.cgroup_base is None:
        sys.exit(f"no cgroup containment here: {found.reason}")
    support = limit_support(found.cgroup_base)
    print(f"limits here: {', '.join(f'{c}: {h.label}' for c, h in support.where.items())}")
    print(f"rounds {ROUNDS} x {RUNS} serial runs of each, alternating; load {os.getloadavg()[0]:.2f}")
    contenders = {"none": registry(), "limits": registry(**LIMITS), "bare": registry()}
    per_round: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for name, contender in contenders.items():  # warm-up: imports, page cache, the keeper, the sweep
            await one(contender, cwd, accounting=name != "bare")
        for _ in range(ROUNDS):
            samples: dict[str, list[tuple[float, float]]] = {name: [] for name in contenders}
            for _ in range(RUNS):
                for name, contender in contenders.items():
                    samples[name].append(await one(contender, cwd, accounting=name != "bare"))
            for name, got in samples.items():
                per_round[name].append(
                    (statistics.median(s[0] for s in got), statistics.median(s[1] for s in got))
                )
    figures = {
        name: (statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds))
        for name, rounds in per_round.items()
    }
    base_cpu, base_init = figures["none"]
    print(f"\n  {'':8} {'CPU/run':>10} {'spawn->initialize':>18} {'CPU x':>7} {'init x':>7}")
    for name, (cpu, init) in figures.items():
        ratios = f"{cpu / base_cpu:7.2f} {init / base_init:7.2f}"
        print(f"  {name:8} {cpu * 1000:8.2f}ms {init * 1000:16.2f}ms {ratios}")
    print(f"\nload at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    anyio.run(main)
