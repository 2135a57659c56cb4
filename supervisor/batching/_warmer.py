"""A local batch warms ahead of its queue: its first items take children already started.

Before its workers start, the batch asks the registry to keep ``concurrency`` warm
children of its default provider in its default cwd (the key most items share), and
waits for them: the first runs then start at their first prompt.  Each taken child is
replaced once its run's first turn has settled, so the next item of that key finds one
ready; items of another provider, config or cwd start cold.  When the queue is empty
(or the batch ends however it ends) the count goes back to what it was, which ends the
children no item took.

Warming is an optimisation, never a reason for the batch to fail: a provider that
cannot be prestarted, a count over the host ceiling, or a warm child that fails to
start is logged, and the runs start cold (each failing on its own record if the agent
cannot start at all).  A provider whose runs each get a worktree of their own is not
warmed at all (a run's cwd exists only once it starts): quietly, it is no fault.
"""

from __future__ import annotations

import logging
from pathlib import Path

from supervisor._errors import SubagentError
from supervisor._registry import Registry

log = logging.getLogger("supervisor")


class Warmer:
    """The warm children one local batch keeps for its default key."""

    def __init__(self, registry: Registry, name: str, cwd: Path, width: int) -> None:
        self._registry = registry
        self._name = name
        self._cwd = cwd
        self._width = width
        self._before = 0
        self._warming = False

    async def begin(self) -> None:
        """Keep ``width`` warm children (on top of any the caller keeps for the key)."""
        if self._width == 0:
            return
        from supervisor.run._warm import unwarmable, warm_config

        config = warm_config(self._registry.get(self._name))
        reason = None if config is None else unwarmable(config)
        if reason is not None:  # by design, not a fault: no warning
            log.debug("the batch starts its runs cold: %s", reason)
            return
        try:
            self._before = self._registry.warm_target(self._name, self._cwd)
            self._warming = True
            await self._registry.prestart(self._name, self._before + self._width, cwd=self._cwd)
        except SubagentError as exc:
            log.warning("the batch starts its runs cold: %s", exc)

    async def end(self) -> None:
        """Back to the caller's count (idempotent)."""
        if not self._warming:
            return
        self._warming = False
        try:
            await self._registry.prestart(self._name, self._before, cwd=self._cwd)
        except SubagentError as exc:
            log.warning("the batch could not end its warm children: %s", exc)
