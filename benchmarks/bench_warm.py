"""A run on a warm child against a conversation's second turn and a cold run, interleaved in
one run (run: python -m benchmarks.bench_warm).

Each round times three things, each to the first answer (the settled first turn):

* **cold**: a fresh one-shot run, from entering ``Registry.run`` (spawn, handshake,
  session, the task) to its result;
* **warm**: the same, with a warm child ready (``Registry.prestart``, untimed): the run
  takes it and starts at its first prompt;
* **second turn**: a conversation's second turn, from ``send`` to its result (the first
  turn untimed): what a prompt costs on a child that is already running.

Before each timed part the pool's refill (started once the warm run's first turn
settled) is waited for, so no spawn competes with a timed part.  The goal:
warm <= 1.10x the second turn for the example agent, <= 1.25x for codex-acp,
claude-agent-acp, the Codex app-server and the Claude Code CLI.

``BENCH_CHILD``: ``example`` (default), ``codex`` (the real app-server), ``codex-acp``,
``claude-agent-acp`` or ``claude`` (the Claude Code CLI); the real peers answer from the
tests' mock model server on 127.0.0.1 (``npm ci`` in tests/).  ``BENCH_ROUNDS`` (default 20).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio

from benchmarks._stats import summary
from benchmarks.bench_conversation import CONTAINMENT, TASK, build, one_shot, second_turn
from supervisor import Registry, StderrMode, SubagentRequest


async def warm_run(registry: Registry, name: str, cwd: Path) -> float:
    await registry.prestart(name, 1, cwd=cwd)  # untimed: a warm child is ready
    request = SubagentRequest(task=TASK, parent_cwd=cwd)
    started = time.perf_counter()
    async with registry.run(name, request) as run:
        result = await run.result()
        elapsed = time.perf_counter() - started
    assert result.stop_reason == "completed", result
    assert any(entry.machine == "warm" for entry in run.audit.entries), "the run did not take a warm child"
    await registry.prestart(name, 1, cwd=cwd)  # untimed: the refill is ready, nothing spawns now
    return elapsed


async def switched_rounds(
    plain: Registry, name: str, cwd: Path, switch: Callable[[bool], None], rounds: int
) -> tuple[list[float], list[float], list[float]]:
    """An A/B of one warm-child feature: two registries of ``plain``'s provider ``name``, the
    feature switched on (``switch(True)``) while the first one's warm children are made and
    off while the second one's are (a refill is made at the end of each warm run, so each
    run switches first); each round times a run on each and a conversation's second turn.
    The switch is left on."""
    on, off = Registry(), Registry()
    on.register(plain.get(name))
    off.register(plain.get(name))
    with_it: list[float] = []
    without: list[float] = []
    turns: list[float] = []
    try:
        async with on, off:
            switch(True)
            await warm_run(on, name, cwd)  # warm every path once
            switch(False)
            await warm_run(off, name, cwd)
            await second_turn(plain, name, cwd)
            for _ in range(rounds):
                switch(True)
                with_it.append(await warm_run(on, name, cwd))
                switch(False)
                without.append(await warm_run(off, name, cwd))
                turns.append(await second_turn(plain, name, cwd))
    finally:
        switch(True)
    return with_it, without, turns


def print_switched(
    title: str, names: tuple[str, str], with_it: list[float], without: list[float], turns: list[float]
) -> None:
    """``switched_rounds``' three series and the ratio of each warm series to the second turn;
    ``names`` says what the feature's on and off are called (``("eager", "plain")``)."""
    print(title)
    print(summary(f"warm, {names[0]}: run to the first answer", with_it))
    print(summary(f"warm, {names[1]}: run to the first answer", without))
    print(summary("conversation: second turn, send to result", turns))
    turn = statistics.median(turns)
    for name, series in zip(names, (with_it, without), strict=True):
        print(f"{f'ratio of medians ({name} / second turn)':<48} {statistics.median(series) / turn:.3f}")


def build_claude(stack: ExitStack) -> tuple[Registry, str, Path, str]:
    """The real Claude Code CLI (the claude-agent-sdk's bundled one) against the mock."""
    from supervisor.providers import claude_code
    from tests.claude_code.conftest import ClaudeHome
    from tests.mockmodel import MockModelServer
    from tests.support.peers import seed_claude_config

    server = stack.enter_context(MockModelServer())
    root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    home = root / "home"
    config_dir = home / ".claude"
    work = root / "work"
    work.mkdir(parents=True)
    seed_claude_config(config_dir)
    claude_home = ClaudeHome(root=root, home=home, config_dir=config_dir, work=work.resolve())
    config = claude_code.Config(
        env=claude_home.env(server), stderr=StderrMode.DISCARD, containment=CONTAINMENT
    )
    registry = Registry()
    registry.register(claude_code.Provider(config))
    return registry, "claude-code", work.resolve(), "real Claude Code CLI (claude-code)"


def build_claude_agent_acp(stack: ExitStack) -> tuple[Registry, str, Path, str]:
    registry, cwd, _server = claude_agent_acp_registry(stack)
    return registry, "acp", cwd, "real claude-agent-acp (acp)"


def claude_agent_acp_registry(
    stack: ExitStack, extra_env: dict[str, str] | None = None
) -> tuple[Registry, Path, Any]:
    """claude-agent-acp against a mock model server, its cwd, and the mock."""
    from supervisor.providers import acp
    from tests.mockmodel import MockModelServer
    from tests.support import peers

    server = stack.enter_context(MockModelServer())
    launch = stack.enter_context(peers.claude_agent_acp_launch(server, extra_env=extra_env))
    config = acp.Config(
        command=launch.argv[0],
        args=launch.argv[1:],
        env=dict(launch.env),
        stderr=StderrMode.DISCARD,
        containment=CONTAINMENT,
    )
    registry = Registry()
    registry.register(acp.Provider(config))
    return registry, launch.cwd, server


def choose(stack: ExitStack) -> tuple[Registry, str, Path, str]:
    child = os.environ.get("BENCH_CHILD", "example")
    if child == "claude":
        return build_claude(stack)
    if child == "claude-agent-acp":
        return build_claude_agent_acp(stack)
    return build(stack)


async def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "20"))
    with ExitStack() as stack:
        plain, name, cwd, label = choose(stack)
        warmed = Registry()  # the same provider: only this registry keeps warm children
        warmed.register(plain.get(name))
        async with warmed:
            await warm_run(warmed, name, cwd)  # warm every path once (imports, page cache)
            await one_shot(plain, name, cwd)
            await second_turn(plain, name, cwd)
            cold, warm, turns = [], [], []
            for _ in range(rounds):
                warm.append(await warm_run(warmed, name, cwd))
                cold.append(await one_shot(plain, name, cwd))
                turns.append(await second_turn(plain, name, cwd))
    print(f"{label}, task {TASK!r}, {rounds} interleaved rounds, containment {CONTAINMENT.value}")
    print(summary("cold: Registry.run to the first answer", cold))
    print(summary("warm: Registry.run to the first answer", warm))
    print(summary("conversation: second turn, send to result", turns))
    to_turn = statistics.median(warm) / statistics.median(turns)
    print(f"{'ratio of medians (warm / second turn)':<48} {to_turn:.3f}")
    print(f"{'ratio of medians (warm / cold)':<48} {statistics.median(warm) / statistics.median(cold):.3f}")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
