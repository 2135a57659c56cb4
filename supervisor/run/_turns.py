"""The turn loop: driving and settling each turn, local cancellation, sending the next
turn of a conversation, and ending the conversation.

Every turn (the request's task is turn 1, each ``send`` the next) goes through the one
per-turn driver, :meth:`Turns.drive_and_settle`, inside its own turn guard
(``timeout_ms`` counts from spawn for turn 1, from the send for the others): it calls
``drive()``, settles the turn's result once, then, in a conversation, either moves the
chart to ``idle`` (the child lives and ``session_usable()``) and watches the idle
session (``idle_timeout_ms``, ``session_lost()``), or ends the conversation and takes
the tree down at once.

Cancellation rules kept here:

* **The driver's scope** (``RunState.drive_scope``, one per turn) covers ``drive()`` and
  its turn guard, nothing else: cancelling it stops the driver, never the run's other
  tasks (readers, watchers) nor the teardown.  It is cancelled by a local cancellation,
  a limit, a failed task of the run, the abort signal or ``dispose()``.
* **A local cancellation** (``cancel()``, the abort signal of a one-shot run, or the task
  awaiting ``send`` being cancelled) settles the turn ``aborted`` at once, keeping the
  partial output, and asks the child to stop (the protocol's cancel, best effort, on the
  run's group, at most ``REMOTE_CANCEL_TIMEOUT``; never on a closed group).  After
  publication the chart records ``cancelled`` at once; before it, the start's rollback
  records the end, or the publication records ``cancelled`` and the driver, its scope
  cancelled already, stops at its first checkpoint.
* **A cancelled turn of a conversation winds down**: its driver keeps reading until the
  agent has ended the turn, its scope's deadline moved to at most ``dispose_grace_ms``
  from now; the next ``send`` waits for it (and for the protocol's cancel to go out).
  A driver cut off by that bound ends the conversation, as a turn a limit stopped does.
* **The abort signal, ``dispose()`` and leaving the ``async with``** end the
  conversation, cancelling a running turn at once (no wind-down).
* **A task of the run that raises** (a provider's bug) cancels the start before
  publication; after it, it settles the turn ``unknown`` and cuts the driver off, or,
  between turns, ends the conversation.  Its error goes to the host log only.
* Only a cancellation passes through a hook: anything else a hook raises is a
  provider's bug and becomes a closed ``unknown`` failure.
"""

from __future__ import annotations

import logging

import anyio

from machines import IDLE, SETTLED, CommonEvent
from supervisor._diagnostic import LimitFacts
from supervisor._errors import ConversationEnd, ConversationOver, InvalidRequest, TurnInProgress
from supervisor._seam import StopReason, SubagentResult
from supervisor.common._clean import clean_text
from supervisor.common._logging import raw_failure
from supervisor.run._guard import is_cancellation
from supervisor.run._settle import Settlement
from supervisor.run._state import Hooks, RunState, StepFailed
from supervisor.run._teardown import REMOTE_CANCEL_TIMEOUT, Teardown
from supervisor.run._watch import Limits

log = logging.getLogger("supervisor")


