"""One ACP run over the supervisor's own process and streams (never ``spawn_agent_process``).

A conversation is ``session/prompt`` again on the same session, one at a time.  A cold
resume (``session.resume``) continues a session in a new child instead of opening one:
``session/resume`` where the agent advertises it (``sessionCapabilities.resume``), else
``session/load`` (``loadSession``; the history it replays is swallowed: neither output
nor usage, only its cumulative cost kept as the next turn's baseline), else the agent
cannot (:class:`~supervisor.provider.NotResumable`); an error answer to either from a
live agent is a refusal too.  Same cwd, same (no) MCP servers, same permission policy.  A turn's
usage: token counts from the prompt response's ``usage`` (marked unstable in the
schema; read as this turn's), cost from the ``usage_update`` notifications (the
session's cumulative cost: a turn's cost is what it added).

Before the teardown ladder, a session the agent can close (``sessionCapabilities.close``)
is closed with ``session/close``: an agent that keeps a helper process per session (a
CLI it talks to over pipes) may hold it, and so itself, alive past stdin EOF until the
session is closed.  Closing first lets such a tree exit on EOF, the ladder's first rung,
instead of riding out the EOF grace to SIGTERM.  The session stays continuable: closing
frees the agent's live resources, not the session's record.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Awaitable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from machines.acp import ACP_VOCABULARY, AcpEvent, AcpLifecycle
from supervisor.provider import (
    ExitFacts,
    FailureFacts,
    NotResumable,
    ProviderRun,
    RunContext,
    StepFailed,
    StopReason,
    SubagentResult,
    TeardownReport,
    Usage,
    first_of,
    join_lines,
    raw_failure,
    route_sdk_logging,
    sdk_logging_routed,
)
from supervisor.providers.acp import _eager
from supervisor.providers.acp._config import Config
from supervisor.providers.acp._lost import caused_by_teardown, note_lost_child
from supervisor.providers.acp._untraced import import_acp_untraced
from supervisor.wire import CappedText, client_version

if TYPE_CHECKING:
    from pathlib import Path

    from acp.client.connection import ClientSideConnection
    from acp.schema import AgentCapabilities
    from acp.schema import Usage as AcpUsage

    from supervisor.providers.acp._client import UnattendedClient
    from supervisor.providers.acp._transport import StdioTransport

log = logging.getLogger("supervisor")

CLIENT_NAME = "subagent-supervisor"
# The SDK's modules that log through the root logger with module-level ``logging`` calls.
ACP_SDK_MODULES = ("acp.connection", "acp._transport", "acp.task.sender", "acp.task.supervisor", "acp.stdio")
CLOSE_TIMEOUT = 1.0

# ACP stop reason -> (shared stop reason, failure line facts or None)
_STOP_REASONS: dict[str, tuple[StopReason, str | None]] = {
    "end_turn": (StopReason.COMPLETED, None),
    "max_tokens": (StopReason.MAX_TOKENS, None),
    "refusal": (StopReason.REFUSAL, None),
    "cancelled": (StopReason.ABORTED, None),
    "max_turn_requests": (StopReason.ERROR, "remote-limit"),
}


class AcpRun(ProviderRun[Config]):
    vocabulary = ACP_VOCABULARY
    lifecycle = AcpLifecycle

    def __init__(self, context: RunContext[Config]) -> None:
        super().__init__(context)
        self._conn: ClientSideConnection | None = None
        self._client: UnattendedClient | None = None
        self._transport: StdioTransport | None = None
        self._session_id: str | None = None
        self._usage: Usage | None = None
        self._closable = False  # the agent advertised ``session/close``

    # -- start --------------------------------------------------------------------------

    async def handshake(self) -> None:
        config = self.config
        cwd = self.resolve_cwd()
        spec = self.spawn_spec([config.command, *config.args], cwd)
        process = await self.spawn_child(spec, failed_as="process-start", fact=AcpEvent.SPAWN_FAILED)
        acp = await _import_acp()
        from supervisor.providers.acp._client import UnattendedClient
        from supervisor.providers.acp._transport import StdioTransport

        self._client = UnattendedClient(
            policy=config.permission,
            output=CappedText(config.max_output_bytes),
            on_output=self.note_output,
            progress=self,
        )
        self._transport = StdioTransport(
            process.stdout,
            process.stdin,
            max_frame_bytes=config.max_frame_bytes,
            max_inflight=config.max_inflight_requests,
            session_update=self._client.take_update,
        )
        with sdk_logging_routed():  # every task the SDK spawns for this connection inherits it
            # No stream observer: the SDK deep-copies every frame for each one.  What the run
            # reads from raw frames, the transport keeps (``StdioTransport.raw``).
            self._conn = acp.connect_to_agent(self._client, self._transport)
        try:
            answer = await self._conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                client_capabilities=_client_capabilities(acp),
                client_info=acp.schema.Implementation(name=CLIENT_NAME, version=client_version()),
            )
        except Exception as exc:
            raise StepFailed(await self._startup_failure(exc)) from exc
        if config.authenticate is not None:
            try:
                await self._conn.authenticate(method_id=config.authenticate)
            except acp.RequestError as exc:
                raise StepFailed(self.failure("protocol")) from exc
            except Exception as exc:
                raise StepFailed(await self._startup_failure(exc)) from exc
        self.fact(AcpEvent.INITIALIZE_ANSWERED)
        offers = answer.agent_capabilities.session_capabilities if answer.agent_capabilities else None
        self._closable = offers is not None and offers.close is not None
        if self.session is not None and self.session.resume is not None:
            await self._continue_session(acp, self.session.resume, cwd, answer.agent_capabilities)
            return
        # A warm child's CLI may be readied for its first prompt (see ``_eager``); never a cold one's.
        meta: dict[str, Any] = {}
        if self.warm:
            name = answer.agent_info.name if answer.agent_info else None
            meta = _eager.warm_session_meta(name, config.command, spec.env, memory_max=config.memory_max)
        try:
            session = await self._conn.new_session(cwd=str(cwd), mcp_servers=[], **meta)
        except ValidationError as exc:
            raise StepFailed(self.failure("protocol")) from exc
        except Exception as exc:
            raise StepFailed(await self._startup_failure(exc)) from exc
        if not self._transport.raw.has_session_id():
            raise StepFailed(self.failure("protocol"))
        self._session_id = self._client.session_id = session.session_id
        self.agent_session_id = session.session_id
        self.fact(AcpEvent.SESSION_CREATED)

    async def _continue_session(
        self, acp: ModuleType, session_id: str, cwd: Path, capabilities: AgentCapabilities | None
    ) -> None:
        """A cold resume, in ``new-session``: ``session/resume``, else ``session/load``."""
        assert self._conn is not None
        assert self._client is not None
        self._client.cost_unknown = True  # until the agent reports the session's cost
        offers = capabilities.session_capabilities if capabilities is not None else None
        call: Awaitable[object]
        if offers is not None and offers.resume is not None:
            call = self._conn.resume_session(session_id=session_id, cwd=str(cwd), mcp_servers=[])
        elif capabilities is not None and capabilities.load_session:
            self._client.replaying = session_id  # the replayed history is swallowed
            call = self._conn.load_session(cwd=str(cwd), session_id=session_id, mcp_servers=[])
        else:
            raise NotResumable("the agent advertises neither session/resume nor session/load")
        method = "session/load" if self._client.replaying is not None else "session/resume"
        log.info("run %s: continuing the agent's session with %s", self.id, method)
        try:
            await call
        except acp.RequestError as exc:
            raise NotResumable("the agent refused to continue the session") from exc
        except ValidationError as exc:
            raise StepFailed(self.failure("protocol")) from exc
        except Exception as exc:
            raise StepFailed(await self._startup_failure(exc)) from exc
        finally:
            self._client.replaying = None
        self._session_id = self._client.session_id = session_id
        self.agent_session_id = session_id

    async def _startup_failure(self, exc: BaseException) -> FailureFacts:
        """``X/protocol`` for bad frames, ``X/process-exit`` if the child died, else ``X/transport``."""
        if self._protocol_fault() or isinstance(exc, ValidationError):
            return self.failure("protocol")
        exit_facts = await self._exit_within_grace()
        assert self.process is not None
        note_lost_child(self.id, self.stage, self.process, exc, exit_facts)
        if exit_facts is not None and not caused_by_teardown(self.process, exit_facts):
            return self.failure("process-exit", exit_code=exit_facts.exit_code, signal=exit_facts.signal)
        return self.failure("transport")

    def _protocol_fault(self) -> bool:
        """Whether the wire ended on a protocol fault (oversized, non-JSON-RPC line, request flood)."""
        assert self.process is not None
        fault = self._transport.fault if self._transport is not None else None
        if fault is not None:
            raw_failure("run %s: ACP wire fault: %s", self.id, fault.value)
        return self.process.frame_too_large or fault is not None

    async def _exit_within_grace(self) -> ExitFacts | None:
        """The child's exit facts if its stdout closed and it exits within the grace, else None.

        A child that is still talking (it answered with an error) is not waited for.
        """
        assert self.process is not None
        if not self.process.stdout_ended:
            return self.process.exit_facts
        return await self.process.wait_exit(within=self.config.term_grace)

    # -- prompt -------------------------------------------------------------------------

    async def drive(self) -> SubagentResult:
        assert self._conn is not None
        assert self._session_id is not None
        acp = await _import_acp()
        try:
            response = await self._conn.prompt(
                session_id=self._session_id, prompt=[acp.text_block(self.task)]
            )
        except ValidationError as exc:
            # Only an out-of-vocabulary stop reason maps to the "unknown" row; any
            # other malformed result is a protocol failure.  The value is never copied.
            raw_failure("run %s: malformed prompt result", self.id, exc=exc)
            raw = self._raw_stop_reason()
            return self._stop_result(raw if raw is not None and raw not in _STOP_REASONS else None)
        except Exception as exc:
            raw_failure("run %s: prompt failed", self.id, exc=exc)
            return await self._prompt_failure()
        self._usage = self._turn_usage(response.usage)
        if self._usage is not None:
            self.note_usage(self._usage)
        return self._stop_result(str(response.stop_reason))

    def _turn_usage(self, tokens: AcpUsage | None) -> Usage | None:
        """This turn's usage: the response's token counts, the cost the turn added."""
        fields: dict[str, object] = {}
        if tokens is not None:
            cached_read = tokens.cached_read_tokens or 0
            # ACP counts cache reads and writes apart from ``inputTokens`` (its
            # ``totalTokens`` sums every kind): the seam's input count includes them.
            fields["input_tokens"] = tokens.input_tokens + cached_read + (tokens.cached_write_tokens or 0)
            fields["output_tokens"] = tokens.output_tokens
            fields["cached_input_tokens"] = tokens.cached_read_tokens
        if self._client is not None:
            fields["cost_usd"] = self._client.turn_cost
        return Usage.from_reported(fields)

    def _raw_stop_reason(self) -> str | None:
        assert self._transport is not None
        raw = self._transport.raw.raw_stop_reason()
        return raw if isinstance(raw, str) else None

    def _stop_result(self, stop_reason: str | None) -> SubagentResult:
        """Map a terminal stop reason; ``None`` means the result itself was malformed."""
        permission = self._permission_line()
        if stop_reason is None:
            self.fact(AcpEvent.PROMPT_FAILED)
            return self._error(self._line(self.failure("protocol", stage="prompt"), permission))
        self.fact(AcpEvent.STOP_REASON_RECEIVED)
        mapped, category = _STOP_REASONS.get(stop_reason, (StopReason.ERROR, "unknown"))
        usage = self._usage
        if mapped is StopReason.COMPLETED:
            return SubagentResult(output=self.partial_output(), stop_reason=mapped, usage=usage)
        if category is None:
            return SubagentResult(
                output=self.partial_output(), stop_reason=mapped, diagnostic=permission, usage=usage
            )
        reason = "max_turn_requests" if category == "remote-limit" else "unknown"
        facts = self.failure(category, stage="prompt", stop_reason=reason)
        return SubagentResult(
            output=self.partial_output(),
            stop_reason=mapped,
            diagnostic=self._line(facts, permission),
            usage=usage,
        )

    async def _prompt_failure(self) -> SubagentResult:
        permission = self._permission_line()
        assert self.process is not None
        if self._protocol_fault():
            self.fact(AcpEvent.PROMPT_FAILED)
            return self._error(self._line(self.failure("protocol"), permission))
        exit_facts = await self._exit_within_grace()
        if exit_facts is None:
            self.fact(AcpEvent.PROMPT_FAILED)
            return self._error(self._line(self.failure("transport"), permission))
        self.fact(AcpEvent.CHILD_EXITED)
        line = self.failure("process-exit", exit_code=exit_facts.exit_code, signal=exit_facts.signal)
        self.fact(AcpEvent.EXIT_OBSERVED)
        return self._error(self._line(line, permission))

    def _error(self, diagnostic: str | None) -> SubagentResult:
        return SubagentResult(
            output=self.partial_output(), stop_reason=StopReason.ERROR, diagnostic=diagnostic
        )

    @staticmethod
    def _line(facts: FailureFacts, permission: str | None) -> str | None:
        return join_lines(facts.line(), permission)

    def _permission_line(self) -> str | None:
        if self._client is None or self._client.permission is None:
            return None
        return self._client.permission.line()

    def partial_output(self) -> str:
        return "" if self._client is None else self._client.output.text

    # -- conversations ------------------------------------------------------------------

    def begin_turn(self) -> None:
        assert self._client is not None
        assert self._transport is not None
        self._client.next_turn(CappedText(self.config.max_output_bytes))
        self._transport.raw.next_turn()
        self._usage = None

    def session_usable(self) -> bool:
        transport = self._transport
        return super().session_usable() and transport is not None and not transport.ended.is_set()

    async def session_lost(self) -> None:
        assert self.process is not None
        assert self._transport is not None
        process, transport = self.process, self._transport
        await first_of(process.wait_exit, transport.ended.wait)

    # -- cancel and teardown ------------------------------------------------------------

    async def remote_cancel(self) -> None:
        if self._conn is not None and self._session_id is not None:
            await self._conn.cancel(session_id=self._session_id)

    async def before_ladder(self) -> None:
        """Close the session where the agent can (best effort, bounded by the EOF grace
        and ``CLOSE_TIMEOUT``): its per-session processes end, so EOF can end the tree."""
        conn, session_id, process = self._conn, self._session_id, self.process
        if conn is None or session_id is None or not self._closable or process is None:
            return
        if process.exit_facts is not None or (self._transport is not None and self._transport.ended.is_set()):
            return
        with anyio.move_on_after(min(CLOSE_TIMEOUT, self.config.eof_grace)) as scope:
            try:
                await conn.close_session(session_id=session_id)
            except Exception as exc:  # refused, or the child went: the ladder goes on all the same
                raw_failure("run %s: session/close failed", self.id, exc=exc)
        if scope.cancelled_caught:
            log.debug("run %s: session/close not answered in time", self.id)

    async def after_ladder(self) -> None:
        if self._conn is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT):
                await self._conn.close()

    def teardown_facts(self, report: TeardownReport | None) -> FailureFacts:
        exit_facts = report.exit if report is not None else None
        if exit_facts is None:
            return self.failure("unknown", stage="teardown")
        return self.failure(
            "process-exit", stage="teardown", exit_code=exit_facts.exit_code, signal=exit_facts.signal
        )


@functools.cache
def _client_capabilities(acp: ModuleType) -> Any:
    """What this client offers (nothing: no file system, no terminal), built once: the SDK's
    model fills its defaults' nested models at each build (about 12 us), for the same value
    every run; the request only serialises it."""
    return acp.schema.ClientCapabilities()


async def _import_acp() -> ModuleType:
    """Import the SDK off the event loop: ``import acp`` takes about a second, once."""
    if "acp" not in sys.modules:
        await anyio.to_thread.run_sync(import_acp_untraced)
    route_sdk_logging(ACP_SDK_MODULES, "logging")
    return import_acp_untraced()
