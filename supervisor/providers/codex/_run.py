"""One Codex run: spawn ``codex app-server``, hand-shake, run one turn, settle.

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

import enum
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

import anyio
from pydantic import ValidationError

from machines.codex import CodexLifecycle
from supervisor._diagnostic import FailureFacts, ProviderLabel, codex_permission_line, join_lines
from supervisor._logging import raw_failure
from supervisor._run import ProviderRun, StepFailed
from supervisor._seam import StopReason, SubagentResult
from supervisor.process import LineReader, ManagedProcess
from supervisor.providers.codex._classify import classify
from supervisor.providers.codex._protocol import (
    AgentMessageDelta,
    AgentMessageItem,
    ApprovalResponse,
    ClientInfo,
    ElicitationResponse,
    ErrorNotification,
    InitializeParams,
    InitializeResult,
    ItemNotification,
    PermissionsResponse,
    StatusItem,
    TextInput,
    ThreadStartParams,
    ThreadStartResult,
    TurnCompleted,
    TurnError,
    TurnInterruptParams,
    TurnInterruptResult,
    TurnStartParams,
    TurnStartResult,
    UserInputResponse,
)
from supervisor.providers.codex._wire import (
    AppServerWire,
    CloseReason,
    Direction,
    Notification,
    RunTap,
    ServerRequest,
    WireClosed,
    WireError,
)

log = logging.getLogger("supervisor")

APP_SERVER_ARGS: Final = (
    "app-server",
    "-c",
    "features.unbounded_connection_retries=false",
    "-c",
    "features.shell_snapshot=false",
)
"""Without the first, a refused model connection retries forever; the second keeps a
login-shell snapshot (which can stall ~10 s) from running at start."""

_TURN_METHODS: Final = frozenset(
    {"turn/completed", "item/started", "item/completed", "item/agentMessage/delta", "error"}
)
"""The notifications a run reads; every other one is ignored."""

CLIENT_NAME: Final = "subagent_supervisor"
CLIENT_TITLE: Final = "subagent-supervisor"


class PermissionMode(enum.StrEnum):
    """How the child's approvals are configured.  No mode ever asks a human."""

    NEVER = "never"
    APPROVE_FOR_ME = "approve-for-me"
    BYPASS = "dangerously-bypass-approvals-and-sandbox"


def thread_permissions(mode: PermissionMode) -> dict[str, str]:
    """The ``thread/start`` fields for a mode (``never`` keeps the child's sandbox setting)."""
    if mode is PermissionMode.APPROVE_FOR_ME:
        return {
            "approvalPolicy": "on-request",
            "approvalsReviewer": "auto_review",
            "sandbox": "workspace-write",
        }
    if mode is PermissionMode.BYPASS:
        return {"approvalPolicy": "never", "sandbox": "danger-full-access"}
    return {"approvalPolicy": "never"}


def app_server_argv(binary: Path, overrides: Sequence[str]) -> list[str]:
    """The native binary, then ``app-server``; the configured ``-c`` overrides come first so
    that the two fixed ones (last wins) can never be undone by configuration."""
    argv = [str(binary), APP_SERVER_ARGS[0]]
    for override in overrides:
        argv += ["-c", override]
    argv += APP_SERVER_ARGS[1:]
    return argv


