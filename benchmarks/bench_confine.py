"""What confinement and the root child cost a spawn.  Run: ``python -m benchmarks.bench_confine``.

Spawn to ``initialize``: from :meth:`ManagedProcess.spawn` to the child's answer to an
ACP ``initialize`` request on stdout, through the real process layer (cgroup leaf,
limits, shim), interleaved ``BENCH_ROUNDS`` times (default 20), medians and ratios
against the plain spawn of the same round.  Also the CPU the child used from spawn to
its exit (``getrusage`` of the reaped children: the entry chain or the spawn shim, then
the program), steadier than the wall time on a loaded machine.  Two children:

- ``sh``: ``read``, then ``echo`` an answer: the spawn path's own cost, nothing else;
- ``example``: the built-in example ACP agent (stdlib Python), what a real start adds.

Variants:

- ``plain``: the spawn path of a non-root supervisor (``/bin/sh`` entry shim, ``unshare
  --cgroup`` where it may, ``setpriv --pdeathsig``); measured here by treating this
  root process as non-root for the spawn (a benchmark-only switch);
- ``root``: a root supervisor's child: the Python spawn shim (``-I -S``) enters a group
  below the leaf, makes its cgroup and mount namespaces and cgroup view, makes ``/sys``
  and ``/proc/sys`` read-only, drops the bounding set;
- ``root+confine``: the same with the Landlock ruleset (``confine = true``).

On a non-root machine only ``plain`` and ``confine`` (Landlock alone) are measured.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from machines import TeardownLadder
from supervisor.process import (
    ContainmentMode,
    ManagedProcess,
    SpawnSpec,
    StderrMode,
    _spawn_command,
    child_environment,
    containment_for,
)
from supervisor.process._confine import Confinement, is_root, landlock_support
from supervisor.providers.acp import EXAMPLE_AGENT

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "20"))
REPO = Path(__file__).resolve().parent.parent
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
CHILDREN = {
    "sh": ["/bin/sh", "-c", 'read line; echo \'{"jsonrpc":"2.0","id":0,"result":{}}\'; read rest'],
    "example": [sys.executable, "-I", str(EXAMPLE_AGENT)],
}


def variants() -> dict[str, tuple[bool, bool]]:
    """name -> (root hardening, confine)."""
    found = {"plain": (False, False)}
    if is_root():
        found["root"] = (True, False)
    if landlock_support().enforceable:
        found["root+confine" if is_root() else "confine"] = (is_root(), True)
    return found


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def spawn_to_initialize(
    argv: list[str], cwd: Path, *, hardened: bool, confine: bool
) -> tuple[float, float]:
    """(spawn to the answer, the child's CPU) in seconds."""
    tag = os.urandom(8).hex()
    spec = SpawnSpec(
        argv=argv,
        cwd=cwd,
        env=child_environment({}, run_tag=tag),
        run_tag=tag,
        stderr=StderrMode.DISCARD,
        containment=containment_for(ContainmentMode.AUTO),
        confinement=Confinement(readable=(REPO,)) if confine else None,
    )
    real: Callable[[], bool] = getattr(_spawn_command, "is_root")  # noqa: B009
    setattr(_spawn_command, "is_root", real if hardened else lambda: False)  # noqa: B010
    try:
        async with anyio.create_task_group() as tg:
            cpu = children_cpu()
            started = time.perf_counter()
            proc = await ManagedProcess.spawn(spec, tg)
            proc.stdin.write(INITIALIZE.encode() + b"\n")
            line = await proc.stdout.readline()
            elapsed = time.perf_counter() - started
            assert b'"result"' in line, line
            report = await proc.teardown(TeardownLadder(), eof_grace=5.0, term_grace=2.0)
            assert report.quiescent
            cpu = children_cpu() - cpu  # the child is reaped: its CPU is counted
            tg.cancel_scope.cancel()
    finally:
        setattr(_spawn_command, "is_root", real)  # noqa: B010
    return elapsed, cpu


async def main() -> None:
    print(f"load average before: {os.getloadavg()}", flush=True)
    print(f"Landlock: {landlock_support().reason}; root: {is_root()}; rounds: {ROUNDS}")
    results: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as workspace:
        cwd = Path(workspace)
        for argv in CHILDREN.values():  # warm every path once (bytecode, the page cache)
            for hardened, confine in variants().values():
                await spawn_to_initialize(argv, cwd, hardened=hardened, confine=confine)
        for _ in range(ROUNDS):
            for child, argv in CHILDREN.items():
                for name, (hardened, confine) in variants().items():
                    elapsed, cpu = await spawn_to_initialize(argv, cwd, hardened=hardened, confine=confine)
                    results.setdefault((child, name), []).append(elapsed)
                    cpus.setdefault((child, name), []).append(cpu)
    for child in CHILDREN:
        base = statistics.median(results[(child, "plain")])
        for name in variants():
            values = results[(child, name)]
            median = statistics.median(values)
            print(
                f"{child:<8} {name:<13} median {median * 1000:7.2f} ms  "
                f"(+{(median - base) * 1000:6.2f} ms, x{median / base:4.2f} of plain); "
                f"child CPU median {statistics.median(cpus[(child, name)]) * 1000:6.2f} ms"
            )
    print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    anyio.run(main)
