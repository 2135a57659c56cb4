"""One Claude Code run: the CLI under the supervisor, driven by claude-agent-sdk's client.

Start (stage ``query-start``): resolve the cwd, spawn the CLI through the supervised
transport and complete the SDK's ``initialize`` round trip; the run is published then.
Run (stage ``query-run``): send the task, read SDK messages until the ``result``
message, which alone decides the outcome.  The CLI's exit observed before a result
moves the run to stage ``process``.  The SDK is disconnected (instantly: the
transport's ``close()`` never waits) before the supervisor's ladder takes the tree down.

A conversation is the next user message to the same CLI process (its streaming
input), one turn at a time: a turn ends with its ``result`` message, a cancelled one
too (``interrupt`` makes the CLI end the turn with one).  A turn's usage: the result
message's token counts (the turn's own) and cost (``total_cost_usd`` is the session's
running total: a turn's cost is what it added).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ToolPermissionContext,
    UserMessage,
)

from machines.claude_code import CLAUDE_CODE_VOCABULARY, ClaudeCodeEvent, ClaudeCodeLifecycle
from supervisor.provider import (
    ExitFacts,
    FailureFacts,
    ManagedProcess,
    NotResumable,
    ProviderRun,
    RunContext,
    SpawnFailed,
    StepFailed,
    StopReason,
    SubagentResult,
    Usage,
    first_of,
    join_lines,
    raw_failure,
    route_sdk_logging,
    sdk_logging_routed,
)
from supervisor.providers.claude_code._command import asks_permission_over_stdio, cli_argv, cli_environment
from supervisor.providers.claude_code._config import Config
from supervisor.providers.claude_code._progress import TOOL_KINDS, TurnTools
from supervisor.providers.claude_code._results import classify, read_result
from supervisor.providers.claude_code._transport import SupervisedTransport
from supervisor.providers.claude_code._warm_prompt import PromptGate, taken_without_a_turn
from supervisor.wire import CappedText, cap_text

log = logging.getLogger("supervisor")
# claude-agent-sdk modules whose ``logger`` may quote the CLI's frames (parse failures at ERROR).
CLAUDE_SDK_MODULES = (
    "claude_agent_sdk._internal.query",
    "claude_agent_sdk._internal.message_parser",
    "claude_agent_sdk._internal.transport.subprocess_cli",
)

T = TypeVar("T")

# Sent to the CLI (and so to the model) when a tool asks for approval.
DENIAL_MESSAGE = "This unattended Claude Code subagent cannot request human approval."
# Once the CLI has exited, how long its last frames may take to reach the SDK's reader.
EXIT_DRAIN_SECONDS = 1.0
COST_DIGITS = 10  # a turn's cost is a difference of two running totals: drop the float noise


def _count(value: object) -> int | None:
    """A token count as reported, or None when it is not a non-negative integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class _Exited:
    """The CLI's exit was observed before the awaited step finished."""


EXITED = _Exited()


