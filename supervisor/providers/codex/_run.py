"""One Codex run: spawn ``codex app-server``, hand-shake, run a turn, settle.

A conversation is ``turn/start`` again on the same thread, one turn at a time: every
turn's state (its id, answers, decision, outcome) lives in a :class:`_TurnState` of
its own, so a notification of an earlier turn can never reach a later one.  A turn's
usage is what the thread's cumulative token counts (``thread/tokenUsage/updated``)
grew by during it; the app-server reports no cost.

Stages and events are :mod:`machines.codex`.  What reaches a result is built from
closed facts only: the stage (read from the machine), a category from a fixed table,
an HTTP status when it is an integer, the process's own exit facts, and the latest
unattended decision.  The app-server's messages, stderr and payloads go to the host
log (``supervisor``) and nowhere else.

Choices the contract leaves open (README: Codex):

* every notification is handled in the reader, in frame order, as it arrives, so a
  local cancel keeps all the partial output received so far; those that arrive before
  ``turn/start`` names the turn are buffered and replayed (the answer may be complete
  before the response that names it);
* the answer is the last completed ``final_answer`` message, else the last one with
  no phase; ``commentary`` and ``partial_answer`` never count as the answer (a
  ``partial_answer`` is kept as partial output), and an unknown phase fails closed;
* a failed turn whose ``turn.error`` is null is classified from the last ``error``
  notification that will not be retried;
* the app-server's requests are answered (never granting authority) whichever thread
  or turn they name: the automatic reviewer and sub-agents run threads of their own,
  and declining is safe for any of them;
* a startup step that fails because the app-server went away is ``process`` (with
  its exit facts) when the exit is observed within ``dispose_grace_ms``, else
  ``unknown`` in the stage it was in; cwd and spawn failures are
  ``initialize/unknown`` (the Codex vocabulary has no ``configuration`` category).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
from pydantic import ValidationError

from machines.codex import CODEX_VOCABULARY, CodexEvent, CodexLifecycle
from supervisor.provider import (
    FailureFacts,
    LineReader,
    ManagedProcess,
    NotResumable,
    ProviderRun,
    RunContext,
    StepFailed,
    StopReason,
    SubagentResult,
    Usage,
    join_lines,
    raw_failure,
)
from supervisor.providers.codex._answers import Answers
from supervisor.providers.codex._classify import classify
from supervisor.providers.codex._command import app_server_argv, thread_permissions
from supervisor.providers.codex._config import Config
from supervisor.providers.codex._policy import answer_request
from supervisor.providers.codex._progress import APPROVALS, TOOL_KINDS, plan_statuses, tool_call
from supervisor.providers.codex._protocol import (
    AgentMessageDelta,
    AgentMessageItem,
    ClientInfo,
    ErrorNotification,
    InitializeParams,
    InitializeResult,
    ItemNotification,
    StatusItem,
    TextInput,
    ThreadResumeParams,
    ThreadResumeResult,
    ThreadStartParams,
    ThreadStartResult,
    ThreadTokenUsage,
    TurnCompleted,
    TurnError,
    TurnInterruptParams,
    TurnInterruptResult,
    TurnStartParams,
    TurnStartResult,
)
from supervisor.providers.codex._wire import (
    AppServerWire,
    CloseReason,
    Direction,
    Notification,
    RpcError,
    RunTap,
    ServerRequest,
    WireClosed,
    WireError,
)
from supervisor.wire import client_version

log = logging.getLogger("supervisor")

PLAN_UPDATED: Final = "turn/plan/updated"
_TURN_METHODS: Final = frozenset(
    {"turn/completed", "item/started", "item/completed", "item/agentMessage/delta", "error", PLAN_UPDATED}
)
"""The notifications a run reads; every other one is ignored."""

TOKEN_USAGE: Final = "thread/tokenUsage/updated"

CLIENT_NAME: Final = "subagent_supervisor"
CLIENT_TITLE: Final = "subagent-supervisor"


@dataclass
class _TurnState:
    """One turn of the thread, from ``turn/start`` to ``turn/completed``."""

    answers: Answers
    id: str | None = None
    start_sent: bool = False
    known: anyio.Event = field(default_factory=anyio.Event)  # turn/start answered or failed
    start_error: WireError | None = None
    early: list[Notification] = field(default_factory=list)
    outcome: SubagentResult | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    decision: str | None = None
    final_error: TurnError | None = None
    completed: bool = False  # turn/completed for this turn was received
    tokens: ThreadTokenUsage | None = None  # the thread's counts when the turn began


def _tokens_used(before: ThreadTokenUsage | None, after: ThreadTokenUsage | None) -> Usage | None:
    """What the thread's cumulative counts grew by during one turn."""
    if after is None or after == before:
        return None
    base = before or ThreadTokenUsage()
    return Usage.from_reported(
        {
            "input_tokens": after.input_tokens - base.input_tokens,
            "output_tokens": after.output_tokens - base.output_tokens,
            "cached_input_tokens": after.cached_input_tokens - base.cached_input_tokens,
        }
    )


