"""Start and publication: spawn and handshake, publish, or roll back; the warm child's
split start (prestart, assign); a cold resume's refusal.

A start returns only once the run is published (the caller's now: its first turn
starts, or a cold resume waits idle).  On failure the child is rolled back to
quiescence before the error is raised: ``StartFailed`` with the failure line, the
limit line when a limit failed the start, any extra line, and the rollback's own
failure; ``StartAborted`` for an abort before publication; ``ConversationOver``
``not resumable`` when the agent cannot continue the session.  Everything before
publication runs under ``start_timeout_ms`` (or what is left of ``timeout_ms``); a
start that overruns it fails in its current stage as the vocabulary's
``start_timeout_category``.

Cancellation rules kept here:

* **Starting the run's own task group is shielded**: a caller's scope cancelled while
  the host task is being started would otherwise leave that (shielded) task running with
  nobody to close it.  A pending cancellation then arrives at the handshake's first
  checkpoint, which rolls back.
* **The start scope** (``RunState.start_scope``) covers making the workspace and the
  handshake, under the start budget.  The abort signal cancels it, and so does a task of
  the run that raises; either is rolled back (``start aborted``, or ``start failed``
  ``unknown`` for the task).
* **A cancellation of the caller's scope** during the start rolls back (shielded), then
  goes on: the caller's cancellation is never eaten.
* **An abort signalled before the start** rolls back at once, before the handshake.
* **A local cancel before publication** only settles the turn (``aborted``); the run is
  then published settled and the chart records ``cancelled`` at publication.
* **After publication** the abort signal cancels the turn (a one-shot run) or ends the
  conversation; the start has nothing more to roll back: ``dispose()`` takes the tree
  down.
"""

from __future__ import annotations

import logging
from typing import NoReturn

import anyio
from anyio.abc import TaskGroup

from machines import SETTLED, CommonEvent, TransitionSink
from supervisor._abort import AbortSignal
from supervisor._diagnostic import LimitFacts, bound_diagnostic, join_lines
from supervisor._errors import InvalidRequest, StartAborted, StartFailed, TeardownFailed
from supervisor._seam import SubagentRequest
from supervisor.common._logging import raw_failure
from supervisor.journal import _switch as _journal
from supervisor.run._guard import GuardedTaskGroup, is_cancellation
from supervisor.run._resume import NotResumable, check_resumable, not_resumable
from supervisor.run._settle import Settlement
from supervisor.run._state import Hooks, RunState, StepFailed
from supervisor.run._teardown import Teardown
from supervisor.run._turns import Turns
from supervisor.run._watch import Limits
from supervisor.workspace import WorkspaceFailed

log = logging.getLogger("supervisor")


