"""``subagents mcp``: a stdio MCP server whose tools delegate to supervised subagents.

Built on the official ``mcp`` SDK's low-level server so the tool schemas can name the
configured providers as an enum.  stdout carries MCP frames only: children never
inherit it (their stderr is drained to the host log), and nothing here prints.

Cancellation: a cancelled ``run_subagent`` request (``notifications/cancelled``)
cancels its handler, which cancels the run locally (with ``keep_alive``: closes the
conversation, whose id its caller never learnt); a cancelled ``send_subagent`` cancels
the turn and keeps the conversation.  When the client goes away (stdin EOF, or the
client died and the pipes closed) or a signal says stop (SIGINT, SIGTERM, SIGHUP),
every run and every conversation is ended and its tree torn down before the server
exits 0.

Conversations (``keep_alive``, ``send_subagent``, ``close_subagent``) are the desk's
(:mod:`supervisor.mcp._desk`); each tool call continues the caller's trace from its
``params._meta.traceparent`` when telemetry is on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import Server, ServerRequestContext

from supervisor._errors import InvalidRequest, SubagentError, TurnInProgress
from supervisor._registry import Registry, build_run
from supervisor._seam import SubagentRequest
from supervisor._version import package_version
from supervisor.journal import _switch as _journal
from supervisor.journal._resume import plan_resume
from supervisor.mcp._answers import settled_result, tool_result
from supervisor.mcp._desk import (
    KEEP_SETTLED,
    MAX_IDLE,
    Desk,
    DeskError,
    DeskRun,
    DeskState,
    Settled,
    inside_roots,
)
from supervisor.mcp._progress import progress, status_line
from supervisor.mcp._stdio import stdio_transport
from supervisor.mcp._tasks import Pending, TaskBoard, TaskListen, TasksExtension, apply_extension
from supervisor.process import PinnedDirectory
from supervisor.telemetry import _switch as _telemetry

log = logging.getLogger("supervisor")

DEFAULT_WAIT_SECONDS = 30.0
MAX_WAIT_SECONDS = 300.0
SERVER_NAME = "subagents"


class ToolError(Exception):
    """A bad argument or an unknown run: one line of text, answered with ``isError``."""


@dataclass(frozen=True)
class McpSettings:
    registry: Registry
    providers: tuple[str, ...]
    roots: tuple[Path, ...]
    max_concurrent: int
    warm: int = 0
    """Warm children of the default provider kept in the first root (``--warm N``)."""
    keep_settled: int = KEEP_SETTLED
    """Settled runs remembered (``--keep-settled N``); older ones are forgotten."""
    max_idle: int = MAX_IDLE
    """Idle conversations kept (``--max-idle N``); beyond, the least recently used close."""


def _task_schema(providers: tuple[str, ...]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "What the subagent should do."},
            "provider": {
                "type": "string",
                "enum": list(providers),
                "description": f"Which configured subagent runs the task (default: {providers[0]}).",
            },
            "cwd": {
                "type": "string",
                "description": "The subagent's working directory, inside the server's roots "
                "(default: the first root; relative paths are taken from it).",
            },
            "keep_alive": {
                "type": "boolean",
                "description": "Keep the subagent for more turns (send_subagent; close_subagent "
                "ends it). Default false: its whole tree is gone once it answers.",
            },
        },
        "required": ["task"],
        "additionalProperties": False,
    }


_RUN_ID_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"run_id": {"type": "string"}},
    "required": ["run_id"],
    "additionalProperties": False,
}


def tool_list(providers: tuple[str, ...]) -> list[types.Tool]:
    task = _task_schema(providers)
    return [
        types.Tool(
            name="run_subagent",
            description="Run a task in a supervised subagent and wait for its answer. The whole "
            "process tree of the subagent is gone when this returns.",
            input_schema=task,
        ),
        types.Tool(
            name="start_subagent",
            description="Start a task in a supervised subagent in the background; returns its run_id.",
            input_schema=task,
        ),
        types.Tool(
            name="wait_subagent",
            description="Wait for a background subagent (up to timeout_s seconds, default 30, at most "
            "300): its result once settled, else its state and stage.",
            input_schema={
                "type": "object",
                "properties": {
                    "run_id": {"type": "string"},
                    "timeout_s": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS},
                },
                "required": ["run_id"],
                "additionalProperties": False,
            },
        ),
        types.Tool(
            name="cancel_subagent",
            description="Cancel a subagent and return its settled result once its tree is gone.",
            input_schema=_RUN_ID_SCHEMA,
        ),
        types.Tool(
            name="list_subagents",
            description="Every subagent this server holds, with its state (queued, running, idle, "
            "closing, settled), stage and turn.",
            input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        ),
        types.Tool(
            name="send_subagent",
            description="Send the next task to a subagent started with keep_alive (same agent "
            "session, its context kept) and wait for its answer.",
            input_schema={
                "type": "object",
                "properties": {
                    "run_id": {"type": "string"},
                    "task": {"type": "string", "description": "What the subagent should do next."},
                },
                "required": ["run_id", "task"],
                "additionalProperties": False,
            },
        ),
        types.Tool(
            name="close_subagent",
            description="End a subagent started with keep_alive; returns once its whole process "
            "tree is gone.",
            input_schema=_RUN_ID_SCHEMA,
        ),
    ]


class SubagentTools:
    """The seven tools over one :class:`Desk`."""

    def __init__(self, settings: McpSettings, desk: Desk) -> None:
        self._settings = settings
        self._desk = desk

    # -- arguments ------------------------------------------------------------------

    def _request(self, arguments: dict[str, Any]) -> tuple[str, SubagentRequest, PinnedDirectory, bool]:
        unknown = set(arguments) - {"task", "provider", "cwd", "keep_alive"}
        if unknown:
            raise ToolError(f"unknown argument(s): {', '.join(sorted(unknown))}")
        task = _task(arguments)
        providers = self._settings.providers
        provider = arguments.get("provider", providers[0])
        if not isinstance(provider, str) or provider not in providers:
            raise ToolError(f"provider must be one of: {', '.join(providers)}")
        keep_alive = arguments.get("keep_alive", False)
        if not isinstance(keep_alive, bool):
            raise ToolError("keep_alive must be a boolean")
        pin = self._cwd(arguments.get("cwd"))
        return provider, SubagentRequest(task=task, parent_cwd=pin.path), pin, keep_alive

    def _cwd(self, value: Any) -> PinnedDirectory:
        """The directory ``value`` names, checked as it will be used: held open from the
        check on (the run starts in the directory held, whatever happens to the path)."""
        roots = list(self._settings.roots)
        if value is None:
            target = roots[0]
        else:
            if not isinstance(value, str) or not value.strip():
                raise ToolError("cwd must be a non-empty string")
            if "\0" in value:
                raise ToolError("cwd must not contain a NUL byte")
            target = roots[0] / os.path.expanduser(value)
        try:
            # Symlinks are followed as the directory is opened; the check below is on the
            # real path of what is held, so a link that points out is refused.
            pin = PinnedDirectory.open(target)
        except ValueError:  # text no path can hold (a lone surrogate)
            raise ToolError("cwd is not a valid path") from None
        except OSError:
            if not inside_roots(Path(os.path.realpath(target)), roots):
                raise ToolError("cwd is outside the allowed roots") from None
            raise ToolError("cwd is not an accessible directory") from None
        if not inside_roots(pin.path, roots):
            pin.close()
            raise ToolError("cwd is outside the allowed roots")
        if not pin.accessible():
            pin.close()
            raise ToolError("cwd is not an accessible directory")
        return pin

    def _entry(self, arguments: dict[str, Any], *, allowed: frozenset[str]) -> DeskRun:
        unknown = set(arguments) - allowed
        if unknown:
            raise ToolError(f"unknown argument(s): {', '.join(sorted(unknown))}")
        run_id = arguments.get("run_id")
        if not isinstance(run_id, str):
            raise ToolError("run_id must be a string")
        entry = self._desk.get(run_id)
        if entry is None:
            raise ToolError(f"no subagent run with id {run_id!r}")
        return entry

    # -- tools ----------------------------------------------------------------------

    async def call(
        self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        try:
            if name == "run_subagent":
                return await self._run(ctx, arguments)
            if name == "start_subagent":
                entry = self._start(arguments)
                return tool_result(f"started subagent run {entry.run_id}", {"run_id": entry.run_id})
            if name == "wait_subagent":
                return await self._wait(arguments)
            if name == "cancel_subagent":
                entry = self._entry(arguments, allowed=frozenset({"run_id"}))
                self._desk.cancel(entry)
                return settled_result(await _quiet(entry))
            if name == "send_subagent":
                return await self._send(ctx, arguments)
            if name == "close_subagent":
                return await self._close(arguments)
            if name == "list_subagents":
                if arguments:
                    raise ToolError("list_subagents takes no arguments")
                runs = [entry.summary() for entry in self._desk.all()]
                return tool_result(_list_text(runs), {"runs": runs})
            raise ToolError(f"unknown tool {name!r}")
        except (ToolError, DeskError) as exc:
            return tool_result(str(exc), error=True)

    def _start(self, arguments: dict[str, Any]) -> DeskRun:
        provider, request, pin, keep_alive = self._request(arguments)
        try:
            return self._desk.start(provider, request, pin=pin, keep_alive=keep_alive)
        except SubagentError as exc:  # the registry's own checks: fixed texts, no child data
            pin.close()
            raise ToolError(str(exc)) from None

    async def _run(self, ctx: ServerRequestContext[Any], arguments: dict[str, Any]) -> types.CallToolResult:
        entry = self._start(arguments)
        answered = False
        try:
            async with progress(ctx, entry):
                settled = await _quiet(entry)
            answered = True
        finally:
            if not answered:  # the request was cancelled: the run (a conversation too) ends with it
                self._abandon(entry)
        return settled_result(settled)

    def _abandon(self, entry: DeskRun) -> None:
        """The caller of ``run_subagent`` stopped waiting: the run ends (a conversation too,
        whose run_id its caller never learnt)."""
        if entry.keep_alive:
            self._desk.close(entry)
        else:
            self._desk.cancel(entry)

    async def _resume(self, run_id: str) -> None:
        """A cold resume of a journaled conversation, before its first send: the
        same checks as ``Registry.resume`` plus the server's roots for its cwd; a run no
        journal holds is the usual unknown run."""
        journal = self._settings.registry.journal or _journal.current()
        if journal is None:
            return  # no journal: _sending says the run is unknown
        try:
            plan = plan_resume(journal, run_id, lookup=self._settings.registry.get, probe=build_run)
        except InvalidRequest as exc:
            if str(exc).startswith(f"no run {run_id} in the journal"):
                return
            raise ToolError(str(exc)) from None
        except SubagentError as exc:  # a changed config, not resumable: closed facts
            raise ToolError(str(exc)) from None
        if not _within(plan.request.parent_cwd, self._settings.roots):
            raise ToolError("cwd is outside the allowed roots")
        entry = self._desk.resume(plan.provider, plan.request, plan.session)
        await entry.quiet.wait()  # published idle, or settled (the agent could not continue it)
        if entry.state is DeskState.SETTLED:
            assert entry.settled is not None
            raise ToolError(
                entry.settled.ended or entry.settled.diagnostic or "subagent run could not be resumed"
            )

    def _sending(self, arguments: dict[str, Any]) -> tuple[DeskRun, str]:
        entry = self._entry(arguments, allowed=frozenset({"run_id", "task"}))
        task = _task(arguments)
        if not entry.keep_alive:
            raise ToolError(f"subagent run {entry.run_id} was not started with keep_alive")
        return entry, task

    async def _send(self, ctx: ServerRequestContext[Any], arguments: dict[str, Any]) -> types.CallToolResult:
        run_id = arguments.get("run_id")
        if isinstance(run_id, str) and self._desk.get(run_id) is None:
            await self._resume(run_id)  # a run this server does not hold, but the journal may
        entry, task = self._sending(arguments)
        async with progress(ctx, entry):
            # A cancelled request cancels the turn (local cancellation); the conversation stays.
            settled = await self._desk.send(entry, task)
        return settled_result(settled)

    def prepare(
        self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
    ) -> Pending | types.CallToolResult:
        """``run_subagent`` or ``send_subagent`` handed off as a task: the arguments checked
        and the work begun now (a bad call answers at once, as the blocking call would)."""
        try:
            if name == "run_subagent":
                entry = self._start(arguments)
                return Pending(
                    finish=lambda: self._answer(_quiet(entry)),
                    stop=lambda: self._abandon(entry),
                    status=lambda: status_line(entry),
                )
            entry, task = self._sending(arguments)
            if entry.turn_busy or entry.state in (DeskState.QUEUED, DeskState.RUNNING):
                raise ToolError(str(TurnInProgress()))
            return Pending(
                finish=lambda: self._answer(self._desk.send(entry, task)),
                stop=lambda: self._desk.cancel(entry),  # the turn; the conversation stays
                status=lambda: status_line(entry),
            )
        except (ToolError, DeskError) as exc:
            return tool_result(str(exc), error=True)

    @staticmethod
    async def _answer(settling: Awaitable[Settled]) -> types.CallToolResult:
        try:
            return settled_result(await settling)
        except DeskError as exc:
            return tool_result(str(exc), error=True)

    async def _close(self, arguments: dict[str, Any]) -> types.CallToolResult:
        entry = self._entry(arguments, allowed=frozenset({"run_id"}))
        if not entry.keep_alive:
            raise ToolError(
                f"subagent run {entry.run_id} was not started with keep_alive (cancel_subagent cancels it)"
            )
        self._desk.close(entry)
        settled = await self._desk.wait_over(entry)
        text = settled.ended or settled.text
        return tool_result(text, settled.as_dict(), error=settled.quiescent is False)

    async def _wait(self, arguments: dict[str, Any]) -> types.CallToolResult:
        entry = self._entry(arguments, allowed=frozenset({"run_id", "timeout_s"}))
        timeout = arguments.get("timeout_s", DEFAULT_WAIT_SECONDS)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or not 0 <= timeout <= MAX_WAIT_SECONDS
        ):
            raise ToolError(f"timeout_s must be a number from 0 to {MAX_WAIT_SECONDS:g}")
        with anyio.move_on_after(timeout):
            return settled_result(await _quiet(entry))
        state = {
            "run_id": entry.run_id,
            "state": str(entry.state),
            "stage": entry.stage,
            "turn": entry.run.turn,
        }
        return tool_result(f"subagent run {entry.run_id} is {entry.state} (stage: {entry.stage})", state)


def _task(arguments: dict[str, Any]) -> str:
    task = arguments.get("task")
    if not isinstance(task, str) or not task.strip():
        raise ToolError("task must be a non-empty string")
    return task


async def _quiet(entry: DeskRun) -> Settled:
    """The run's latest word once no turn is queued or running: a conversation's latest
    turn while it is idle, else (once the tree is gone) the final one."""
    while entry.state not in (DeskState.IDLE, DeskState.SETTLED):
        await entry.quiet.wait()
    if entry.state is DeskState.IDLE and entry.last is not None:
        return entry.last
    await entry.done.wait()
    assert entry.settled is not None
    return entry.settled


def _trace_carrier(meta: Any) -> dict[str, str]:
    """W3C trace context from a request's ``_meta`` (``traceparent``, ``tracestate``)."""
    if not meta:
        return {}
    return {key: value for key in ("traceparent", "tracestate") if isinstance(value := meta.get(key), str)}