def _bounded(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", "ignore")


class _Answers:
    """The agent messages of the owned turn: the answer, and partial text for failures.

    The answer is the last completed ``final_answer`` message, else the last completed
    message without a phase; ``commentary`` never counts.  Partial output (for a run
    that did not complete) falls back to a ``partial_answer`` or to streamed deltas.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._phases: dict[str, str | None] = {}
        self._streams: dict[str, str] = {}
        self._streaming: str | None = None
        self._final: str | None = None
        self._unphased: str | None = None
        self._partial: str | None = None

    def started(self, item: AgentMessageItem) -> None:
        self._phases[item.id] = item.phase

    def delta(self, item_id: str, text: str) -> None:
        if self._phases.get(item_id) == "commentary":
            return
        self._streams[item_id] = _bounded(self._streams.get(item_id, "") + text, self._limit)
        self._streaming = item_id

    def completed(self, item: AgentMessageItem) -> None:
        self._streams.pop(item.id, None)
        if self._streaming == item.id:
            self._streaming = None
        text = _bounded(item.text, self._limit)
        if item.phase == "final_answer":
            self._final = text
        elif item.phase is None:
            self._unphased = text
        elif item.phase == "partial_answer":
            self._partial = text

    def answer(self) -> str | None:
        return self._final if self._final is not None else self._unphased

    def partial(self) -> str:
        streamed = self._streams.get(self._streaming, "") if self._streaming is not None else ""
        for candidate in (self._final, self._unphased, self._partial, streamed):
            if candidate and candidate.strip():
                return candidate
        return ""


class CodexRun(ProviderRun):
    label: ClassVar[ProviderLabel] = ProviderLabel.CODEX
    lifecycle = CodexLifecycle
    start_timeout_category = "unknown"

    def __init__(
        self,
        *,
        binary: Path,
        mode: PermissionMode,
        overrides: Sequence[str],
        tap: RunTap | None,
        client_version: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._binary = binary
        self._mode = mode
        self._overrides = tuple(overrides)
        self._tap = tap
        self._client_version = client_version
        self._wire: AppServerWire | None = None
        self._thread_id: str | None = None
        self._turn_id: str | None = None
        self._turn_start_sent = False
        self._turn_known = anyio.Event()
        self._turn_start_error: WireError | None = None
        self._turn_over = False
        self._early: list[Notification] = []
        self._outcome: SubagentResult | None = None
        self._done = anyio.Event()
        self._answers = _Answers(self.config.max_output_bytes)
        self._decision: str | None = None
        self._final_error: TurnError | None = None

    # -- start ------------------------------------------------------------------------

    async def _start(self) -> None:
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
                clientInfo=ClientInfo(name=CLIENT_NAME, title=CLIENT_TITLE, version=self._client_version)
            )
            await wire.request("initialize", params.wire(), InitializeResult)
            await wire.notify("initialized")
            self.fact("initialized")
            thread = ThreadStartParams.model_validate({"cwd": str(cwd), **thread_permissions(self._mode)})
            started = await wire.request("thread/start", thread.wire(), ThreadStartResult)
        except WireError as exc:
            raise StepFailed(await self._wire_failure(exc)) from exc
        self._thread_id = started.thread.id
        self.fact("thread_started")

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
                self.fact("app_server_exited")
                return self.failure("process", exit_code=facts.exit_code, signal=facts.signal)
        return self.failure("unknown")

    # -- drive ------------------------------------------------------------------------

    async def _drive(self) -> SubagentResult:
        wire = self._wire
        assert wire is not None
        assert self._thread_id is not None
        self.task_group.start_soon(self._start_turn, wire, self._thread_id)
        await self._done.wait()
        if self._outcome is not None:
            return self._outcome
        error = self._turn_start_error or wire.closed_error()
        return self._failed(await self._wire_failure(error))

    async def _start_turn(self, wire: AppServerWire, thread_id: str) -> None:
        """``turn/start`` outside the drive scope, so a local cancel can still learn the turn."""
        params = TurnStartParams(threadId=thread_id, input=[TextInput(text=self.request.task)])
        self._turn_start_sent = True
        try:
            await wire.request("turn/start", params.wire(), TurnStartResult, on_result=self._turn_named)
        except WireError as exc:
            self._turn_start_error = exc
            self._done.set()
        finally:
            self._turn_known.set()

    def _turn_named(self, started: TurnStartResult) -> None:
        """In the reader, in frame order: the turn is known; replay what came before."""
        self._turn_id = started.turn.id
        if self._outcome is None:
            self.fact("turn_started")
        early, self._early = self._early, []
        for event in early:
            self._consume(event)

    def _on_notification(self, event: Notification) -> None:
        """Called by the reader for every notification, in order, as it arrives."""
        if self._outcome is not None or self.cancelled_locally:
            return
        if self._turn_id is None:
            if event.method in _TURN_METHODS:
                self._early.append(event)  # replayed once turn/start names the turn
            return
        self._consume(event)

    def _on_wire_closed(self, reason: CloseReason) -> None:
        self._done.set()

    def _consume(self, event: Notification) -> None:
        if self._outcome is not None:
            return
        try:
            result = self._notification(event)
        except ValidationError as exc:
            log.warning("run %s: malformed notification", self.id)
            raw_failure("run %s: malformed %.80r notification", self.id, event.method, exc=exc)
            result = self._failed(self.failure("unknown"))
        if result is not None:
            self._finish(result)

    def _finish(self, result: SubagentResult) -> None:
        if self._outcome is None:
            self._outcome = result
            self._done.set()

    def _notification(self, event: Notification) -> SubagentResult | None:
        method, params = event.method, event.params
        if params.get("threadId") != self._thread_id:
            return None  # another thread's (e.g. the automatic reviewer's), or none
        if method == "turn/completed":
            completed = TurnCompleted.model_validate(params)
            return self._terminal(completed) if completed.turn.id == self._turn_id else None
        if method not in _TURN_METHODS:
            return None
        if params.get("turnId") != self._turn_id:
            return None
        if method == "item/agentMessage/delta":
            delta = AgentMessageDelta.model_validate(params)
            self._answers.delta(delta.item_id, delta.delta)
        elif method == "error":
            error = ErrorNotification.model_validate(params)
            log.info("run %s: codex error (retry: %s)", self.id, error.will_retry)
            raw_failure("run %s: codex error: %s", self.id, error.error.message)
            if not error.will_retry:
                self._final_error = error.error
        else:
            self._on_item(method, ItemNotification.model_validate(params).item)
        return None

    def _on_item(self, method: str, item: Mapping[str, Any]) -> None:
        kind = item.get("type")
        if kind == "agentMessage":
            message = AgentMessageItem.model_validate(item)
            if method == "item/started":
                self._answers.started(message)
            else:
                self._answers.completed(message)
        elif kind in ("commandExecution", "fileChange") and method == "item/completed":
            status = StatusItem.model_validate(item)
            if status.status == "declined":
                self._decide("command execution" if kind == "commandExecution" else "file change", "declined")

    def _terminal(self, completed: TurnCompleted) -> SubagentResult:
        self._turn_over = True
        self.fact("turn_completed")
        turn = completed.turn
        if turn.status == "completed":
            answer = self._answers.answer()
            if answer is not None and answer.strip():
                return SubagentResult(output=answer, stop_reason=StopReason.COMPLETED)
            return self._failed(self.failure("invalid-result"))
        if turn.status == "failed":
            error = turn.error or self._final_error
            if error is not None:
                log.warning("run %s: codex turn failed", self.id)
                raw_failure("run %s: codex turn failed: %s", self.id, error.message)
            verdict = classify(error.codex_error_info if error is not None else None)
            if verdict.sandbox_error:
                self._decide("sandbox execution", "failed")
            facts = self.failure(verdict.category.value, http_status=verdict.http_status)
            stop = StopReason.MAX_TOKENS if verdict.context_window_exceeded else StopReason.ERROR
            return self._failed(facts, stop_reason=stop)
        # interrupted without a local cancel (a local cancel never gets here), or a
        # status that is not terminal at all.
        log.warning("run %s: codex turn ended with a status that is not a success", self.id)
        raw_failure("run %s: codex turn ended with status %r", self.id, turn.status[:40])
        return self._failed(self.failure("unknown"))

    def _failed(self, facts: FailureFacts, *, stop_reason: StopReason = StopReason.ERROR) -> SubagentResult:
        return SubagentResult(
            output=self._output(),
            stop_reason=stop_reason,
            diagnostic=join_lines(facts.line(), self._decision),
        )

    def _output(self) -> str:
        return self._answers.partial()

    # -- the app-server's requests ----------------------------------------------------

    def _decide(self, request: str, decision: str) -> None:
        """Record an unattended decision; only the latest is kept."""
        self._decision = codex_permission_line(mode=self._mode.value, request=request, decision=decision)

    def _answer_request(self, request: ServerRequest) -> Mapping[str, Any] | None:
        """Answer without granting authority; None for a request this client does not serve."""
        method = request.method
        raw_failure("run %s: codex asked %.80r; answering without granting authority", self.id, method)
        if method in ("item/commandExecution/requestApproval", "item/fileChange/requestApproval"):
            offered = request.params.get("availableDecisions")
            cancel = isinstance(offered, list) and "cancel" in offered
            kind = "command approval" if method.startswith("item/commandExecution") else "file approval"
            self._decide(kind, "cancelled" if cancel else "declined")
            return ApprovalResponse(decision="cancel" if cancel else "decline").wire()
        if method == "item/permissions/requestApproval":
            self._decide("permission grant", "denied")
            return PermissionsResponse().wire()
        if method == "item/tool/requestUserInput":
            self._decide("user input", "empty response")
            return UserInputResponse().wire()
        if method == "mcpServer/elicitation/request":
            self._decide("MCP elicitation", "declined")
            return ElicitationResponse().wire()
        log.warning("run %s: unsupported app-server request; the run fails", self.id)
        self._finish(self._failed(self.failure("unknown")))
        return None

    # -- cancel and teardown ----------------------------------------------------------

    async def _remote_cancel(self) -> None:
        """``turn/interrupt`` for the owned turn, best effort (the base bounds the wait)."""
        wire = self._wire
        if wire is None or self._thread_id is None or not self._turn_start_sent:
            return
        await self._turn_known.wait()
        if self._turn_id is None or self._turn_over:
            return
        params = TurnInterruptParams(threadId=self._thread_id, turnId=self._turn_id)
        await wire.request("turn/interrupt", params.wire(), TurnInterruptResult)

    async def _after_ladder(self) -> None:
        if self._wire is not None:
            self._wire.close(CloseReason.STOPPED)
