"""Teardown: the run's own task group, the one teardown over the whole tree, rollback,
dispose and the forced kill.

Cancellation rules kept here:

* **The run's own task group is shielded until the run is closed** (:meth:`Teardown.host`).
  The exit watcher and the readers must outlive a cancellation of the caller's scope:
  the shielded teardown that follows needs them to prove quiescence.  So a started run
  must always be disposed (``Registry.run`` does it); a failed start closes it itself
  (its rollback).
* **Every teardown is shielded.**  Once begun, a teardown (the protocol's shutdown, the
  process ladder, releasing the protocol's resources, leaving the workspace) runs to its
  end whatever is cancelled around it; a hook of the provider that raises is logged and
  the ladder still runs.  Only :meth:`Teardown.force_kill` (a second Ctrl-C) shortens
  it, by skipping the ladder's remaining graces.
* **One teardown per run.**  Before publication only the start's rollback takes the tree
  down (``start failed``, ``start aborted``, or a warm child no run took), and it closes
  the run, so a later ``dispose()`` has nothing to do.  After publication the first
  *claim* runs the teardown and names the chart's event; every later one waits for it
  and shares its outcome.  Two callers claim: a conversation that ends on its own (idle
  timeout, session lost, abort, a failed task between turns: in the background, on the
  run's group) and ``dispose()``.
* **A protocol cancel goes out first.**  When a turn was cancelled, the teardown waits
  (at most ``REMOTE_CANCEL_TIMEOUT``) for the protocol's cancel to be sent before the
  polite shutdown begins.
* **Dispose is idempotent and shielded**: the first call ends the conversation (a
  running turn is cancelled at once), tears down and closes the run's group; every
  later call waits for it and raises the same :class:`~supervisor.TeardownFailed`.
  A run never started, or whose start rolled back, has nothing to dispose.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup, TaskStatus

from machines import CommonEvent, TeardownLadder, Vocabulary
from supervisor._diagnostic import FailureFacts, bound_diagnostic
from supervisor._errors import ConversationEnd, TeardownFailed
from supervisor.common._logging import raw_failure
from supervisor.process import TeardownReport
from supervisor.run._guard import GuardedTaskGroup, is_cancellation
from supervisor.run._settle import Settlement
from supervisor.run._state import Hooks, RunState
from supervisor.run._watch import Limits

log = logging.getLogger("supervisor")

REMOTE_CANCEL_TIMEOUT = 1.0
"""Seconds the protocol's best-effort cancel may take, and the teardown waits for it."""


def default_teardown_facts(vocabulary: Vocabulary, report: TeardownReport | None) -> FailureFacts:
    """Safe facts for a failed teardown: ``<teardown stage>/unknown``, with the exit facts
    when the vocabulary puts them on teardown lines."""
    exit_facts = report.exit if report is not None and vocabulary.teardown_exit_facts else None
    return FailureFacts(
        vocabulary,
        vocabulary.teardown_stage,
        "unknown",
        exit_code=exit_facts.exit_code if exit_facts else None,
        signal=exit_facts.signal if exit_facts else None,
    )


