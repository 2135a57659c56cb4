"""A conversation's second turn (send to result) against a fresh one-shot run of the same task,
interleaved in one run (run: python -m benchmarks.bench_conversation).

Each pair: a conversation is started and its first turn awaited (untimed), then its
second turn is timed from ``send`` to the result; then a fresh one-shot run of the
same task is timed from entering ``Registry.run`` (spawn, handshake, the task) to its
result.  Both are disposed untimed.  The one-shot run is what a follow-up costs
without conversations: a cold start that also loses the context.

``BENCH_CHILD=codex`` measures the real Codex app-server (``npm ci`` in tests/; the
tests' mock model server answers every turn at once) instead of the built-in example
agent; ``BENCH_CHILD=codex-acp`` the real codex-acp agent.
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import ExitStack
from pathlib import Path

import anyio

from benchmarks._stats import summary
from supervisor import Registry, StderrMode, SubagentRequest
from supervisor.process import ContainmentMode

TASK = "say hello"
CONTAINMENT = ContainmentMode(os.environ.get("BENCH_CONTAINMENT", "auto"))


async def second_turn(registry: Registry, name: str, cwd: Path) -> float:
    request = SubagentRequest(task=TASK, parent_cwd=cwd)
    async with registry.run(name, request, conversation=True) as run:
        first = await run.result()
        assert first.stop_reason == "completed", first
        started = time.perf_counter()
        second = await run.send(TASK)
        elapsed = time.perf_counter() - started
        assert second.stop_reason == "completed", second
    return elapsed


async def one_shot(registry: Registry, name: str, cwd: Path) -> float:
    request = SubagentRequest(task=TASK, parent_cwd=cwd)
    started = time.perf_counter()
    async with registry.run(name, request) as run:
        result = await run.result()
        elapsed = time.perf_counter() - started
    assert result.stop_reason == "completed", result
    return elapsed


def build(stack: ExitStack) -> tuple[Registry, str, Path, str]:
    """The registry, provider name, workspace and a label for the chosen child."""
    registry = Registry()
    child = os.environ.get("BENCH_CHILD", "example")
    if child == "example":
        from supervisor.providers.acp import Provider, example_agent_config

        registry.register(Provider(example_agent_config(containment=CONTAINMENT)))
        return registry, "acp", Path.cwd(), "example agent (acp)"
    from tests.mockmodel import MockModelServer
    from tests.support import peers

    server = stack.enter_context(MockModelServer())
    if child == "codex":
        from supervisor.providers import codex

        launch = stack.enter_context(peers.codex_app_server_launch(server))
        config = codex.Config(
            codex_path=Path(launch.argv[0]),
            env=dict(launch.env),
            stderr=StderrMode.DISCARD,
            containment=CONTAINMENT,
        )
        registry.register(codex.Provider(config))
        return registry, "codex", launch.cwd, "real Codex app-server (codex)"
    if child == "codex-acp":
        from supervisor.providers import acp

        launch = stack.enter_context(peers.codex_acp_launch(server))
        acp_config = acp.Config(
            command=launch.argv[0],
            args=launch.argv[1:],
            env=dict(launch.env),
            dispose_eof_grace_ms=50,  # codex-acp ignores stdin EOF
            stderr=StderrMode.DISCARD,
            containment=CONTAINMENT,
        )
        registry.register(acp.Provider(acp_config))
        return registry, "acp", launch.cwd, "real codex-acp (acp)"
    raise SystemExit(f"BENCH_CHILD must be example, codex or codex-acp, not {child!r}")


async def main() -> None:
    pairs = int(os.environ.get("BENCH_PAIRS", "20"))
    with ExitStack() as stack:
        registry, name, cwd, label = build(stack)
        await second_turn(registry, name, cwd)  # warm both paths (imports, page cache)
        await one_shot(registry, name, cwd)
        turns, fresh = [], []
        for _ in range(pairs):
            turns.append(await second_turn(registry, name, cwd))
            fresh.append(await one_shot(registry, name, cwd))
    print(f"{label}, task {TASK!r}, {pairs} interleaved pairs")
    print(summary("fresh one-shot run: start to result", fresh))
    print(summary("conversation: second turn, send to result", turns))
    ratio = statistics.median(turns) / statistics.median(fresh)
    print(f"{'ratio of medians (second turn / fresh run)':<48} {ratio:.3f}")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
