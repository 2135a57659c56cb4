"""K follow-up tasks through the front-ends: as turns of one conversation against as K cold
starts, interleaved in one run (run: python -m benchmarks.bench_fronts_turns).

Each round times, wall clock, the real ``subagents`` executable with the built-in example agent:

* ``chat``: one ``subagents chat`` reading K lines (one child, K turns);
* ``run``: K ``subagents run`` invocations one after the other (K children);
* ``batch turns``: one ``subagents batch`` of one item with the K tasks as ``task`` + ``turns``;
* ``batch one-shot``: one ``subagents batch --concurrency 1`` of K one-shot items.

``BENCH_K`` (default 10) tasks, ``BENCH_ROUNDS`` (default 5) rounds.  The ratios are of
medians measured in the same run; the load average is printed before and after.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._stats import summary

SUBAGENTS = [sys.executable, "-m", "supervisor.cli"]


def timed(argv: list[str], cwd: Path, stdin: str | None = None) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr
    return elapsed


def main() -> None:
    k = int(os.environ.get("BENCH_K", "10"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "5"))
    tasks = [f"task number {i}" for i in range(k)]
    cwd = Path(tempfile.mkdtemp(prefix="bench-fronts-"))
    turns_file = cwd / "turns.jsonl"
    turns_file.write_text(json.dumps({"id": "c", "task": tasks[0], "turns": tasks[1:]}) + "\n")
    shots_file = cwd / "shots.jsonl"
    shots_file.write_text("".join(json.dumps({"id": f"t{i}", "task": t}) + "\n" for i, t in enumerate(tasks)))
    lines = "".join(t + "\n" for t in tasks)
    results: dict[str, list[float]] = {"chat": [], "run": [], "batch turns": [], "batch one-shot": []}
    load_before = os.getloadavg()
    timed([*SUBAGENTS, "chat"], cwd, lines)  # warm the page cache and the imports
    for _ in range(rounds):
        results["chat"].append(timed([*SUBAGENTS, "chat"], cwd, lines))
        results["run"].append(sum(timed([*SUBAGENTS, "run", t], cwd) for t in tasks))
        results["batch turns"].append(timed([*SUBAGENTS, "batch", str(turns_file)], cwd))
        results["batch one-shot"].append(
            timed([*SUBAGENTS, "batch", "--concurrency", "1", str(shots_file)], cwd)
        )
    load_after = os.getloadavg()
    print(f"example agent, {k} tasks, {rounds} interleaved rounds (wall clock of the whole command)")
    for name, values in results.items():
        print(summary(name, values))
    medians = {name: statistics.median(values) for name, values in results.items()}
    print(f"{'ratio of medians (chat / K runs)':<48} {medians['chat'] / medians['run']:.3f}")
    batch_ratio = medians["batch turns"] / medians["batch one-shot"]
    print(f"{'ratio of medians (batch turns / one-shot)':<48} {batch_ratio:.3f}")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")


if __name__ == "__main__":
    main()
