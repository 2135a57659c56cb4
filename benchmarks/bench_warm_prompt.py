"""A warm Claude Code CLI with its placeholder prompt against one without, and a
conversation's second turn, interleaved in one run
(run: python -m benchmarks.bench_warm_prompt).

Two registries of the Claude Code provider (the claude-agent-sdk's bundled CLI, the tests'
mock model on 127.0.0.1) keep one warm child each; both children get the context-usage
setup, and only the first one's the placeholder prompt its own hook blocks (the gate is
switched off while the second one's children are made).  Each round times a run on each
(from entering ``Registry.run`` to the first answer) and a second turn (``send`` to
result).  ``BENCH_ROUNDS`` (default 12).
"""

from __future__ import annotations

import os
from contextlib import ExitStack

import anyio

from benchmarks.bench_warm import build_claude, print_switched, switched_rounds
from supervisor.providers.claude_code import _run, _warm_prompt

GATE = _warm_prompt.PromptGate


def _no_gate() -> None:
    """No placeholder prompt: the warm child's setup is its context usage alone."""


def _gate(on: bool) -> None:
    vars(_run)["PromptGate"] = GATE if on else _no_gate  # what the run builds a warm child's gate with


async def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "12"))
    with ExitStack() as stack:
        plain, name, cwd, label = build_claude(stack)
        gated, bare, turns = await switched_rounds(plain, name, cwd, _gate, rounds)
    print_switched(f"{label}, {rounds} interleaved rounds", ("placeholder", "usage only"), gated, bare, turns)


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
