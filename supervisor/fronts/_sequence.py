"""One run from start to disposal: the sequence every front-end shares.

``subagents run``, a batch (local or inside a Ray task), the MCP desk and ``doctor``'s
example run all do the same three steps with the same rules, written once here:

1. **start**: ``run.start()`` in a task group of the sequence's own.  A start that fails
   (``StartFailed``) or is aborted (``StartAborted``) is an outcome, not an exception:
   the child was rolled back before either is raised, so there is nothing to dispose.
2. **result**: ``await run.result()``, which never raises for a child-level failure.
3. **dispose**: always, shielded, once the run was published, whatever happened in
   step 2 (a caller's scope cancelled while it waited is a local cancellation: the run
   settles ``aborted`` and its tree is taken down before the cancellation goes on).  A
   ``TeardownFailed`` is an outcome too.

A cancellation of the caller's scope is never swallowed: after the shielded disposal it
propagates, and no outcome is returned.  The :class:`RunOutcome` says what a parent
should see; its rules (``stop_reason``, ``diagnostic``, ``quiescent``) are the ones every
front-end reports.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from supervisor._abort import AbortSignal
from supervisor._diagnostic import bound_diagnostic, join_lines
from supervisor._errors import StartAborted, StartFailed, TeardownFailed
from supervisor._handle import Run
from supervisor._public import home
from supervisor._seam import StopReason, SubagentResult


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What became of one run: started or not, its result, whether its tree is gone."""

    run: Run
    result: SubagentResult | None
    """The settled result; None when the run was never published."""
    start_error: StartFailed | StartAborted | None = None
    teardown_error: TeardownFailed | None = None

    @property
    def started(self) -> bool:
        """Whether the run was published (its start neither failed nor was aborted)."""
        return self.start_error is None

    @property
    def cancelled(self) -> bool:
        """Whether the run ended by local cancellation (before or after publication)."""
        if isinstance(self.start_error, StartAborted):
            return True
        return (
            self.result is not None
            and self.result.stop_reason == StopReason.ABORTED
            and self.run.cancelled_locally
        )

    @property
    def stop_reason(self) -> str:
        """The stop reason a parent sees.

        The result's, except: a start that failed is ``error`` and one that was aborted
        ``aborted``; a ``completed`` run whose tree could not be proven gone is ``error``
        (the parent must not hear "done" about a child that may still be running).
        """
        if isinstance(self.start_error, StartAborted):
            return StopReason.ABORTED
        if self.start_error is not None or self.result is None:
            return StopReason.ERROR
        if self.teardown_error is not None and self.result.stop_reason == StopReason.COMPLETED:
            return StopReason.ERROR
        return self.result.stop_reason

    @property
    def completed(self) -> bool:
        return self.stop_reason == StopReason.COMPLETED

    @property
    def output(self) -> str:
        """The child's answer (partial on failure); empty when the run never started."""
        return "" if self.result is None else self.result.output

    @property
    def diagnostic(self) -> str | None:
        """The closed diagnostic: the start failure's, or the result's followed by the
        teardown failure's line, bounded together to 4096 bytes.  None for an aborted start."""
        if isinstance(self.start_error, StartFailed):
            return self.start_error.diagnostic
        if self.result is None:
            return None
        teardown = self.teardown_error.diagnostic if self.teardown_error is not None else None
        return bound_diagnostic(join_lines(self.result.diagnostic, teardown))

    @property
    def quiescent(self) -> bool:
        """Whether the whole tree was proven gone (an aborted start was rolled back to it)."""
        if isinstance(self.start_error, StartFailed):
            return self.start_error.quiescent
        if isinstance(self.start_error, StartAborted):
            return True
        return bool(self.run.quiescent)


async def supervise(run: Run, abort: AbortSignal | None = None) -> RunOutcome:
    """Start ``run``, wait for its result, dispose it; return what became of it.

    ``run`` is a fresh run (``provider.create_run(request)``); ``abort`` cancels it
    locally from anywhere.  See the module docstring for the rules.
    """
    result: SubagentResult | None = None

    async def wait_result() -> None:
        nonlocal result
        result = await run.result()

    start_error, teardown_error = await lifetime(run, abort, wait_result)
    return RunOutcome(run, result, start_error, teardown_error)


async def lifetime(
    run: Run, abort: AbortSignal | None, body: Callable[[], Awaitable[None]], *, conversation: bool = False
) -> tuple[StartFailed | StartAborted | None, TeardownFailed | None]:
    """Steps 1 and 3 of the sequence around ``body`` (step 2): start ``run`` (a failed or
    aborted start is returned, and ``body`` does not run), then always dispose it, shielded;
    the start's and the disposal's errors.  ``supervise`` and a conversation
    (``_turns.converse``) differ only in their ``body``."""
    start_error: StartFailed | StartAborted | None = None
    teardown_error: TeardownFailed | None = None
    async with anyio.create_task_group() as tg:  # the run's background work lives here
        try:
            if conversation:  # a Run of 0.2 takes no such keyword: passed only when true
                await run.start(tg, abort, conversation=True)
            else:
                await run.start(tg, abort)
        except (StartFailed, StartAborted) as exc:
            start_error = exc
        else:
            try:
                await body()
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        await run.dispose()
                    except TeardownFailed as exc:
                        teardown_error = exc
    return start_error, teardown_error


home("supervisor", RunOutcome, supervise)
