"""One DSH SDK run over the supervisor's own process and streams.

Classification is by type only, never by message:

* a startup or turn failure: :class:`DshTransportClosed` (EOF on stdout or a broken
  stdin, whichever came first; a spawn failure too) -> ``transport``;
  :class:`DshProtocolError` or :class:`DshRpcError` -> ``protocol``; anything else
  -> ``unknown``; a bad cwd -> ``initialize/configuration``;
* a turn that reached the root session's ``idle`` maps its last ``turn/end`` with
  :func:`child_outcome`.

DSH lines carry no stop-reason or exit fields.  The runtime's own words (error
messages and data, stderr, turn-end payloads, unknown kinds) go to the host log only.
There is no wire-level cancel: a local cancellation settles at once and the
``shutdown`` request of the teardown disposes the runtime's sessions.

A conversation is the next ``session/prompt`` on the same session (the client mints
its id once per run).  With no wire-level cancel, a cancelled turn of a conversation
runs on in the runtime: the next turn waits for its ``idle`` (within
``dispose_grace_ms``; past that the conversation ends).  The protocol reports no usage.
"""

from __future__ import annotations

import logging
from typing import Final

from machines.dsh_sdk import DSH_SDK_VOCABULARY, DshSdkEvent, DshSdkLifecycle
from supervisor.provider import (
    ProviderRun,
    RunContext,
    StepFailed,
    StopReason,
    SubagentResult,
    first_of,
    raw_failure,
)
from supervisor.providers.dsh_sdk._client import DshClient
from supervisor.providers.dsh_sdk._config import Config
from supervisor.providers.dsh_sdk._errors import (
    DshError,
    DshProtocolError,
    DshRpcError,
    DshTransportClosed,
)
from supervisor.providers.dsh_sdk._fold import (
    Notification,
    TurnEnd,
    TurnEndKind,
    TurnProgress,
    new_session_id,
)

log = logging.getLogger("supervisor")

_LOGGED_CHARS: Final = 500

# Turn-end kind -> (stop reason, diagnostic category or None).  ``aborted`` with cause
# ``disposed`` and a missing turn end are handled in :func:`child_outcome`.
_TURN_ENDS: Final[dict[TurnEndKind, tuple[StopReason, str | None]]] = {
    TurnEndKind.COMPLETED: (StopReason.COMPLETED, None),
    TurnEndKind.MAX_TOKENS: (StopReason.MAX_TOKENS, None),
    TurnEndKind.ABORTED: (StopReason.ABORTED, None),
    TurnEndKind.BLOCKED: (StopReason.REFUSAL, None),
    TurnEndKind.ERROR: (StopReason.ERROR, "child-error"),
    TurnEndKind.INTERRUPTED: (StopReason.ERROR, None),
    TurnEndKind.UNKNOWN: (StopReason.ERROR, "child-unknown"),
}


def child_outcome(turn_end: TurnEnd | None) -> tuple[StopReason, str | None]:
    """The stop reason and ``session-run`` category (or None) of a turn that went idle."""
    if turn_end is None:
        return StopReason.ERROR, "missing-terminal"
    if turn_end.disposed:
        return StopReason.ABORTED, "child-disposed"
    return _TURN_ENDS[turn_end.kind]


def failure_category(error: BaseException) -> str:
    """The category of a wire failure, by its type alone."""
    if isinstance(error, DshTransportClosed):
        return "transport"
    if isinstance(error, DshProtocolError | DshRpcError):
        return "protocol"
    return "unknown"


