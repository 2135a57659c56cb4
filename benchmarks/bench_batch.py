"""``subagents batch`` locally: 1,000 example-agent tasks at ``--concurrency`` = CPU count.

Run: python -m benchmarks.bench_batch [N]

- ``ideal`` = (sum of single-run walls) / concurrency, a single-run wall being the mean
  ``duration_s`` of runs made one at a time (``--concurrency 1``, 100 runs);
- ``batch / ideal``: the batch's wall time (the CLI process, start to exit) over that;
- the same against the batch's own records (their ``duration_s`` summed), which removes
  the runs' slowdown from sharing the CPUs and leaves the batch's own scheduling;
- the CLI's RSS, sampled every 0.25 s while the batch runs.
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
from typing import Any

import psutil


def write_items(path: Path, n: int) -> None:
    path.write_text("".join(json.dumps({"id": f"t{i}", "task": f"task {i}"}) + "\n" for i in range(n)))


def run_batch(items: Path, out: Path, concurrency: int) -> tuple[float, list[float], list[dict[str, Any]]]:
    argv = [sys.executable, "-m", "supervisor._cli", "batch", str(items), "--out", str(out)]
    argv += ["--concurrency", str(concurrency)]
    started = time.perf_counter()
    rss: list[float] = []
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        watched = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                rss.append(watched.memory_info().rss / 2**20)
            except psutil.Error:
                break
            time.sleep(0.25)
    wall = time.perf_counter() - started
    assert proc.returncode == 0, proc.returncode
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return wall, rss, records


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    concurrency = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        write_items(base / "alone.jsonl", 100)
        _wall, _rss, alone = run_batch(base / "alone.jsonl", base / "alone.out", 1)
        single = statistics.mean(float(r["duration_s"]) for r in alone)
        write_items(base / "batch.jsonl", n)
        wall, rss, records = run_batch(base / "batch.jsonl", base / "batch.out", concurrency)
    assert len(records) == n
    assert all(r["stop_reason"] == "completed" for r in records)
    ideal = n * single / concurrency
    own = sum(float(r["duration_s"]) for r in records) / concurrency
    tenth = max(1, len(rss) // 10)
    print(f"{n} tasks, concurrency {concurrency}")
    print(f"single run alone (mean of 100): {single * 1000:.1f} ms")
    print(f"batch wall {wall:.2f} s; ideal {ideal:.2f} s; batch / ideal = {wall / ideal:.3f}")
    print(f"against the batch's own run walls: {own:.2f} s; batch / that = {wall / own:.3f}")
    print(
        f"CLI RSS MiB: first tenth median {statistics.median(rss[:tenth]):.1f}, "
        f"last tenth median {statistics.median(rss[-tenth:]):.1f}, max {max(rss):.1f} ({len(rss)} samples)"
    )


if __name__ == "__main__":
    main()
