"""ACP start-to-publish against the raw SDK doing the same handshake, interleaved in one run,
and the example agent's own start (run: python -m benchmarks.bench_acp).

The provider's start is spawn + initialize + session/new through ``Registry.start``;
the baseline spawns the same child with ``asyncio.create_subprocess_exec`` and does
the same two requests with ``acp.connect_to_agent`` directly (no supervision).
Each round measures the raw SDK and the provider in each containment mode available
(``cgroup``, ``process-tree``), one after another; ``BENCH_CONTAINMENT`` picks one mode.
Goals: provider / raw SDK <= 1.05 in ``process-tree`` mode, <= 1.25 in ``cgroup``
mode (ratio of medians).  ``BENCH_PAIRS`` rounds (default 30).
``BENCH_CHILD=codex-acp`` measures the real codex-acp agent (``npm ci`` in tests/)
against the tests' mock model server instead of the built-in example agent.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import acp
import anyio

from benchmarks._stats import summary
from supervisor import Registry, StderrMode, SubagentRequest
from supervisor.process import ContainmentMode, detect_containment
from supervisor.providers.acp import EXAMPLE_AGENT, Config, Provider, example_agent_config

ARGV = [sys.executable, "-I", str(EXAMPLE_AGENT)]
ENV: dict[str, str] | None = None
GOALS = {ContainmentMode.PROCESS_TREE: 1.05, ContainmentMode.CGROUP: 1.25}


def modes() -> list[ContainmentMode]:
    """The containment modes to measure: ``BENCH_CONTAINMENT``, else every one available here."""
    chosen = os.environ.get("BENCH_CONTAINMENT")
    if chosen:
        return [ContainmentMode(chosen)]
    found = [ContainmentMode.PROCESS_TREE]
    if detect_containment().cgroup_base is not None:
        found.insert(0, ContainmentMode.CGROUP)
    return found


class _Quiet:
    async def session_update(self, *args: object, **kwargs: object) -> None:
        return None

    async def request_permission(self, *args: object, **kwargs: object) -> object:
        raise NotImplementedError


async def raw_sdk(cwd: Path) -> float:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *ARGV,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=None if ENV is None else asyncio.subprocess.DEVNULL,
        start_new_session=True,
        env=None if ENV is None else {**os.environ, **ENV},
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    conn = acp.connect_to_agent(_Quiet(), proc.stdin, proc.stdout)  # type: ignore[arg-type]
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
    await conn.new_session(cwd=str(cwd), mcp_servers=[])
    elapsed = time.perf_counter() - started
    proc.stdin.close()
    if ENV is not None:  # a real agent does not exit on EOF
        proc.terminate()
    await proc.wait()
    await conn.close()
    return elapsed


async def provider(registry: Registry, cwd: Path) -> float:
    async with anyio.create_task_group() as tg:
        started = time.perf_counter()
        run = await registry.start("acp", SubagentRequest(task="x", parent_cwd=cwd), task_group=tg)
        elapsed = time.perf_counter() - started
        run.cancel()
        await run.dispose()
    return elapsed


async def spawn_to_initialize(cwd: Path) -> float:
    """The example agent's own start: spawn -> initialize answered, on a bare pipe."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *ARGV, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, start_new_session=True
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n')
    await proc.stdout.readline()
    elapsed = time.perf_counter() - started
    proc.stdin.close()
    await proc.wait()
    return elapsed


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main() -> None:
    global ARGV, ENV
    pairs = int(os.environ.get("BENCH_PAIRS", "30"))
    cwd = Path.cwd()
    registries: dict[ContainmentMode, Registry] = {}
    if os.environ.get("BENCH_CHILD") == "codex-acp":
        from tests.mockmodel import MockModelServer
        from tests.support import peers

        server = MockModelServer()
        launch = peers.codex_acp_launch(server)
        ARGV, ENV, cwd = launch.argv, launch.env, launch.cwd
        for mode in modes():
            config = Config(
                command=ARGV[0],
                args=ARGV[1:],
                env=dict(ENV),
                dispose_eof_grace_ms=50,
                stderr=StderrMode.DISCARD,
                containment=mode,
            )
            registries[mode] = Registry()
            registries[mode].register(Provider(config))
    else:
        for mode in modes():
            registries[mode] = Registry()
            registries[mode].register(
                Provider(example_agent_config(dispose_eof_grace_ms=2000, containment=mode))
            )
    print(f"load average before: {load()}; {pairs} rounds")
    for registry in registries.values():  # warm every path (imports, page cache)
        await provider(registry, cwd)
    await raw_sdk(cwd)
    theirs: list[float] = []
    ours: dict[ContainmentMode, list[float]] = {mode: [] for mode in registries}
    for _ in range(pairs):
        theirs.append(await raw_sdk(cwd))
        for mode, registry in registries.items():
            ours[mode].append(await provider(registry, cwd))
    print(summary("raw SDK: spawn + initialize + session/new", theirs))
    for mode, values in ours.items():
        print(summary(f"provider ({mode.value}): start-to-publish", values))
    for mode, values in ours.items():
        ratio = statistics.median(values) / statistics.median(theirs)
        verdict = "met" if ratio <= GOALS[mode] else "NOT met"
        name = f"ratio of medians, {mode.value} / raw SDK"
        print(f"{name:<48} {ratio:.3f} (goal <= {GOALS[mode]}: {verdict})")
    if ENV is None:
        starts = [await spawn_to_initialize(cwd) for _ in range(pairs)]
        print(summary("example agent: spawn -> initialize answered", starts))
    print(f"load average after: {load()}")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