class CodexRun(ProviderRun[Config]):
    vocabulary = CODEX_VOCABULARY
    lifecycle = CodexLifecycle
    tool_kinds = TOOL_KINDS

    def __init__(
        self,
        context: RunContext[Config],
        *,
        binary: Path,
        tap: RunTap | None,
    ) -> None:
        super().__init__(context)
        self._binary = binary
        self._mode = context.config.permission_mode
        self._overrides = tuple(context.config.config)
        self._tap = tap
        self._wire: AppServerWire | None = None
        self._thread_id: str | None = None
        self._tokens: ThreadTokenUsage | None = None  # the thread's latest cumulative counts
        self._this_turn = _TurnState(Answers(self.config.max_output_bytes))

    # -- start ------------------------------------------------------------------------

    async def handshake(self) -> None:
        config = self.config
        cwd = self.resolve_cwd(category="unknown")
        spec = self.spawn_spec(app_server_argv(self._binary, self._overrides), cwd)
        process = await self.spawn_child(spec, failed_as="unknown")
        wire = AppServerWire(
            LineReader(process.stdout, config.max_frame_bytes),
            process.stdin,
            answer=self._answer_request,
            notify=self._on_notification,
            closed=self._on_wire_closed,
            tap=self._frame_tap if self._tap is not None else None,
        )
        self._wire = wire
        self.task_group.start_soon(wire.run)
        self.task_group.start_soon(self._watch_exit, process, wire)
        try:
            params = InitializeParams(
                clientInfo=ClientInfo(name=CLIENT_NAME, title=CLIENT_TITLE, version=client_version())
            )
            await wire.request("initialize", params.wire(), InitializeResult)
            await wire.notify("initialized")
            self.fact(CodexEvent.INITIALIZED)
            if self.session is not None and self.session.resume is not None:
                await self._resume_thread(wire, self.session.resume, cwd)
                return
            keep = self.session is not None and self.session.keep
            thread = ThreadStartParams.model_validate(
                {"cwd": str(cwd), "ephemeral": not keep, **thread_permissions(self._mode)}
            )
            started = await wire.request("thread/start", thread.wire(), ThreadStartResult)
        except WireError as exc:
            raise StepFailed(await self._wire_failure(exc)) from exc
        if started.thread.ephemeral is keep:  # not the thread asked for: never run a turn on it
            raise StepFailed(self.failure("unknown"))
        self._thread_id = started.thread.id
        self.agent_session_id = started.thread.id
        self.fact(CodexEvent.THREAD_STARTED)

    async def _resume_thread(self, wire: AppServerWire, thread_id: str, cwd: Path) -> None:
        """A cold resume, in ``thread-start``: ``thread/resume`` of a thread kept on disk,
        with today's permissions.  An error answer (no such thread, an ephemeral one) is
        the app-server refusing: :class:`NotResumable`."""
        params = ThreadResumeParams.model_validate(
            {"threadId": thread_id, "cwd": str(cwd), **thread_permissions(self._mode)}
        )
        log.info("run %s: continuing the agent's session with thread/resume", self.id)
        try:
            resumed = await wire.request("thread/resume", params.wire(), ThreadResumeResult)
        except RpcError as exc:
            raise NotResumable("the app-server refused to resume the thread") from exc
        if resumed.thread.id != thread_id:  # another thread than the one asked for
            raise StepFailed(self.failure("unknown"))
        self._thread_id = thread_id
        self.agent_session_id = thread_id

    def _frame_tap(self, direction: Direction, frame: Mapping[str, Any]) -> None:
        assert self._tap is not None
        self._tap(self.id, direction, frame)

    async def _watch_exit(self, process: ManagedProcess, wire: AppServerWire) -> None:
        """Once the app-server is gone, let the reader drain briefly, then close the wire
        (a descendant holding stdout open must not keep the run waiting)."""
        await process.wait_exit()
        with anyio.move_on_after(self.config.eof_grace):
            await wire.wait_closed()
        wire.close(CloseReason.EXITED)

    async def _wire_failure(self, exc: WireError) -> FailureFacts:
        """Facts for a failed exchange: ``process`` when the app-server's exit is observed."""
        if isinstance(exc, WireClosed) and exc.transport_lost and self.process is not None:
            facts = await self.process.wait_exit(within=self.config.term_grace)
            if facts is not None:
                self.fact(CodexEvent.APP_SERVER_EXITED)
                return self.failure("process", exit_code=facts.exit_code, signal=facts.signal)
        return self.failure("unknown")

    # -- drive ------------------------------------------------------------------------

    async def drive(self) -> SubagentResult:
        wire = self._wire
        assert wire is not None
        assert self._thread_id is not None
        turn = self._this_turn
        self.task_group.start_soon(self._start_turn, wire, self._thread_id, turn)
        await turn.done.wait()
        if turn.outcome is not None:
            return turn.outcome
        if turn.completed:  # a cancelled turn the app-server has ended (its result is settled)
            return SubagentResult(output=self.partial_output(), stop_reason=StopReason.ABORTED)
        error = turn.start_error or wire.closed_error()
        return self._failed(await self._wire_failure(error))

    async def _start_turn(self, wire: AppServerWire, thread_id: str, turn: _TurnState) -> None:
        """``turn/start`` outside the drive scope, so a local cancel can still learn the turn."""
        params = TurnStartParams(threadId=thread_id, input=[TextInput(text=self.task)])
        turn.start_sent = True
        try:
            await wire.request(
                "turn/start",
                params.wire(),
                TurnStartResult,
                on_result=lambda started: self._turn_named(turn, started),
            )
        except WireError as exc:
            turn.start_error = exc
            turn.done.set()
        finally:
            turn.known.set()

    def _turn_named(self, turn: _TurnState, started: TurnStartResult) -> None:
        """In the reader, in frame order: the turn is known; replay what came before."""
        turn.id = started.turn.id
        if turn.outcome is None:
            self.fact(CodexEvent.TURN_STARTED)
        early, turn.early = turn.early, []
        for event in early:
            self._consume(turn, event)

    def _on_notification(self, event: Notification) -> None:
        """Called by the reader for every notification, in order, as it arrives."""
        if event.method == TOKEN_USAGE:
            self._on_token_usage(event)
            return
        turn = self._this_turn
        if turn.outcome is not None:
            return
        if turn.id is None:
            if event.method in _TURN_METHODS:
                turn.early.append(event)  # replayed once turn/start names the turn
            return
        self._consume(turn, event)

    def _on_token_usage(self, event: Notification) -> None:
        """The thread's cumulative token counts (any turn's: the difference is a turn's use)."""
        if event.params.get("threadId") != self._thread_id:
            return
        try:
            self._tokens = ThreadTokenUsage.model_validate(event.params.get("tokenUsage", {}).get("total"))
        except (ValidationError, AttributeError) as exc:
            raw_failure("run %s: malformed token usage", self.id, exc=exc)
            return
        if self._this_turn.outcome is None:
            self.note_usage(_tokens_used(self._this_turn.tokens, self._tokens))

    def _on_wire_closed(self, reason: CloseReason) -> None:
        self._this_turn.done.set()

    def _consume(self, turn: _TurnState, event: Notification) -> None:
        if turn.outcome is not None:
            return
        try:
            result = self._notification(turn, event)
        except ValidationError as exc:
            log.warning("run %s: malformed notification", self.id)
            raw_failure("run %s: malformed %.80r notification", self.id, event.method, exc=exc)
            result = self._failed(self.failure("unknown"))
        if result is not None:
            self._finish(turn, result)

    def _finish(self, turn: _TurnState, result: SubagentResult) -> None:
        if turn.outcome is None:
            turn.outcome = result
            turn.done.set()

    def _notification(self, turn: _TurnState, event: Notification) -> SubagentResult | None:
        method, params = event.method, event.params
        if params.get("threadId") != self._thread_id:
            return None  # another thread's (e.g. the automatic reviewer's), or none
        if method == "turn/completed":
            completed = TurnCompleted.model_validate(params)
            if completed.turn.id != turn.id:
                return None
            turn.completed = True
            if self.cancelled_locally:  # the end of a cancelled turn: settled already
                self.fact(CodexEvent.TURN_COMPLETED)
                turn.done.set()
                return None
            return self._terminal(completed)
        if method not in _TURN_METHODS:
            return None
        if params.get("turnId") != turn.id:
            return None
        if method == "item/agentMessage/delta":
            delta = AgentMessageDelta.model_validate(params)
            turn.answers.delta(delta.item_id, delta.delta)
            self.note_answer_bytes(len(delta.delta.encode("utf-8", "surrogatepass")))
            if turn.answers.partial():
                self.note_output()
        elif method == PLAN_UPDATED:
            self.note_plan(plan_statuses(params))
        elif method == "error":
            error = ErrorNotification.model_validate(params)
            log.info("run %s: codex error (retry: %s)", self.id, error.will_retry)
            raw_failure("run %s: codex error: %s", self.id, error.error.message)
            if not error.will_retry:
                turn.final_error = error.error
        else:
            self._on_item(turn, method, ItemNotification.model_validate(params).item)
        return None

    def _on_item(self, turn: _TurnState, method: str, item: Mapping[str, Any]) -> None:
        kind = item.get("type")
        call = tool_call(method, item)
        if call is not None:
            self.note_tool_call(*call)
        if kind == "agentMessage":
            message = AgentMessageItem.model_validate(item)
            if method == "item/started":
                turn.answers.started(message)
            else:
                turn.answers.completed(message)
        elif kind in ("commandExecution", "fileChange") and method == "item/completed":
            status = StatusItem.model_validate(item)
            if status.status == "declined":
                self._decide("command execution" if kind == "commandExecution" else "file change", "declined")

    def _terminal(self, completed: TurnCompleted) -> SubagentResult:
        self.fact(CodexEvent.TURN_COMPLETED)
        turn = completed.turn
        usage = _tokens_used(self._this_turn.tokens, self._tokens)
        if turn.status == "completed":
            answer = self._this_turn.answers.answer()
            if answer is not None and answer.strip():
                return SubagentResult(output=answer, stop_reason=StopReason.COMPLETED, usage=usage)
            return self._failed(self.failure("invalid-result"), usage=usage)
        if turn.status == "failed":
            error = turn.error or self._this_turn.final_error
            if error is not None:
                log.warning("run %s: codex turn failed", self.id)
                raw_failure("run %s: codex turn failed: %s", self.id, error.message)
            verdict = classify(error.codex_error_info if error is not None else None)
            if verdict.sandbox_error:
                self._decide("sandbox execution", "failed")
            facts = self.failure(verdict.category.value, http_status=verdict.http_status)
            stop = StopReason.MAX_TOKENS if verdict.context_window_exceeded else StopReason.ERROR
            return self._failed(facts, stop_reason=stop, usage=usage)
        # interrupted without a local cancel (a local cancel never gets here), or a
        # status that is not terminal at all.
        log.warning("run %s: codex turn ended with a status that is not a success", self.id)
        raw_failure("run %s: codex turn ended with status %r", self.id, turn.status[:40])
        return self._failed(self.failure("unknown"), usage=usage)

    def _failed(
        self, facts: FailureFacts, *, stop_reason: StopReason = StopReason.ERROR, usage: Usage | None = None
    ) -> SubagentResult:
        return SubagentResult(
            output=self.partial_output(),
            stop_reason=stop_reason,
            diagnostic=join_lines(facts.line(), self._this_turn.decision),
            usage=usage,
        )

    def partial_output(self) -> str:
        return self._this_turn.answers.partial()

    # -- conversations ------------------------------------------------------------------

    def begin_turn(self) -> None:
        self._this_turn = _TurnState(Answers(self.config.max_output_bytes), tokens=self._tokens)

    def session_usable(self) -> bool:
        """The app-server lives, the wire is open, and the thread is idle: the turn was
        completed there, or ``turn/start`` was refused (no turn began)."""
        wire, turn = self._wire, self._this_turn
        if not super().session_usable() or wire is None or wire.close_reason is not None:
            return False
        return turn.completed or isinstance(turn.start_error, RpcError)

    async def session_lost(self) -> None:
        assert self._wire is not None
        await self._wire.wait_closed()  # closed on EOF, a broken pipe or the app-server's exit

    # -- the app-server's requests ----------------------------------------------------

    def _decide(self, request: str, decision: str) -> None:
        """Record an unattended decision (the turn's latest is kept)."""
        self._this_turn.decision = self.vocabulary.permission_line(
            mode=self._mode.value, request=request, decision=decision
        )

    def _answer_request(self, request: ServerRequest) -> Mapping[str, Any] | None:
        """Answer without granting authority; None for a request this client does not serve."""
        raw_failure(
            "run %s: codex asked %.80r; answering without granting authority", self.id, request.method
        )
        answer = answer_request(request.method, request.params)
        if answer is None:
            log.warning("run %s: unsupported app-server request; the run fails", self.id)
            self._finish(self._this_turn, self._failed(self.failure("unknown")))
            return None
        self._decide(answer.request, answer.decision)
        if answer.request in APPROVALS:
            self.note_permission("denied")  # never granted: declined or cancelled
        return answer.response

    # -- cancel and teardown ----------------------------------------------------------

    async def remote_cancel(self) -> None:
        """``turn/interrupt`` for the owned turn, best effort (the base bounds the wait)."""
        wire, turn = self._wire, self._this_turn
        if wire is None or self._thread_id is None or not turn.start_sent:
            return
        await turn.known.wait()
        if turn.id is None or turn.completed:
            return
        params = TurnInterruptParams(threadId=self._thread_id, turnId=turn.id)
        await wire.request("turn/interrupt", params.wire(), TurnInterruptResult)

    async def after_ladder(self) -> None:
        if self._wire is not None:
            self._wire.close(CloseReason.STOPPED)
