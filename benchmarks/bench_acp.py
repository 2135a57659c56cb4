"""ACP start-to-publish against the raw SDK doing the same handshake, interleaved in one run,
and the example agent's own start (run: python -m benchmarks.bench_acp).

The provider's start is spawn + initialize + session/new through ``Registry.start``;
the baseline spawns the same child with ``asyncio.create_subprocess_exec`` and does
the same two requests with ``acp.connect_to_agent`` directly (no supervision).
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
from supervisor.process import ContainmentMode
from supervisor.providers.acp import EXAMPLE_AGENT, Config, Provider, example_agent_config

ARGV = [sys.executable, "-I", str(EXAMPLE_AGENT)]
ENV: dict[str, str] | None = None
# BENCH_CONTAINMENT=process-tree measures the fallback (default: auto, i.e. cgroup where available).
CONTAINMENT = ContainmentMode(os.environ.get("BENCH_CONTAINMENT", "auto"))


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


async def main() -> None:
    global ARGV, ENV
    pairs = int(os.environ.get("BENCH_PAIRS", "30"))
    cwd = Path.cwd()
    registry = Registry()
    if os.environ.get("BENCH_CHILD") == "codex-acp":
        from tests.mockmodel import MockModelServer
        from tests.support import peers

        server = MockModelServer()
        launch = peers.codex_acp_launch(server)
        ARGV, ENV, cwd = launch.argv, launch.env, launch.cwd
        config = Config(
            command=ARGV[0],
            args=ARGV[1:],
            env=dict(ENV),
            dispose_eof_grace_ms=50,
            stderr=StderrMode.DISCARD,
            containment=CONTAINMENT,
        )
        registry.register(Provider(config))
    else:
        registry.register(Provider(example_agent_config(dispose_eof_grace_ms=2000, containment=CONTAINMENT)))
    await provider(registry, cwd)  # warm both paths (imports, page cache)
    await raw_sdk(cwd)
    ours, theirs = [], []
    for _ in range(pairs):
        ours.append(await provider(registry, cwd))
        theirs.append(await raw_sdk(cwd))
    print(summary("raw SDK: spawn + initialize + session/new", theirs))
    print(summary("provider: start-to-publish (same handshake)", ours))
    ratio = statistics.median(ours) / statistics.median(theirs)
    print(f"{'ratio of medians (provider / raw SDK)':<48} {ratio:.3f}")
    if ENV is None:
        starts = [await spawn_to_initialize(cwd) for _ in range(pairs)]
        print(summary("example agent: spawn -> initialize answered", starts))


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