class DshSdkRun(ProviderRun[Config]):
    """One DSH SDK run.  As the seam says, every started run must be disposed: its
    background group is shielded and ends only with the teardown."""

    vocabulary = DSH_SDK_VOCABULARY
    lifecycle = DshSdkLifecycle

    def __init__(self, context: RunContext[Config]) -> None:
        super().__init__(context)
        self._client: DshClient | None = None
        self._progress: TurnProgress | None = None
        self._spliced = False
        self._session_id = new_session_id()  # one session for every turn of the run
        self._turn_over = False  # the runtime ended this turn (idle), or refused its prompt
        self._answer_bytes = 0  # of this turn, noted so far

    # -- start --------------------------------------------------------------------------

    async def handshake(self) -> None:
        config = self.config
        cwd = self.resolve_cwd()
        spec = self.spawn_spec([config.command, *config.args], cwd)
        # DSH has no process-start category: like the original client, a runtime that
        # cannot be started is a closed transport.
        process = await self.spawn_child(spec, failed_as="transport")
        client = DshClient.from_asyncio_streams(
            process.stdout,
            process.stdin,
            max_frame_bytes=config.max_frame_bytes,
            max_inflight_requests=config.max_inflight_requests,
        )
        self._client = client
        await self.task_group.start(client.serve)
        try:
            await client.initialize(
                cwd=str(cwd), provider=config.provider, model=config.model, max_tokens=config.max_tokens
            )
        except Exception as exc:
            self._log_failure("initialize", exc)
            raise StepFailed(self.failure(self._category(exc))) from exc
        self.fact(DshSdkEvent.INITIALIZE_ANSWERED)

    def _category(self, error: BaseException) -> str:
        """By type; a stream the supervisor cut at an oversized frame is a protocol failure."""
        if self.process is not None and self.process.frame_too_large:
            return "protocol"
        return failure_category(error)

    # -- session-run --------------------------------------------------------------------

    async def drive(self) -> SubagentResult:
        client = self._client
        assert client is not None
        progress = self._progress = TurnProgress(max_output_bytes=self.config.max_output_bytes)
        try:
            outcome = await client.run_turn(
                self.task,
                session_id=self._session_id,
                progress=progress,
                on_notification=self._observe,
            )
        except Exception as exc:
            self._log_failure("session-run", exc)
            failed_as = self._category(exc)
            if isinstance(exc, DshRpcError):
                self._turn_over = True  # the prompt was refused: no turn began
                self.fact(DshSdkEvent.ERROR_ANSWERED)
            elif failed_as == "protocol":
                self.fact(DshSdkEvent.PROTOCOL_VIOLATED)
            elif failed_as == "transport":
                self.fact(DshSdkEvent.TRANSPORT_CLOSED)
            # else: the base settles the machine with ``failed``
            return self._settlement(StopReason.ERROR, failed_as)
        self._turn_over = True
        self.fact(DshSdkEvent.ROOT_IDLE)
        turn_end = outcome.turn_end
        if turn_end is not None and turn_end.kind is TurnEndKind.UNKNOWN:
            raw_failure(
                "run %s: the DSH SDK runtime ended the turn with an unknown kind %.*r",
                self.id,
                _LOGGED_CHARS,
                turn_end.raw_kind,
            )
        stop_reason, category = child_outcome(turn_end)
        return self._settlement(stop_reason, category)

    def _observe(self, note: Notification) -> None:
        """Sees every notification of the session tree from the prompt's inbox receipt on."""
        if not self._spliced:
            self._spliced = True
            self.fact(DshSdkEvent.PROMPT_SPLICED)
            # The runtime created the session for the prompt (the client minted its id).
            # Host-side only; a DSH session cannot be resumed (no such method in the protocol).
            self.agent_session_id = self._session_id
        progress = self._progress
        if progress is None:
            return
        if progress.output:
            self.note_output()
        grown = progress.answer_bytes - self._answer_bytes
        if grown > 0:
            self._answer_bytes += grown
            self.note_answer_bytes(grown)
        if progress.tool_updates:  # the runtime's tool names are no closed set: every call is ``other``
            for call, status in progress.tool_updates:
                self.note_tool_call(call, "other", status)
            progress.tool_updates.clear()

    def _settlement(self, stop_reason: StopReason, category: str | None) -> SubagentResult:
        diagnostic = None if category is None else self.failure(category).line()
        return SubagentResult(output=self.partial_output(), stop_reason=stop_reason, diagnostic=diagnostic)

    def partial_output(self) -> str:
        return "" if self._progress is None else self._progress.output

    # -- conversations ------------------------------------------------------------------

    def begin_turn(self) -> None:
        self._progress = None
        self._answer_bytes = 0
        self._spliced = False
        self._turn_over = False

    def session_usable(self) -> bool:
        client = self._client
        return super().session_usable() and client is not None and client.failure is None and self._turn_over

    async def session_lost(self) -> None:
        assert self.process is not None
        assert self._client is not None
        process, client = self.process, self._client
        await first_of(process.wait_exit, client.wait_closed)

    # -- shutdown -----------------------------------------------------------------------

    async def before_ladder(self) -> None:
        """The ``shutdown`` request, bounded by ``shutdown_timeout_ms``; a failure is only logged."""
        client = self._client
        if client is None or client.failure is not None:
            return  # never spawned, or the wire is already gone: the ladder does the rest
        try:
            await client.shutdown(self.config.shutdown_timeout)
        except DshError as exc:
            self._log_failure("shutdown", exc)
            return
        self.fact(DshSdkEvent.SHUTDOWN_ACKNOWLEDGED)

    # -- host log -----------------------------------------------------------------------

    def _log_failure(self, step: str, error: BaseException) -> None:
        """The raw failure, for the host log only (never for a result or an error's text)."""
        log.warning("run %s: %s failed (%s)", self.id, step, type(error).__name__)
        if isinstance(error, DshRpcError):
            raw_failure(
                "run %s: %s: the DSH SDK runtime answered %s with JSON-RPC error %d: %.*r (data: %.*r)",
                self.id,
                step,
                error.method,
                error.code,
                _LOGGED_CHARS,
                error.message,
                _LOGGED_CHARS,
                error.data,
            )
        else:
            raw_failure("run %s: %s failed: %r", self.id, step, error, exc=error)
        tail = self.process.stderr_tail if self.process is not None else b""
        if tail and isinstance(error, DshTransportClosed):
            raw_failure(
                "run %s: the DSH SDK runtime's stderr tail:\n%s",
                self.id,
                tail.decode("utf-8", "replace"),
            )
