"""A warm child with its provider's setup (``warm_up``) against one without, and a
conversation's second turn, interleaved in one run
(run: BENCH_CHILD=claude python -m benchmarks.bench_warm_setup).

Two registries of the same provider keep one warm child each; the pool's setup call is
switched off while the second one's children are made, so each round times a run on a
set-up warm child, a run on a plain warm child (both from entering ``Registry.run`` to
the first answer) and a second turn (``send`` to result).  ``BENCH_CHILD`` as in
``bench_warm`` (the setup matters for ``claude``, the Claude Code CLI, whose provider
defines it); ``BENCH_ROUNDS`` (default 12).
"""

from __future__ import annotations

import os
import statistics
from contextlib import ExitStack
from typing import Any

import anyio

from benchmarks._stats import summary
from benchmarks.bench_warm import choose, switched_rounds
from supervisor.run import _warm

SET_UP = _warm.warm_up


async def _no_setup(run: Any) -> None:
    """The pool's setup call, switched off."""


def _setup(on: bool) -> None:
    _warm.warm_up = SET_UP if on else _no_setup


async def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "12"))
    with ExitStack() as stack:
        plain, name, cwd, label = choose(stack)
        set_up, bare, turns = await switched_rounds(plain, name, cwd, _setup, rounds)
    print(f"{label}, {rounds} interleaved rounds")
    print(summary("warm, set up: run to the first answer", set_up))
    print(summary("warm, not set up: run to the first answer", bare))
    print(summary("conversation: second turn, send to result", turns))
    turn = statistics.median(turns)
    print(f"{'ratio of medians (set up / second turn)':<48} {statistics.median(set_up) / turn:.3f}")
    print(f"{'ratio of medians (not set up / second turn)':<48} {statistics.median(bare) / turn:.3f}")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
