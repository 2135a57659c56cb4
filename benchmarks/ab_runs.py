"""Parent CPU per run of two source trees, interleaved: what one change saves.

Run: ``python -m benchmarks.ab_runs BEFORE AFTER [MODE] [RUNS] [ROUNDS] [N]``, where BEFORE
and AFTER are checkouts of the repository (``git archive <commit> | tar -x -C DIR``), MODE is
``cgroup`` or ``process-tree`` (default: the best available), RUNS the runs per sample
(default 20), ROUNDS the samples per tree (default 4), N the runs at once (default 1).

Each sample is a fresh interpreter of this environment with the tree first on its path. It
warms up, then measures the lean baseline of ``bench_containment`` and the supervisor on the
example agent three times each, interleaved, and reports the medians and their ratio: the
ratio, taken within one process a few seconds apart, is what survives a loaded machine. The
trees alternate (ABBA), so a load that changes during the run weighs on both alike.

Two figures per sample: parent CPU per run (``profile_runs.runs``: the CPU over RUNS, even
when N is larger and one batch makes N runs: the ratio holds either way), and wall time per
run (the wall of the sample's batches divided by the runs they really made), each against
the baseline measured beside it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

SAMPLE = """
import statistics, sys, tempfile, time
from pathlib import Path
import anyio
from benchmarks.bench_containment import baseline_run
from benchmarks.profile_runs import runs
from supervisor.process import ContainmentMode

mode, count, concurrent = ContainmentMode(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

async def base(cwd, n):
    started = time.process_time()
    for _ in range(0, n, concurrent):
        async with anyio.create_task_group() as tg:
            for _ in range(concurrent):
                tg.start_soon(baseline_run, cwd)
    return (time.process_time() - started) / n

with tempfile.TemporaryDirectory() as tmp:
    cwd = Path(tmp)
    anyio.run(runs, 5, mode, cwd, backend="asyncio")
    anyio.run(base, cwd, 3)
    ours, lean, ours_wall, lean_wall = [], [], [], []
    done = -(-count // concurrent) * concurrent  # the runs a sample really makes: whole batches
    for _ in range(3):
        started = time.perf_counter()
        lean.append(anyio.run(base, cwd, count))
        lean_wall.append((time.perf_counter() - started) / done)
        started = time.perf_counter()
        ours.append(anyio.run(runs, count, mode, cwd, concurrent, backend="asyncio"))
        ours_wall.append((time.perf_counter() - started) / done)
    print(*(statistics.median(s) for s in (ours, lean, ours_wall, lean_wall)))
"""


def sample(tree: str, mode: str, runs: str, concurrent: str) -> tuple[float, float, float, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    argv = [sys.executable, "-c", SAMPLE, mode, runs, concurrent]
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"a sample in {tree} failed:\n{done.stderr[:3000]}")
    ours, lean, ours_wall, lean_wall = map(float, done.stdout.split())
    return ours, lean, ours_wall, lean_wall


def main(argv: list[str]) -> None:
    from supervisor.process import detect_containment

    if len(argv) < 3:
        raise SystemExit(__doc__)
    trees = {"before": argv[1], "after": argv[2]}
    mode = argv[3] if len(argv) > 3 else detect_containment().mode.value
    runs = argv[4] if len(argv) > 4 else "20"
    rounds = int(argv[5]) if len(argv) > 5 else 4
    concurrent = argv[6] if len(argv) > 6 else "1"
    print(f"{mode}, {runs} runs per sample, {concurrent} at once; load average {load()}")
    got: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in trees}
    for round_ in range(rounds):
        order = list(trees.items()) if round_ % 2 == 0 else list(reversed(trees.items()))
        for name, tree in order:
            ours, lean, ours_wall, lean_wall = sample(tree, mode, runs, concurrent)
            got[name].append((ours, lean, ours_wall, lean_wall))
            line = f"  {name:6} {ours * 1000:6.2f} ms / baseline {lean * 1000:5.2f} ms = {ours / lean:4.2f}x"
            wall_x = ours_wall / lean_wall
            line += f"; wall {ours_wall * 1000:6.2f} ms / {lean_wall * 1000:5.2f} ms = {wall_x:4.2f}x"
            print(line, flush=True)
    for name, samples in got.items():
        cpu = statistics.median(s[0] for s in samples) * 1000
        ratio = statistics.median(s[0] / s[1] for s in samples)
        wall = statistics.median(s[2] for s in samples) * 1000
        wall_ratio = statistics.median(s[2] / s[3] for s in samples)
        print(f"{name:6} median {cpu:6.2f} ms per run, {ratio:4.2f}x the baseline", end="")
        print(f"; wall {wall:6.2f} ms per run, {wall_ratio:4.2f}x the baseline's")
    print(f"load average after: {load()}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main(sys.argv)
