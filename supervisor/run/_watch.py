"""Limits and idle watching: what bounds a run's time, and what ends an idle conversation.

Limits.  The kernel enforces ``memory_max``, ``pids_max`` and ``cpu_max`` in the run's
cgroups (the process layer); the turn guard (:mod:`supervisor.run._turn_guard`)
enforces ``timeout_ms`` (counted from spawn, so it bounds the start too) and
``stall_timeout_ms``.  A run a limit stopped settles ``error``: its diagnostic is the
failure line, then the limit line.  When the supervisor stopped the turn itself (time,
silence), the failure line names the current stage and the vocabulary's
``start_timeout_category`` (the category of the other limit the supervisor's clock
enforces); when the kernel did (an out-of-memory kill, or a refused fork in a run
that failed), the provider's own failure line stays, with its exit facts.

Everything before publication runs under ``start_timeout_ms``, or what is left of
``timeout_ms`` when that is less (:meth:`Limits.start_budget`).

Cancellation rules kept here:

* the time limit is the deadline of the turn guard's cancel scope, which sits *inside*
  the driver's scope (``RunState.drive_scope``): reaching it cancels only the turn's
  ``drive()``, and the guard reports the limit after the scope has exited;
* the silence watcher is a task of the guard's own task group, cancelled when the turn
  ends, whatever ended it;
* the idle watcher runs in the run's own task group under a scope of its own
  (``RunState.idle_scope``), which is cancelled when the next turn begins or the
  conversation ends; it never cancels anything itself, it calls ``on_end``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import anyio

from machines import CommonEvent
from supervisor._diagnostic import (
    LimitFacts,
    LimitResource,
    LimitScope,
    bound_diagnostic,
    join_lines,
)
from supervisor._errors import ConversationEnd
from supervisor._seam import StopReason, SubagentResult
from supervisor.process import HitScope
from supervisor.run._state import Hooks, RunState
from supervisor.run._turn_guard import OnLimit, TurnLimits, guard_turn

log = logging.getLogger("supervisor")

OnIdleEnd = Callable[[ConversationEnd | None, CommonEvent], None]
"""Ends the conversation: its reason (None: the session was lost) and the chart's event."""


class Limits:
    """The limits of one run's turns and start, and the watcher of its idle session."""

    def __init__(self, state: RunState, run: Hooks) -> None:
        self._state = state
        self._run = run

    def guarded_turn(self, on_limit: OnLimit) -> contextlib.AbstractAsyncContextManager[None]:
        """The guard of the current turn (``timeout_ms`` from the turn's start,
        ``stall_timeout_ms``): every turn is driven inside one (a conversation's later
        turns too, from their send)."""
        config = self._run.config
        limits = TurnLimits(config.timeout_ms, config.stall_timeout_ms)
        return guard_turn(
            limits, started=self._state.turn_started_at, activity=self._run.process, on_limit=on_limit
        )

    def start_budget(self) -> tuple[float, LimitFacts | None]:
        """How long the handshake may take: ``start_timeout_ms``, or what is left of
        ``timeout_ms`` (counted from spawn) when that is less; with the time limit's facts
        when it is the one that binds."""
        config = self._run.config
        budget = config.start_timeout
        timeout_ms = config.timeout_ms
        if timeout_ms is not None:
            left = self._state.spawned_at + timeout_ms / 1000 - anyio.current_time()
            if left < budget:
                return max(left, 0.0), LimitFacts(LimitResource.TIME, timeout_ms)
        return budget, None

    def kernel_limit(self) -> LimitFacts | None:
        """The limit the kernel enforced on the run, from its counters (cgroup mode)."""
        process = self._run.process
        hit = None if process is None else process.limit_hit()
        if hit is None:
            return None
        scope = None if hit.scope is HitScope.RUN else LimitScope(hit.scope.value)
        return LimitFacts(LimitResource(hit.resource), hit.limit, scope)

    def limited(
        self, result: SubagentResult, category: str | None, limit: LimitFacts
    ) -> tuple[SubagentResult, str | None]:
        """``result`` (and its failure category) with the kernel's limit in it.  An
        out-of-memory kill ends the run ``error`` whatever the provider made of it; refused
        forks only explain a failure.  The limit line comes right after the failure line."""
        if limit.resource is LimitResource.PROCESSES and result.stop_reason != StopReason.ERROR:
            return result, category
        lines = (result.diagnostic or "").split("\n") if result.stop_reason == StopReason.ERROR else []
        if not lines or not lines[0]:
            lines, category = [self._run.failure("unknown").line()], "unknown"
        # bounded here: a model copy does not run the seam's validators
        diagnostic = bound_diagnostic(join_lines(lines[0], limit.line(), *lines[1:]))
        return result.model_copy(update={"stop_reason": StopReason.ERROR, "diagnostic": diagnostic}), category

    # -- the idle session ---------------------------------------------------------------

    def watch_idle(self, on_end: OnIdleEnd) -> None:
        """Between turns: the idle timeout, or the session going away, ends the
        conversation (``on_end``).  Started in the run's own task group."""
        state = self._state
        assert state.task_group is not None
        state.idle_scope = anyio.CancelScope()
        state.task_group.start_soon(self._watch_idle, state.idle_scope, on_end)

    def stop_idle(self) -> None:
        scope, self._state.idle_scope = self._state.idle_scope, None
        if scope is not None:
            scope.cancel()

    async def _watch_idle(self, scope: anyio.CancelScope, on_end: OnIdleEnd) -> None:
        run = self._run
        with scope:
            with anyio.move_on_after(run.config.idle_timeout) as timer:
                await run.session_lost()
            if timer.cancelled_caught:
                log.info("run %s: the conversation was idle for idle_timeout_ms", run.id)
                on_end(ConversationEnd.IDLE_TIMEOUT, CommonEvent.IDLE_TIMED_OUT)
            else:
                log.info("run %s: the child's session ended between turns", run.id)
                on_end(None, CommonEvent.CHILD_LOST)