class ClaudeCodeRun(ProviderRun[Config]):
    vocabulary = CLAUDE_CODE_VOCABULARY
    lifecycle = ClaudeCodeLifecycle
    tool_kinds = TOOL_KINDS

    def __init__(self, context: RunContext[Config], *, cli: Path, sdk_version: str) -> None:
        super().__init__(context)
        self._cli = cli
        self._sdk_version = sdk_version
        self._transport: SupervisedTransport | None = None
        self._client: ClaudeSDKClient | None = None
        self._partial = CappedText(self.config.max_output_bytes, separator="\n\n")
        self._permission_line: str | None = None
        self._result_received = False  # this turn's result message arrived
        self._cost_total = 0.0  # the session's running cost before this turn
        self._tools = TurnTools()  # this turn's progress, read from the stream
        self._denials: set[int] = set()  # hashes of the tool uses denied in this turn
        self._gate: PromptGate | None = None  # a warm child's hook for its placeholder prompt
        self._placeholder_open = False  # the placeholder was sent and its result not read yet

    # -- start ----------------------------------------------------------------------------

    async def handshake(self) -> None:
        config = self.config
        cwd = self.resolve_cwd(category="unknown")
        env = cli_environment(config, run_tag=self.id, cwd=cwd, sdk_version=self._sdk_version)
        plan = self.session
        resume = plan.resume if plan is not None else None
        argv = cli_argv(self._cli, config, keep=plan is not None and plan.keep, resume=resume)
        if resume is not None:
            log.info("run %s: continuing the agent's session with --resume", self.id)
        elif self.warm:  # a cold start's CLI gets no hook: its first prompt is its task
            self._gate = PromptGate()
        spec = self.spawn_spec(argv, cwd, env=env)
        self._transport = SupervisedTransport(
            spec=spec,
            task_group=self.task_group,
            max_frame_bytes=config.max_frame_bytes,
            on_spawned=self._spawned,
            on_decided=self._decided,
            max_inflight_requests=config.max_inflight_requests,
            prompt_hook=self._gate.decide if self._gate is not None else None,
        )
        self._client = ClaudeSDKClient(options=self._options(), transport=self._transport)
        route_sdk_logging(CLAUDE_SDK_MODULES, "logger")
        try:
            # A CLI whose stdout ended can never answer ``initialize``: as good as exited.
            with sdk_logging_routed():  # the SDK's tasks for this client log to supervisor.child
                outcome = await self._unless_exited(self._client.connect, drain=0, or_output_end=True)
        except SpawnFailed as exc:
            raise StepFailed(self.failure("unknown")) from exc
        except Exception as exc:
            self._refused(resume)
            raise StepFailed(await self._startup_failure()) from exc
        if outcome is EXITED:
            self._refused(resume)
            raise StepFailed(await self._startup_failure())
        if resume is not None:  # published idle from query-start: the next turn is the first here
            self.agent_session_id = resume
            return
        self.fact(ClaudeCodeEvent.INITIALIZED)

    async def warm_up(self) -> None:
        """A warm child's setup (``supervisor.run._warm``): what the CLI does once per
        session, done before the task exists, leaving the session as a cold start has it.

        First its context usage: to answer, the CLI builds its system prompt and tool
        schemas, and its API client (the auth check, the TLS agent) to count their
        tokens (the model's ``count_tokens`` endpoint, a score of small requests: no model
        turn, nothing billed as one).  Then a placeholder prompt that the child's own
        ``UserPromptSubmit`` hook blocks (``_warm_prompt``): the CLI takes in a first user
        message (its queue, its first attachments, its prompt hooks) and drops it, with
        no model request and nothing kept in the conversation.  A run taking this child
        pays neither at its first prompt.  Neither carries any text of a task.
        """
        assert self._client is not None
        client = self._client
        with sdk_logging_routed():
            await self._unless_exited(client.get_context_usage, drain=0, or_output_end=True)
            if self._gate is not None:
                await self._unless_exited(self._placeholder, drain=0, or_output_end=True)

    async def _placeholder(self) -> None:
        assert self._client is not None
        assert self._gate is not None
        self._placeholder_open = True
        await self._client.query(self._gate.text)
        await self._placeholder_result()

    async def _placeholder_result(self) -> None:
        """Read the placeholder prompt's messages up to its result (it comes before any
        message of the task's turn).  A placeholder the CLI did not drop (a turn taken, an
        error) would leave the session unlike a cold start's: the CLI's input is then ended and
        its output's end awaited (a warm child whose output ended is never handed out), and
        this raises."""
        assert self._client is not None
        assert self._transport is not None
        async for message in self._client.receive_response():
            if isinstance(message, ResultMessage):
                self._placeholder_open = False
                if taken_without_a_turn(message):
                    return
                break
        log.warning("run %s: the Claude Code CLI did not drop a warm child's placeholder prompt", self.id)
        await self._transport.end_input()
        with anyio.move_on_after(self.config.term_grace):  # its end seen before it could be handed out
            await self._transport.output_ended.wait()
        raise RuntimeError("the Claude Code CLI did not drop a warm child's placeholder prompt")

    def _refused(self, resume: str | None) -> None:
        """A resume the CLI gave up on before any turn (an error result with no turn: it has
        no such session here) is :class:`NotResumable`; any other start failure is not."""
        if resume is not None and self._transport is not None and self._transport.refused_before_a_turn:
            raise NotResumable("the Claude Code CLI cannot resume the session")

    def _options(self) -> ClaudeAgentOptions:
        """Only what reaches the CLI over the control protocol: the argv is built here."""
        hooks = self._gate.hooks() if self._gate is not None else None
        if asks_permission_over_stdio(self.config.permission_mode):
            return ClaudeAgentOptions(can_use_tool=self._can_use_tool, hooks=hooks)
        return ClaudeAgentOptions(hooks=hooks)

    def _spawned(self, process: ManagedProcess) -> None:
        self.process = process

    async def _startup_failure(self) -> FailureFacts:
        if self._transport is not None and self._transport.stream_failure is not None:
            return self.failure("unknown")
        exit_facts = await self._exit_within(self.config.term_grace)
        if exit_facts is None:
            return self.failure("unknown")
        self.fact(ClaudeCodeEvent.CLI_EXITED)
        return self.failure("process", exit_code=exit_facts.exit_code, signal=exit_facts.signal)

    async def _exit_within(self, seconds: float) -> ExitFacts | None:
        if self.process is None:
            return None
        return await self.process.wait_exit(within=seconds)

    # -- run ------------------------------------------------------------------------------

    async def drive(self) -> SubagentResult:
        try:
            with sdk_logging_routed():
                outcome = await self._unless_exited(self._converse, drain=EXIT_DRAIN_SECONDS)
        except Exception as exc:
            log.warning("run %s: the Claude Code conversation failed", self.id)
            raw_failure("run %s: the raw conversation failure", self.id, exc=exc)
            return await self._without_result(raised=True)
        if isinstance(outcome, ResultMessage):
            return self._result_of(outcome)
        return await self._without_result(raised=False)

    async def _converse(self) -> ResultMessage | None:
        assert self._client is not None
        if self._placeholder_open:  # a warm-up cut short: its result is not the task's
            await self._placeholder_result()
        await self._client.query(self.task)
        async for message in self._client.receive_response():
            if isinstance(message, ResultMessage):
                self._result_received = True
                return message
            self._observe(message)
        return None

    def _observe(self, message: object) -> None:
        if isinstance(message, AssistantMessage):
            for call in self._tools.calls(message):  # a sub-agent's tool calls are the run's work too
                self.note_tool_call(*call)
            if message.parent_tool_use_id is not None or message.error is not None:
                return  # a sub-agent's text, or the CLI's synthetic API-error message
            plan = self._tools.plan(message)
            if plan is not None:
                self.note_plan(plan)
            self.note_usage(self._tools.usage(message))
            for block in message.content:
                if isinstance(block, TextBlock) and block.text:
                    self._partial.add(block.text)
                    self.note_answer_bytes(len(block.text.encode("utf-8", "surrogatepass")))
                    self.note_output()
        elif isinstance(message, UserMessage):
            for result in self._tools.results(message):
                self.note_tool_call(*result)
        elif isinstance(message, SystemMessage) and message.subtype == "init":
            data = message.data if isinstance(message.data, dict) else {}
            self._session_seen(data.get("session_id"))
        elif isinstance(message, SystemMessage) and message.subtype == "permission_denied":
            self._decided("tool permission", "denied")
            data = message.data if isinstance(message.data, dict) else {}
            self._denied(data.get("tool_use_id"))

    def _denied(self, tool_use_id: object) -> None:
        """Count a denied permission request once, however many messages report it."""
        key = hash(tool_use_id) if isinstance(tool_use_id, str) else None
        if key is None or key not in self._denials:
            if key is not None and len(self._denials) < 10_000:
                self._denials.add(key)
            self.note_permission("denied")

    def _session_seen(self, session_id: object) -> None:
        """The CLI named its session (``init``, a result): kept host-side, when usable."""
        if session_id is not None and session_id != self.agent_session_id:
            self.agent_session_id = session_id

    def _result_of(self, message: ResultMessage) -> SubagentResult:
        self._session_seen(message.session_id)
        facts = read_result(
            {
                "subtype": message.subtype,
                "is_error": message.is_error,
                "result": message.result,
                "permission_denials": message.permission_denials,
            }
        )
        if facts is not None and facts.denied_something and self._permission_line is None:
            self._decided("tool permission", "denied")
        verdict = classify(facts)
        self.fact(verdict.event)
        usage = self._usage(message)
        if usage is not None:
            self.note_usage(usage)
        if verdict.category is None:
            assert facts is not None
            assert facts.result is not None
            self.note_output()
            answer = cap_text(facts.result, self.config.max_output_bytes)
            return SubagentResult(output=answer, stop_reason=StopReason.COMPLETED, usage=usage)
        raw_failure(
            "run %s: Claude Code result subtype=%r is_error=%r terminal_reason=%r errors=%r",
            self.id,
            message.subtype,
            message.is_error,
            message.terminal_reason,
            message.errors,
        )
        return self._failed(self.failure(verdict.category), usage=usage)

    def _usage(self, message: ResultMessage) -> Usage | None:
        """The turn's usage from its result message (numbers only; anything else dropped)."""
        tokens = message.usage if isinstance(message.usage, dict) else {}
        given = _count(tokens.get("input_tokens"))
        read = _count(tokens.get("cache_read_input_tokens"))
        written = _count(tokens.get("cache_creation_input_tokens"))
        fields: dict[str, object] = {
            "output_tokens": tokens.get("output_tokens"),
            "cached_input_tokens": read,
        }
        if given is not None:  # Anthropic counts cache reads and writes apart; the seam's count has them
            fields["input_tokens"] = given + (read or 0) + (written or 0)
        total = message.total_cost_usd
        if isinstance(total, int | float) and not isinstance(total, bool) and total >= self._cost_total:
            fields["cost_usd"] = round(total - self._cost_total, COST_DIGITS)
            self._cost_total = float(total)
        return Usage.from_reported(fields)

    async def _without_result(self, *, raised: bool) -> SubagentResult:
        """The stream ended (or failed) before a result message."""
        assert self._transport is not None
        if self._transport.stream_failure is not None:
            return self._failed(self.failure("unknown"))
        # A failed step may be the CLI dying (a write to a closed pipe): its exit is
        # then observed at once.  A stream that ended is the CLI closing its output.
        exit_facts = await self._exit_within(EXIT_DRAIN_SECONDS if raised else self.config.term_grace)
        if exit_facts is not None:
            self.fact(ClaudeCodeEvent.CLI_EXITED)
            return self._failed(
                self.failure("process", exit_code=exit_facts.exit_code, signal=exit_facts.signal)
            )
        if raised:
            return self._failed(self.failure("unknown"))
        self.fact(ClaudeCodeEvent.RESULT_MISSING)
        return self._failed(self.failure("invalid-result"))

    def _failed(self, facts: FailureFacts, *, usage: Usage | None = None) -> SubagentResult:
        return SubagentResult(
            output=self.partial_output(),
            stop_reason=StopReason.ERROR,
            diagnostic=join_lines(facts.line(), self._permission_line),
            usage=usage,
        )

    def partial_output(self) -> str:
        return self._partial.text

    # -- conversations ----------------------------------------------------------------------

    def begin_turn(self) -> None:
        self._partial = CappedText(self.config.max_output_bytes, separator="\n\n")
        self._permission_line = None
        self._result_received = False
        self._tools = TurnTools()
        self._denials = set()

    def session_usable(self) -> bool:
        """The CLI lives, its stream is intact, and it ended the turn with a result message."""
        transport = self._transport
        if not super().session_usable() or transport is None or not transport.is_ready():
            return False
        return (
            self._result_received and transport.stream_failure is None and not transport.output_ended.is_set()
        )

    async def session_lost(self) -> None:
        assert self._transport is not None
        process, transport = self.process, self._transport
        assert process is not None
        await first_of(process.wait_exit, transport.output_ended.wait)

    async def _unless_exited(
        self, step: Callable[[], Awaitable[T]], *, drain: float, or_output_end: bool = False
    ) -> T | _Exited:
        """Run ``step``, unless the CLI's exit (or, with ``or_output_end``, the end of its
        output) is observed first.

        After the exit, ``step`` gets ``drain`` more seconds to finish (its last frames
        may still be on their way: a descendant can hold stdout open long after the
        CLI died, so end-of-stream is not waited for), then it is abandoned.
        """
        assert self._transport is not None
        transport = self._transport
        outcome: list[T] = []
        failure: list[Exception] = []
        done = anyio.Event()
        exited = False

        async with anyio.create_task_group() as group:

            async def run_step() -> None:
                try:
                    outcome.append(await step())
                except Exception as exc:
                    failure.append(exc)
                finally:
                    done.set()
                    group.cancel_scope.cancel()

            async def watch_exit() -> None:
                nonlocal exited
                await transport.spawned.wait()
                assert transport.process is not None
                process = transport.process
                async with anyio.create_task_group() as first:

                    async def until(event: Callable[[], Awaitable[object]]) -> None:
                        await event()
                        first.cancel_scope.cancel()

                    first.start_soon(until, process.wait_exit)
                    if or_output_end:
                        first.start_soon(until, transport.output_ended.wait)
                with anyio.move_on_after(drain):
                    await done.wait()
                if not done.is_set():
                    exited = True
                    group.cancel_scope.cancel()

            group.start_soon(run_step)
            group.start_soon(watch_exit)

        if failure:
            raise failure[0]
        if outcome:
            return outcome[0]
        assert exited
        return EXITED

    # -- unattended decisions -----------------------------------------------------------------

    async def _can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        self._decided("tool permission", "denied")
        self._denied(context.tool_use_id)
        log.info("run %s: denied a Claude Code tool permission request", self.id)
        return PermissionResultDeny(message=DENIAL_MESSAGE, interrupt=False)

    def _decided(self, request: str, decision: str) -> None:
        """Keep the latest unattended decision (it joins a failure's diagnostic only)."""
        self._permission_line = self.vocabulary.permission_line(
            mode=str(self.config.permission_mode), request=request, decision=decision
        )

    # -- cancel and teardown --------------------------------------------------------------------

    async def remote_cancel(self) -> None:
        if self._client is not None and self._transport is not None and self._transport.is_ready():
            await self._client.interrupt()

    async def before_ladder(self) -> None:
        """Disconnect the SDK first: its close is instant here, the ladder then owns the tree.

        A warm child's placeholder prompt still in flight (its setup overran) is seen
        through its hook first: a CLI whose input has ended takes a queued prompt on
        without asking the SDK's hooks, so an end of input before the hook answered
        would send the placeholder to the model.  If it is not through within the term
        grace, the ladder skips its graces (the end of input comes with the kill)."""
        if self._placeholder_open and self._client is not None:
            with anyio.move_on_after(self.config.term_grace), sdk_logging_routed():
                try:
                    await self._unless_exited(self._placeholder_result, drain=0, or_output_end=True)
                except Exception as exc:  # a placeholder not dropped: the tree goes down regardless
                    raw_failure("run %s: the raw placeholder failure", self.id, exc=exc)
            if self._placeholder_open:
                self.force_kill()
        client, self._client = self._client, None
        if client is not None:
            await client.disconnect()

    async def after_ladder(self) -> None:
        if self._transport is not None:
            await self._transport.close()