def _within(cwd: Path | None, roots: tuple[Path, ...]) -> bool:
    """Whether a resumed run's journaled cwd is inside the server's roots (its real path)."""
    return cwd is not None and inside_roots(Path(os.path.realpath(cwd)), list(roots))


def _list_text(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return "no subagent runs"
    return "\n".join(
        f"{r['run_id']} {r['provider']} {r['state']} (stage: {r['stage']}; turn: {r['turn']})" for r in runs
    )


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


async def serve(settings: McpSettings, *, stopped: Callable[[], bool] = lambda: False) -> int:
    """Serve MCP on stdin/stdout until the client goes away or a signal says stop; every tree
    is gone on return.

    SIGINT, SIGTERM and SIGHUP end the session like a closed stdin: every run is cancelled
    and torn down through its ladder.  Another one of them skips the remaining graces
    (SIGKILL at once, still reaped): the Claude Code CLI sends SIGTERM 100 ms after SIGINT
    and SIGKILL 400 ms later.  ``stopped`` tells whether such a signal came before the
    server could listen for it.
    """
    try:
        async with anyio.create_task_group() as outer:
            if settings.warm:
                outer.start_soon(_keep_warm, settings)  # in the background: initialize is not delayed
            async with anyio.create_task_group() as runs_group:
                desk = Desk(
                    settings.registry,
                    runs_group,
                    max_concurrent=settings.max_concurrent,
                    keep_settled=settings.keep_settled,
                    max_idle=settings.max_idle,
                )
                board = TaskBoard(runs_group)
                with anyio.CancelScope() as serving:
                    await outer.start(_watch_signals, serving, desk)
                    if stopped():
                        serving.cancel()
                    try:
                        await _serve_session(settings, desk, board)
                    finally:
                        desk.cancel_all()  # the client is gone: every run ends, each tree torn down
            outer.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await settings.registry.aclose()  # the warm children no run took
    return 0


async def _keep_warm(settings: McpSettings) -> None:
    """``--warm N``: keep N warm children of the default provider in the first root.  A
    child that cannot start is logged; the runs then start cold."""
    try:
        await settings.registry.prestart(settings.providers[0], settings.warm, cwd=settings.roots[0])
    except SubagentError as exc:
        log.warning("mcp: no warm children: %s", exc)


async def _serve_session(settings: McpSettings, desk: Desk, board: TaskBoard) -> None:
    tools = SubagentTools(settings, desk)
    listed = tool_list(settings.providers)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The runs (and turns) this call starts join the caller's trace, when it sent one.
        with _telemetry.continued(_trace_carrier(ctx.meta)):
            return await tools.call(ctx, params.name, dict(params.arguments or {}))

    def prepare(
        ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
    ) -> Pending | types.CallToolResult:
        with _telemetry.continued(_trace_carrier(ctx.meta)):  # the run joins the caller's trace
            return tools.prepare(ctx, name, arguments)

    server: Server[Any] = Server(
        SERVER_NAME,
        version=package_version(),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=TaskListen(board),
    )
    apply_extension(server, TasksExtension(board, prepare), call_tool)
    async with stdio_transport() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def _watch_signals(
    serving: anyio.CancelScope, desk: Desk, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    """The first stop signal ends the session; any later one skips the teardown graces.

    The signals are caught by plain Python handlers that hand them to the event loop, not by
    the loop's own signal handlers: closing those puts each signal back to its default action,
    and a SIGTERM in what is left of the exit (the event loop's shutdown, telemetry's flush,
    the host group's removal) then ended the server with -15; the Claude Code CLI sends one
    100 ms after its SIGINT.  When this task ends (the runs are gone) the signals are ignored
    for the rest of the exit."""
    loop = asyncio.get_running_loop()
    send, receive = anyio.create_memory_object_stream[int](math.inf)

    def handed_over(signum: int, frame: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the exit is under way
            loop.call_soon_threadsafe(_offer, send, signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handed_over)
    try:
        async with receive:
            task_status.started()
            async for _signum in receive:
                if not serving.cancel_called:
                    serving.cancel()
                else:
                    desk.force_kill_all()
    finally:
        # Ignored, not a Python handler: the interpreter's own exit (taken when a thread is
        # still alive) puts every signal that has a Python handler back to its default
        # action before the process ends, and SIG_IGN is the one disposition it leaves.
        # Nothing is spawned from here on (the runs are gone), so no child inherits it.
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        send.close()


def _offer(send: MemoryObjectSendStream[int], signum: int) -> None:
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        send.send_nowait(signum)
