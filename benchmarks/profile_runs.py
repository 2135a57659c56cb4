"""Where the parent's CPU per run goes: cProfile over example-agent runs.

Run: ``python -m benchmarks.profile_runs [RUNS] [cgroup|process-tree] [N]`` (default 150
runs, the best containment available, one at a time; ``N`` runs at once in batches).
Prints the functions by own time and by cumulative time (CPU of the event loop's thread:
the profiler's clock is ``time.thread_time``), and the parent CPU per run with the
profiler off, measured over the same number of runs beforehand (the profiler inflates
code made of many small Python calls, like the chart engine, the most).  ``PROFILE_OUT=file``
also writes the raw profile there (``python -m pstats file``).
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import anyio

from supervisor import Registry, StopReason, SubagentRequest
from supervisor.process import ContainmentMode
from supervisor.providers.acp import Provider, example_agent_config


async def runs(count: int, mode: ContainmentMode, cwd: Path, concurrent: int = 1) -> float:
    registry = Registry()
    registry.register(Provider(example_agent_config(containment=mode)))

    async def one() -> None:
        async with registry.run("acp", SubagentRequest(task="say hello", parent_cwd=cwd)) as run:
            result = await run.result()
        assert result.stop_reason == StopReason.COMPLETED, result

    started = time.process_time()
    for _ in range(0, count, concurrent):
        async with anyio.create_task_group() as tg:
            for _ in range(concurrent):
                tg.start_soon(one)
    return (time.process_time() - started) / count


def main(argv: list[str]) -> None:
    count = int(argv[1]) if len(argv) > 1 else 150
    mode = ContainmentMode(argv[2]) if len(argv) > 2 else ContainmentMode.AUTO
    concurrent = int(argv[3]) if len(argv) > 3 else 1
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        anyio.run(runs, 5, mode, cwd, backend="asyncio")  # warm-up: imports, schema builds
        plain = anyio.run(runs, count, mode, cwd, concurrent, backend="asyncio")
        profile = cProfile.Profile(time.thread_time)  # CPU of the loop thread only
        profile.enable()
        anyio.run(runs, count, mode, cwd, concurrent, backend="asyncio")
        profile.disable()
    if os.environ.get("PROFILE_OUT"):
        profile.dump_stats(os.environ["PROFILE_OUT"])  # for pstats or snakeviz afterwards
    print(f"{count} runs ({mode.value}, {concurrent} at once)")
    print(f"parent CPU per run without the profiler: {plain * 1000:.2f} ms")
    by_package(pstats.Stats(profile))
    stats = pstats.Stats(profile).strip_dirs()
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(60)


PACKAGES = (
    ("site-packages/statemachine/", "python-statemachine"),
    ("site-packages/acp/", "the ACP SDK"),
    ("site-packages/pydantic", "pydantic"),
    ("site-packages/anyio/", "anyio"),
    ("/asyncio/", "asyncio"),
    ("/machines/", "ours (machines, supervisor)"),
    ("/supervisor/", "ours (machines, supervisor)"),
)


def by_package(stats: pstats.Stats) -> None:
    """Own time of the loop's thread, grouped by where the code lives (built-ins: 'other')."""
    shares: dict[str, float] = {}
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]] = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, _name), (_cc, _nc, own, _cum, _callers) in raw.items():
        group = next((label for key, label in PACKAGES if key in filename), "other (stdlib, built-ins)")
        shares[group] = shares.get(group, 0.0) + own
    total = sum(shares.values())
    print("own time of the loop's thread, by package:")
    for group, own in sorted(shares.items(), key=lambda item: -item[1]):
        print(f"  {own / total:6.1%}  {group}")


if __name__ == "__main__":
    main(sys.argv)