class Teardown:
    """Takes one run's tree down, once (see the module docstring for the rules)."""

    def __init__(self, state: RunState, run: Hooks, settlement: Settlement, limits: Limits) -> None:
        self._state = state
        self._run = run
        self._settlement = settlement
        self._limits = limits

    async def host(self, *, task_status: TaskStatus[TaskGroup]) -> None:
        """The run's own task group, shielded until the run is closed."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as own:
                task_status.started(own)
                await self._state.closed.wait()
                # Every task of the run is started through the guarded group: when none is
                # left (a one-shot run's, as a rule) there is nothing to cancel, and anyio's
                # ``cancel`` would still format this task for its reason (about 10 us).
                guarded = self._state.task_group
                if not isinstance(guarded, GuardedTaskGroup) or guarded.unfinished:
                    own.cancel_scope.cancel()

    def claim(self, event: CommonEvent) -> bool:
        """The first caller to claim the teardown runs it (with its event); later ones wait."""
        state = self._state
        if state.teardown_done is not None:
            return False
        state.teardown_done = anyio.Event()
        state.teardown_event = event
        return True

    async def run_claimed(self, lost: bool = False) -> None:
        """Run the claimed teardown, shielded.  ``lost``: the conversation ended because
        its session was lost; why (the child's exit, a kernel limit) is read first."""
        state = self._state
        assert state.teardown_done is not None
        assert state.teardown_event is not None
        with anyio.CancelScope(shield=True):
            try:
                if lost:  # before the ladder's first signal
                    await self._why_lost()
                state.teardown_error = await self._teardown(state.teardown_event)
            finally:
                state.teardown_done.set()

    async def once(self, event: CommonEvent) -> TeardownFailed | None:
        """Claim and run the teardown, or wait for the one already claimed."""
        if self.claim(event):
            await self.run_claimed()
        else:
            assert self._state.teardown_done is not None
            await self._state.teardown_done.wait()
        return self._state.teardown_error

    async def rollback(self, event: CommonEvent) -> TeardownFailed | None:
        """Take down a start that will not be published, and close the run."""
        error: TeardownFailed | None = None
        with anyio.CancelScope(shield=True):
            try:
                error = await self._teardown(event)
            finally:
                self._state.closed.set()
                self._state.progress.end()
        return error

    async def dispose(self, close_turns: Callable[[], None]) -> None:
        """Reach whole-tree quiescence or raise :class:`TeardownFailed`.  Idempotent.

        ``close_turns`` ends the conversation and cancels a running turn at once."""
        state = self._state
        run = self._run
        if state.dispose_done is None:
            state.dispose_done = anyio.Event()
            if state.task_group is None or (not state.published and state.closed.is_set()):
                state.dispose_done.set()  # never started, or a failed start rolled back: nothing here
                return
            with anyio.CancelScope(shield=True):
                try:
                    close_turns()
                    state.dispose_error = await self.once(CommonEvent.DISPOSE_REQUESTED)
                finally:
                    state.dispose_done.set()
                    state.closed.set()
                    state.progress.end()
                    state.telemetry.end(run, state.result, state.dispose_error)
                    state.journal.end(run)
        else:
            await state.dispose_done.wait()
        if state.dispose_error is not None:
            raise state.dispose_error

    def force_kill(self) -> None:
        """Skip the remaining teardown graces (a second Ctrl-C)."""
        process = self._run.process
        if process is not None:
            process.force_kill()

    async def _why_lost(self) -> None:
        """Why an idle session was lost: the child's exit (observed within the EOF grace,
        before any signal of the teardown) and the kernel's limit, read before the
        teardown removes the leaf."""
        state = self._state
        process = self._run.process
        try:
            facts = None if process is None else await process.wait_exit(within=self._run.config.eof_grace)
            if facts is not None:
                state.over, state.over_exit = ConversationEnd.CHILD_EXITED, facts
            state.over_limit = self._limits.kernel_limit()
        finally:
            state.over_known.set()

    async def _teardown(self, event: CommonEvent) -> TeardownFailed | None:
        """Move into the teardown stage, take the tree down, and record the outcome."""
        state = self._state
        run = self._run
        record = self._settlement.record
        state.remove_abort()
        record(event)
        report: TeardownReport | None = None
        if state.remote_cancel_done is not None:  # let the protocol's cancel go out first
            with anyio.move_on_after(REMOTE_CANCEL_TIMEOUT):
                await state.remote_cancel_done.wait()
        try:
            await run.before_ladder()
        except BaseException as exc:  # a polite shutdown is best effort; the ladder still runs
            if is_cancellation(exc):
                raise
            log.warning("run %s: protocol shutdown failed", run.id)
            raw_failure("run %s: the raw shutdown failure", run.id, exc=exc)
        process = run.process
        if process is not None:
            report = await process.teardown(
                TeardownLadder(listeners=[run.audit]),  # built only when needed: charts cost ~0.4 ms
                eof_grace=run.config.eof_grace,
                term_grace=run.config.term_grace,
            )
        try:
            await run.after_ladder()
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            log.warning("run %s: releasing protocol resources failed", run.id)
            raw_failure("run %s: the raw release failure", run.id, exc=exc)
        state.quiescent = report is None or report.quiescent
        await state.workspace.leave(quiescent=state.quiescent)
        if state.quiescent:
            record(CommonEvent.TREE_GONE)
            return None
        assert report is not None
        log.error("run %s: tree not gone after SIGKILL; survivors %s", run.id, report.survivors)
        record(CommonEvent.TREE_SURVIVED)
        try:
            facts = run.teardown_facts(report)
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            raw_failure("run %s: teardown_facts() failed", run.id, exc=exc)
            facts = default_teardown_facts(run.vocabulary, report)
        state.teardown_category = facts.category
        line = facts.line()
        return TeardownFailed(bound_diagnostic(line) or line)