class Turns:
    """One run's turns: the driver, cancellation, ``send`` and the conversation's end."""

    def __init__(
        self, state: RunState, run: Hooks, settlement: Settlement, limits: Limits, teardown: Teardown
    ) -> None:
        self._state = state
        self._run = run
        self._settlement = settlement
        self._limits = limits
        self._teardown = teardown

    # -- what a caller awaits -----------------------------------------------------------

    async def result(self) -> SubagentResult:
        state = self._state
        if state.resumed_idle:
            raise InvalidRequest("a resumed conversation has run no turn yet: send one first")
        await state.settled.wait()
        return state.results[-1] if state.result is None else state.result

    async def output_arrived(self) -> None:
        state = self._state
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:

                async def settled() -> None:
                    await state.settled.wait()
                    scope.cancel()

                tg.start_soon(settled)
                await state.output_arrived.wait()
                scope.cancel()

    # -- cancellation -------------------------------------------------------------------

    def cancel(self) -> None:
        """Local cancellation of the running turn (a conversation's turn winds down)."""
        self.cancel_turn(wind_down=self._state.conversation and self._state.over is None)

    def cancel_turn(self, *, wind_down: bool) -> None:
        state = self._state
        if state.resumed_idle:  # a resumed conversation before its first send: no turn to cancel
            return
        if state.result is not None:
            # A cancelled turn still winding down stops now.  A driver that has ended (every
            # one-shot run's, at dispose) has left its scope: nothing to cancel, and anyio's
            # ``cancel`` would still format the calling task for its reason (about 10 us).
            if not wind_down and not state.turn_done.is_set():
                state.drive_scope.cancel()
            return
        state.cancelled_locally = True
        self._settlement.settle_aborted()
        if state.published:  # before publication, the start's own rollback records the end
            self._settlement.record(CommonEvent.CANCELLED)
        if wind_down and state.published:
            # The driver reads on until the agent ends the turn, bounded by the grace.
            state.drive_scope.deadline = min(
                state.drive_scope.deadline, anyio.current_time() + self._run.config.term_grace
            )
            self._ask_remote_cancel()
        else:
            self._stop_turn()

    def aborted(self) -> None:
        """The abort signal, in a conversation: cancel the running turn and end it all."""
        if self._state.over is None:
            self.cancel_turn(wind_down=False)
            self.end_conversation(ConversationEnd.ABORTED, CommonEvent.CONVERSATION_ENDED)

    def close(self) -> None:
        """``dispose()``: no more turns; a running turn is cancelled at once."""
        state = self._state
        if state.over is None:
            state.over = ConversationEnd.CLOSED
            state.over_known.set()
        self._limits.stop_idle()
        try:
            self.cancel_turn(wind_down=False)
        except Exception as exc:  # whatever cancel() does, the teardown runs
            log.error("run %s: local cancellation failed; tearing down anyway", self._run.id)
            raw_failure("run %s: the raw cancellation failure", self._run.id, exc=exc)
            self._settlement.settle(SubagentResult(output="", stop_reason=StopReason.ABORTED))

    def task_failed(self, exc: BaseException) -> None:
        """A task on the run's task group raised (a provider's bug, as a rule).

        Before publication the start is cancelled and fails as ``unknown``; after it the
        run settles as an ``unknown`` failure at once.  Either way the tree is torn down
        (by the rollback, or by the dispose every published run gets) and the error
        itself goes to the host log only: it never reaches the caller's task group.
        """
        state = self._state
        run = self._run
        log.error("run %s: a task of the run failed in stage %s", run.id, run.stage)
        raw_failure("run %s: the raw task failure", run.id, exc=exc)
        if state.task_error is None:
            state.task_error = exc
        if not state.published:
            if state.start_scope is not None:
                state.start_scope.cancel()
            return
        state.turn_stopped = ConversationEnd.SESSION_UNUSABLE
        state.drive_scope.cancel()
        if state.result is None and not state.resumed_idle:
            self._settlement.settle_failure(run.failure("unknown"))
        elif state.conversation and run.machine.state_name == IDLE:  # between turns: no driver to end it
            self.end_conversation(ConversationEnd.SESSION_UNUSABLE, CommonEvent.CONVERSATION_ENDED)

    def _stop_turn(self) -> None:
        """Stop driving the turn, and ask the child to stop it too (best effort)."""
        self._state.drive_scope.cancel()
        self._ask_remote_cancel()

    def _ask_remote_cancel(self) -> None:
        state = self._state
        if state.task_group is not None and not state.closed.is_set():  # never on a closed group
            state.remote_cancel_done = anyio.Event()
            state.task_group.start_soon(self._best_effort_remote_cancel, state.remote_cancel_done)

    async def _best_effort_remote_cancel(self, done: anyio.Event) -> None:
        try:
            with anyio.move_on_after(REMOTE_CANCEL_TIMEOUT):
                await self._run.remote_cancel()
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            raw_failure("run %s: remote cancel failed", self._run.id, exc=exc)
        finally:
            done.set()

    def _stop_for_limit(self, limit: LimitFacts) -> None:
        """The supervisor's own limit (time, silence) stopped the turn: settle ``error`` at
        once, keeping partial output, and stop the turn as a local cancellation does."""
        state = self._state
        run = self._run
        if state.result is not None:
            return
        log.warning("run %s: stopped by its %s limit in stage %s", run.id, limit.resource, run.stage)
        self._settlement.settle_failure(run.failure(run.vocabulary.start_timeout_category), limit.line())
        state.turn_stopped = ConversationEnd.LIMIT
        self._stop_turn()

    # -- the driver -----------------------------------------------------------------------

    async def drive_and_settle(self) -> None:
        """The one per-turn driver: every turn, the first and each sent one, runs here."""
        state = self._state
        done = state.turn_done
        try:
            result, raised = await self._drive_turn()
            if state.conversation:
                self._after_turn(ended=result is not None, raised=raised)
        finally:
            done.set()

    async def _drive_turn(self) -> tuple[SubagentResult | None, bool]:
        """Drive the current turn and settle it; its result (None when the driver was cut
        off) and whether ``drive()`` raised something other than :class:`StepFailed`."""
        state = self._state
        run = self._run
        settlement = self._settlement
        result: SubagentResult | None = None
        category: str | None = None  # a failure's, when known as a fact here
        raised = False
        with state.drive_scope:
            async with self._limits.guarded_turn(self._stop_for_limit):
                try:
                    result = await run.drive()
                except StepFailed as exc:  # its category is kept
                    log.warning("run %s: failed in stage %s", run.id, run.stage)
                    if exc.__cause__ is not None:
                        raw_failure("run %s: the raw failure", run.id, exc=exc.__cause__)
                    result = settlement.failure_result(exc.facts, exc.extra_line)
                    category = exc.facts.category
                except BaseException as exc:  # SystemExit and the like too: only a cancellation goes on
                    if is_cancellation(exc):
                        raise
                    log.warning("run %s: failed in stage %s", run.id, run.stage)
                    raw_failure("run %s: the raw failure", run.id, exc=exc)
                    result, category, raised = (
                        settlement.failure_result(run.failure("unknown")),
                        "unknown",
                        True,
                    )
        if result is None:  # cancelled locally, stopped by a limit, or a task failed: already settled
            return None, raised
        if state.cancelled_locally:  # a cancelled turn the agent has now ended: settled already
            return result, raised
        if state.result is None:
            kernel_limit = self._limits.kernel_limit()
            if kernel_limit is not None:
                result, category = self._limits.limited(result, category, kernel_limit)
        if run.machine.state_name != SETTLED:
            settlement.record(CommonEvent.FAILED)
        settlement.settle(result, category=category)
        return result, raised

    # -- conversations --------------------------------------------------------------------

    async def send(self, task: str) -> SubagentResult:
        """Run the next turn of the conversation with ``task``; return its result."""
        state = self._state
        run = self._run
        if not isinstance(task, str) or not task.strip():
            raise InvalidRequest("subagent task must not be blank")
        if not state.published:
            raise InvalidRequest("subagent run has not been started")
        if not state.conversation:
            raise InvalidRequest("subagent run was not started as a conversation")
        if state.over is not None:
            await state.over_known.wait()
            self._raise_if_over()
        if state.sending or (state.result is None and not state.resumed_idle):
            raise TurnInProgress()
        state.sending = True
        try:
            await state.turn_done.wait()  # a cancelled turn winds down first
            if state.remote_cancel_done is not None:  # its protocol cancel is done with
                await state.remote_cancel_done.wait()
            if state.over is not None:
                await state.over_known.wait()
                self._raise_if_over()
            try:
                run.begin_turn()
            except BaseException as exc:  # a provider's bug: no turn can begin on this session
                if is_cancellation(exc):
                    raise
                log.error("run %s: begin_turn() failed; the conversation ends", run.id)
                raw_failure("run %s: the raw begin_turn failure", run.id, exc=exc)
                self.end_conversation(ConversationEnd.SESSION_UNUSABLE, CommonEvent.CONVERSATION_ENDED)
                self._raise_if_over()
            # A lone surrogate cannot travel to the child as UTF-8: U+FFFD, as in a request's task.
            self._begin_next(clean_text(task))
        finally:
            state.sending = False
        number, settled = state.turn_number, state.settled
        try:
            await settled.wait()
        except anyio.get_cancelled_exc_class():
            if state.turn_number == number:
                self.cancel()
            raise
        return state.results[number - state.first_turn]

    def conversation_over(self) -> ConversationOver | None:
        """The error a ``send`` would raise now, once why the conversation ended is final."""
        state = self._state
        return self._over_error() if state.conversation and state.over_known.is_set() else None

    def _over_error(self) -> ConversationOver | None:
        state = self._state
        if state.over is None:
            return None
        facts = state.over_exit
        return ConversationOver(
            self._run.vocabulary.label,
            state.turn_number,
            state.over,
            exit_code=facts.exit_code if facts else None,
            signal=facts.signal if facts else None,
            limit=None if state.over_limit is None else state.over_limit.line(),
        )

    def _raise_if_over(self) -> None:
        over = self._over_error()
        if over is not None:
            raise over

    def _begin_next(self, task: str) -> None:
        state = self._state
        run = self._run
        self._limits.stop_idle()
        previous = state.result
        state.resumed_idle = False
        state.turn_number += 1
        state.turn_task = task
        state.turn_started_at = anyio.current_time()
        run.audit.turn = state.turn_number
        state.telemetry.next_turn(run, previous)  # the settled turn's span ends, the next one opens
        state.progress.begin_turn()  # after the settled turn's span took its counts
        state.journal.next_turn(run)
        state.new_turn()
        self._settlement.record(CommonEvent.TURN_SENT)
        assert state.task_group is not None
        state.task_group.start_soon(self.drive_and_settle)

    def _after_turn(self, *, ended: bool, raised: bool) -> None:
        """A conversation's turn is over at the child (or its driver was cut off):
        go idle, or end the conversation."""
        state = self._state
        if state.over is not None:  # ended while the turn ran (dispose, abort)
            return
        if not ended:  # cut off: a limit, a failed task, or a cancelled turn not ended in time
            reason = state.turn_stopped or ConversationEnd.CANCEL_UNFINISHED
            self.end_conversation(reason, CommonEvent.CONVERSATION_ENDED)
        elif raised or not self._session_usable():
            self.end_conversation(None, CommonEvent.CONVERSATION_ENDED)
        else:
            self._settlement.record(CommonEvent.TURN_ENDED)
            self._limits.watch_idle(self.end_conversation)

    def _session_usable(self) -> bool:
        try:
            return self._run.session_usable()
        except BaseException as exc:  # a provider's bug: the session cannot be trusted with a turn
            if is_cancellation(exc):
                raise
            log.error("run %s: session_usable() failed; the conversation ends", self._run.id)
            raw_failure("run %s: the raw session_usable failure", self._run.id, exc=exc)
            return False

    def end_conversation(self, reason: ConversationEnd | None, event: CommonEvent) -> None:
        """The conversation is over: no more turns; the tree goes down now, in the background.

        ``reason`` None: the session was lost.  That is ``child exited`` (with its exit
        facts) when the child's exit is observed within the EOF grace, before any signal
        of the teardown, else ``session unusable``.
        """
        state = self._state
        if state.over is not None:
            return
        state.over = reason or ConversationEnd.SESSION_UNUSABLE
        self._limits.stop_idle()
        state.progress.end()
        if reason is not None:
            state.over_known.set()
        if self._teardown.claim(event):
            assert state.task_group is not None
            state.task_group.start_soon(self._teardown.run_claimed, reason is None)
