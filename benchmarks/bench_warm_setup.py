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
from contextlib import ExitStack
from typing import Any

import anyio

from benchmarks.bench_warm import choose, print_switched, switched_rounds
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
    print_switched(f"{label}, {rounds} interleaved rounds", ("set up", "not set up"), set_up, bare, turns)


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