class Start:
    """Starts one run and publishes it, or rolls it back."""

    def __init__(
        self,
        state: RunState,
        run: Hooks,
        settlement: Settlement,
        limits: Limits,
        teardown: Teardown,
        turns: Turns,
    ) -> None:
        self._state = state
        self._run = run
        self._settlement = settlement
        self._limits = limits
        self._teardown = teardown
        self._turns = turns

    async def start(self, task_group: TaskGroup, abort: AbortSignal | None, *, conversation: bool) -> None:
        """Spawn and handshake (or take a prestarted child); return once published."""
        state = self._state
        run = self._run
        if conversation and not any(row[0] == CommonEvent.TURN_ENDED for row in run.lifecycle.TABLE):
            raise InvalidRequest("this run's lifecycle has no turn loop: it cannot converse")
        if run.resuming:
            check_resumable(run.lifecycle, run.vocabulary.label, state.turn_number, conversation=conversation)
        state.conversation = conversation
        state.telemetry.begin(run)
        state.journal.begin(run)
        try:
            if state.prestarted:  # a warm child: the handshake is done, straight to the first turn
                await self._publish_prestarted(abort)
            else:
                await self._prepare(task_group, abort)
                self._publish(abort)
        except BaseException as exc:
            state.telemetry.start_failed(run, exc)
            state.journal.start_failed(run, exc)
            raise

    async def prestart(self, task_group: TaskGroup) -> None:
        """Spawn and handshake before any task exists; the run is ready, unpublished."""
        self._state.warm = True
        await self._prepare(task_group, None)
        self._state.prestarted = True

    def assign(self, request: SubagentRequest, trace: TransitionSink | None) -> None:
        """A prestarted run's request arrived (the base has set ``run.request``): its task,
        the journal of the registry handing the run out, and the caller's trace sink."""
        state = self._state
        state.turn_task = request.task
        state.journal = _journal.for_run()
        self._run.audit.retarget(state.journal.sink(state.telemetry.sink(trace)))

    async def end_prestarted(self) -> TeardownFailed | None:
        """Take down a prestarted run that no caller will use; the teardown's error, if any.

        Its chart waits where the handshake left it: a startup stage rolls back as an
        aborted start; the first turn's stage is cancelled, then disposed.
        """
        run = self._run
        state_name = run.machine.state_name
        if any(row[0] == CommonEvent.START_ABORTED and row[1] == state_name for row in run.lifecycle.TABLE):
            return await self._teardown.rollback(CommonEvent.START_ABORTED)
        if state_name != SETTLED:
            self._settlement.record(CommonEvent.CANCELLED)
        return await self._teardown.rollback(CommonEvent.DISPOSE_REQUESTED)

    async def _publish_prestarted(self, abort: AbortSignal | None) -> None:
        if abort is not None and abort.aborted:
            teardown_error = await self.end_prestarted()
            if teardown_error is not None:
                raise StartFailed(teardown_error.diagnostic, quiescent=False) from teardown_error
            raise StartAborted(self._aborted_text())
        # ``timeout_ms`` counts from the start of this run's use, not from the warm spawn.
        self._state.turn_started_at = anyio.current_time()
        self._publish(abort)

    async def _prepare(self, task_group: TaskGroup, abort: AbortSignal | None) -> None:
        """Spawn and handshake (a failure is rolled back and raised); no publication."""
        state = self._state
        run = self._run
        rollback = self._teardown.rollback
        state.spawned_at = state.turn_started_at = anyio.current_time()
        state.progress.begin_turn()
        with anyio.CancelScope(shield=True):
            state.task_group = GuardedTaskGroup(
                await task_group.start(self._teardown.host), self._turns.task_failed
            )
        if abort is not None and abort.aborted:
            await rollback(CommonEvent.START_ABORTED)
            raise StartAborted(self._aborted_text())
        failure: StepFailed | None = None
        refused: NotResumable | None = None  # the agent cannot continue the session to resume
        limit: LimitFacts | None = None  # the limit that failed the start, if one did
        try:
            with anyio.CancelScope() as scope:
                state.start_scope = scope  # a task that fails during the start cancels it
                remove = abort.add_callback(scope.cancel) if abort is not None else (lambda: None)
                try:
                    budget, time_limit = self._limits.start_budget()
                    with anyio.move_on_after(budget) as deadline:
                        await self._enter_workspace()
                        await run.handshake()
                    if deadline.cancelled_caught:
                        limit = time_limit
                        overran = "start_timeout_ms" if time_limit is None else "timeout_ms"
                        log.warning("run %s: the start overran %s", run.id, overran)
                        failure = StepFailed(run.failure(run.vocabulary.start_timeout_category))
                except StepFailed as exc:
                    failure = exc
                except NotResumable as exc:
                    refused = exc
                except BaseException as exc:  # SystemExit and the like too: only a cancellation goes on
                    if is_cancellation(exc):
                        raise
                    failure = StepFailed(run.failure("unknown"))
                    failure.__cause__ = exc
                finally:
                    remove()
        except anyio.get_cancelled_exc_class():
            # The caller's scope was cancelled: roll back, then let the cancellation go on.
            teardown_error = await rollback(CommonEvent.START_ABORTED)
            if teardown_error is not None:
                log.error("run %s: rollback after cancellation failed: %s", run.id, teardown_error)
            raise
        if state.task_error is not None:  # a task of the run failed (and cancelled the start)
            if failure is None:
                failure = StepFailed(run.failure("unknown"))
                failure.__cause__ = state.task_error
        elif scope.cancelled_caught:
            teardown_error = await rollback(CommonEvent.START_ABORTED)
            if teardown_error is not None:
                raise StartFailed(teardown_error.diagnostic, quiescent=False) from teardown_error
            raise StartAborted(self._aborted_text())
        if failure is None and refused is None and run.resuming:
            failure = self._resumed()
        if failure is not None:
            await self._fail(failure, limit)
        if refused is not None:
            await self._refuse_resume(refused)

    async def _fail(self, failure: StepFailed, limit: LimitFacts | None) -> NoReturn:
        """The start failed: roll back, then raise ``StartFailed`` with closed lines."""
        state = self._state
        run = self._run
        state.failure_category = failure.facts.category
        log.info("run %s: start failed: %s", run.id, failure.diagnostic)
        if failure.__cause__ is not None:
            raw_failure("run %s: the raw start failure", run.id, exc=failure.__cause__)
        if limit is None:
            limit = self._limits.kernel_limit()  # read before the rollback removes the groups
        teardown_error = await self._teardown.rollback(CommonEvent.START_FAILED)
        text = bound_diagnostic(
            join_lines(
                failure.facts.line(),
                limit.line() if limit is not None else None,
                failure.extra_line,
                teardown_error.diagnostic if teardown_error else None,
            )
        )
        assert text is not None
        raise StartFailed(text, quiescent=teardown_error is None) from failure

    def _publish(self, abort: AbortSignal | None) -> None:
        """The run is the caller's now: its first turn starts."""
        state = self._state
        run = self._run
        state.published = True
        state.journal.published(run)
        if state.cancelled_locally:  # cancelled while starting: settled already
            self._settlement.record(CommonEvent.CANCELLED)
        if abort is not None:
            turns = self._turns
            state.remove_abort = abort.add_callback(turns.aborted if state.conversation else turns.cancel)
        if run.resuming:
            self._publish_idle()
        else:
            assert state.task_group is not None
            state.task_group.start_soon(self._turns.drive_and_settle)

    async def _refuse_resume(self, refused: NotResumable) -> None:
        """The agent cannot continue the session: roll back, then ``ConversationOver``
        ``not resumable`` (closed facts; a rollback failure is a ``StartFailed``)."""
        run = self._run
        log.info("run %s: the agent cannot resume the session", run.id)
        raw_failure("run %s: the raw refusal", run.id, exc=refused)
        teardown_error = await self._teardown.rollback(CommonEvent.START_FAILED)
        if teardown_error is not None:
            raise StartFailed(teardown_error.diagnostic, quiescent=False) from refused
        raise not_resumable(run.vocabulary.label, self._state.turn_number) from None

    def _resumed(self) -> StepFailed | None:
        """The handshake continued the session: the chart goes ``resumed`` to ``idle``.  A
        chart that refuses (the handshake left it outside its resume stage: a provider's
        bug) fails the start as ``unknown``."""
        try:
            self._run.machine.send(CommonEvent.RESUMED)
        except Exception as exc:
            failure = StepFailed(self._run.failure("unknown"))
            failure.__cause__ = exc
            return failure
        return None

    def _publish_idle(self) -> None:
        """A cold resume is published idle, without a turn (``run.turn`` is the last turn's
        number), and the idle session is watched."""
        state = self._state
        state.resumed_idle = True
        state.turn_done.set()
        state.progress.settle(final=False)  # idle, as after a turn: the clock stops
        self._limits.watch_idle(self._turns.end_conversation)

    async def _enter_workspace(self) -> None:
        """``workspace = "worktree"``: make the run's worktree before the child is spawned."""
        workspace = self._state.workspace
        run = self._run
        if workspace.mode == "worktree" and workspace.checkout is None:
            cwd = run.resolve_cwd()
            try:
                await workspace.enter(cwd, run.id)
            except WorkspaceFailed as exc:
                category = "configuration" if "configuration" in run.vocabulary.categories else "unknown"
                raise StepFailed(run.failure(category), extra_line=exc.line) from exc

    def _aborted_text(self) -> str:
        return f"subagent request was aborted before the {self._run.vocabulary.label} child started"
