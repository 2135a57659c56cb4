"""A warm claude-agent-acp child whose Claude Code CLI is compiled eagerly (``node
--no-lazy``) against one whose CLI is not, and a conversation's second turn, interleaved
in one run (run: python -m benchmarks.bench_warm_eager).

Two registries of the same provider keep one warm child each; the eager compile is
switched off while the second one's children are made, so each round times a run on an
eagerly compiled warm child, a run on a plain warm child (both from entering
``Registry.run`` to the first answer) and a second turn (``send`` to result).  Then
the resident memory of each kind of warm child's whole tree (the adapter and its CLI),
and how long each took from ``prestart`` to ready.  The real adapter and CLI answer
from the tests' mock model server on 127.0.0.1 (``npm ci`` in tests/).
``BENCH_ROUNDS`` (default 12).
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import psutil

from benchmarks.bench_warm import build_claude_agent_acp, print_switched, switched_rounds
from supervisor import Registry
from supervisor.providers.acp import _eager as eager_compile

EAGER = eager_compile.warm_session_meta


def _plain(*args: Any, **keys: Any) -> dict[str, Any]:
    """The eager compile, switched off."""
    return {}


def _eager(on: bool) -> None:
    eager_compile.warm_session_meta = EAGER if on else _plain


def _tree_rss(run_id: str) -> int:
    total = 0
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SUBAGENT_SUPERVISOR_RUN") == run_id:
                total += proc.memory_info().rss
        except (psutil.Error, OSError):
            continue
    return total


async def _warm_child(name: str, plain: Registry, cwd: Path) -> tuple[float, float]:
    """One warm child on a registry of its own: (seconds from prestart to ready, tree RSS in MB)."""
    registry = Registry()
    registry.register(plain.get(name))
    async with registry:
        started = time.perf_counter()
        await registry.prestart(name, 1, cwd=cwd)
        ready = time.perf_counter() - started
        assert registry._warm is not None
        (slot,) = registry._warm._slots.values()
        (run,) = slot.ready
        await anyio.sleep(2)  # whatever the CLI does once started has settled
        return ready, _tree_rss(run.id) / 1e6


async def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "12"))
    with ExitStack() as stack:
        plain, name, cwd, label = build_claude_agent_acp(stack)
        compiled, bare, turns = await switched_rounds(plain, name, cwd, _eager, rounds)
        try:
            children: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
            for _ in range(3):
                for on in (True, False):
                    _eager(on)
                    children[on].append(await _warm_child(name, plain, cwd))
        finally:
            _eager(True)
    title = f"{label}, {rounds} interleaved rounds, load {os.getloadavg()[0]:.1f}"
    print_switched(title, ("eager", "plain"), compiled, bare, turns)
    for on, kind in ((True, "eager"), (False, "plain")):
        ready = statistics.median(child[0] for child in children[on])
        rss = statistics.median(child[1] for child in children[on])
        print(f"warm child, {kind}: prestart to ready {ready * 1e3:7.1f} ms, tree RSS {rss:6.1f} MB (of 3)")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
