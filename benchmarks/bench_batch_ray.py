"""``supervisor.batch`` on a local Ray cluster (127.0.0.1; the head takes no tasks).

Run: python -m benchmarks.bench_batch_ray

- per-task overhead: one example-agent task through Ray (submit to record back) minus the
  same task run locally by the same process, interleaved, medians of 30;
- throughput: 16 tasks whose child sleeps 1 s before answering, on 1 worker node, then
  on 2 (a node added to the same cluster): wall(1 node) / wall(2 nodes).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from supervisor import BatchRecord, Registry, StderrMode, batch
from supervisor.providers.acp import Config, Provider

ROOT = Path(__file__).resolve().parent.parent
HELPER = ROOT / "tests" / "ray_cluster.py"
ACP_CHILD = ROOT / "tests" / "children" / "acp_child.py"
TASKS = 16


def sleeper_registry() -> Registry:
    env: dict[str, str | None] = {"ACP_CHILD_SLOW_MS": "1000", "ACP_CHILD_TEXT": "slept well"}
    config = Config(command=sys.executable, args=["-I", str(ACP_CHILD)], env=env, stderr=StderrMode.LOG)
    registry = Registry()
    registry.register(Provider(config, name="sleeper"))
    return registry


async def timed(items: list[dict[str, str]], **options: Any) -> tuple[float, list[BatchRecord]]:
    started = time.perf_counter()
    found = [r async for r in batch(items, **options)]
    wall = time.perf_counter() - started
    records = [r for r in found if isinstance(r, BatchRecord)]
    assert len(records) == len(items)
    assert all(r.completed for r in records)
    return wall, records


async def measure(address: str, helper: subprocess.Popen[str]) -> None:
    local: list[float] = []
    remote: list[float] = []
    await timed([{"id": "warm", "task": "x"}], ray=address)  # connect, first worker
    for i in range(30):
        wall, _ = await timed([{"id": f"l{i}", "task": "x"}], concurrency=1)
        local.append(wall)
        wall, _ = await timed([{"id": f"r{i}", "task": "x"}], ray=address)
        remote.append(wall)
    lm, rm = statistics.median(local), statistics.median(remote)
    print(f"one example-agent task: local median {lm * 1000:.1f} ms, Ray median {rm * 1000:.1f} ms")
    print(f"per-task overhead of Ray (median difference): {(rm - lm) * 1000:.1f} ms")

    registry = sleeper_registry()
    items = [{"id": f"s{i}", "task": "x"} for i in range(TASKS)]
    one, records = await timed(items, registry=registry, ray=address)
    nodes_one = {r.ray_node for r in records}
    assert helper.stdin is not None
    assert helper.stdout is not None
    helper.stdin.write("add\n")
    helper.stdin.flush()
    assert helper.stdout.readline() == "added\n"
    await timed([{"id": f"w{i}", "task": "x"} for i in range(4)], ray=address)  # warm the new node's worker
    items = [{"id": f"t{i}", "task": "x"} for i in range(TASKS)]
    two, records = await timed(items, registry=registry, ray=address)
    nodes_two = {r.ray_node for r in records}
    split = sorted(sum(1 for r in records if r.ray_node == node) for node in nodes_two)
    print(f"{TASKS} one-second tasks: 1 worker node {one:.2f} s ({len(nodes_one)} node used)")
    used = f"{len(nodes_two)} nodes used, tasks per node {split}"
    print(f"{TASKS} one-second tasks: 2 worker nodes {two:.2f} s ({used})")
    print(f"throughput 2 nodes / 1 node = {one / two:.2f}x")


def main() -> None:
    base = tempfile.mkdtemp(prefix="sbb")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_TMPDIR"] = base
    helper = subprocess.Popen(
        [sys.executable, str(HELPER), base, "1", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert helper.stdout is not None
        address = json.loads(helper.stdout.readline())["address"]
        anyio.run(measure, address, helper, backend="asyncio")
    finally:
        import ray

        ray.shutdown()
        assert helper.stdin is not None
        helper.stdin.close()
        helper.wait(timeout=120)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
