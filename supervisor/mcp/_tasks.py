"""MCP tasks (the ``io.modelcontextprotocol/tasks`` extension, its 2026-07-28 version).

A ``tools/call`` of ``run_subagent`` or ``send_subagent`` from a client whose request
declares the extension (``_meta["io.modelcontextprotocol/clientCapabilities"].extensions``)
is answered at once with a task (``resultType: "task"``) instead of waiting for the turn;
the client then polls ``tasks/get``.  Everything else (other tools, a client that does not
declare the extension, any client of the 2025-11-25 handshake era) is served exactly as
before: the blocking call.

What each status means is the extension's:

* ``working``: the turn is queued or running; ``statusMessage`` is its status line.
* ``completed``: the call has its result, the very ``CallToolResult`` the blocking call
  would have returned, ``isError`` included (a run that settled ``error`` is a completed
  task whose result has ``isError``).
* ``failed``: the request itself failed (a JSON-RPC error, e.g. a bug here): never used
  for a run that failed.
* ``cancelled``: ``tasks/cancel`` stopped it (for ``run_subagent`` once its whole tree is
  gone; for ``send_subagent`` once the turn is over, the conversation kept).  A turn that
  settled before the cancel could take effect ends ``completed``, as the extension allows.

A finished task is kept for :data:`TASK_TTL_SECONDS` after it finished, at most
:data:`MAX_FINISHED_TASKS` of them (the oldest finished first out); a working task is never
dropped.  Task ids are uuid4s, never handed out twice.  Every status change is sent as
``notifications/tasks`` on the ``subscriptions/listen`` streams that asked for that task id.

Built on the SDK's extension interface (:class:`mcp.server.extension.Extension`): the
extension contributes its methods and a ``tools/call`` interceptor, applied to the
low-level server by :func:`apply_extension` as ``MCPServer`` applies them.
"""

from __future__ import annotations

import enum
import itertools
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.extension import Extension, MethodBinding, compose_tool_call_handler
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

log = logging.getLogger("supervisor")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TTL_SECONDS = 3600.0
MAX_FINISHED_TASKS = 1000
POLL_INTERVAL_MS = 1000
SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"
TASK_TOOLS = frozenset({"run_subagent", "send_subagent"})


class TaskStatus(enum.StrEnum):
    WORKING = "working"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Pending:
    """A tool call whose arguments were checked and whose work has begun, not finished.

    ``finish`` waits for the call's result (the blocking call's very answer); ``stop`` is
    what ``tasks/cancel`` does; ``status`` is the working task's status line.
    """

    finish: Callable[[], Awaitable[types.CallToolResult]]
    stop: Callable[[], None]
    status: Callable[[], str]


class TaskParams(types.RequestParams):
    """``tasks/get`` and ``tasks/cancel``: the task's id."""

    task_id: str = Field(alias="taskId")


class TaskUpdateParams(TaskParams):
    """``tasks/update``: the task's id and answers to its input requests (ours never ask)."""

    input_responses: dict[str, Any] = Field(alias="inputResponses")


class _TaskNotification(BaseModel):
    method: Literal["notifications/tasks"] = "notifications/tasks"
    params: dict[str, Any]


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Task:
    task_id: str
    pending: Pending
    created: datetime
    created_at: float
    """``time.monotonic()`` at creation."""
    status: TaskStatus = TaskStatus.WORKING
    updated: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: float | None = None
    result: types.CallToolResult | None = None
    error: dict[str, Any] | None = None
    cancel_requested: bool = False

    def detailed(self, ttl_seconds: float) -> dict[str, Any]:
        """The task as ``tasks/get`` and ``notifications/tasks`` carry it (a DetailedTask)."""
        document: dict[str, Any] = {
            "taskId": self.task_id,
            "status": str(self.status),
            "createdAt": _stamp(self.created),
            "lastUpdatedAt": _stamp(self.updated),
            # A working task is never dropped; a finished one lives ttl_seconds after it finished.
            "ttlMs": None
            if self.finished_at is None
            else round((self.finished_at - self.created_at + ttl_seconds) * 1000),
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if self.status is TaskStatus.WORKING:
            document["statusMessage"] = self.pending.status()
        elif self.status is TaskStatus.COMPLETED:
            assert self.result is not None
            document["result"] = self.result.model_dump(by_alias=True, mode="json", exclude_none=True)
        elif self.status is TaskStatus.FAILED:
            document["error"] = self.error
        return document


Listener = Callable[[Task], None]


class TaskBoard:
    """The tasks of one server: created, polled, cancelled, finished and, later, forgotten."""

    def __init__(
        self,
        task_group: TaskGroup,
        *,
        ttl_seconds: float = TASK_TTL_SECONDS,
        max_finished: int = MAX_FINISHED_TASKS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._task_group = task_group
        self._ttl = ttl_seconds
        self._max_finished = max_finished
        self._clock = clock
        self._working: dict[str, Task] = {}
        self._finished: OrderedDict[str, Task] = OrderedDict()  # oldest finished first
        self._issued: set[str] = set()
        self._listeners: dict[int, Listener] = {}
        self._listener_ids = itertools.count()

    @property
    def ttl_seconds(self) -> float:
        return self._ttl

    def create(self, pending: Pending) -> Task:
        """A working task for ``pending``, its work awaited in the board's task group."""
        self.expire()
        task_id = str(uuid.uuid4())
        while task_id in self._issued:  # never reused
            task_id = str(uuid.uuid4())
        self._issued.add(task_id)
        now = datetime.now(UTC)
        task = Task(task_id=task_id, pending=pending, created=now, created_at=self._clock(), updated=now)
        self._working[task_id] = task
        self._task_group.start_soon(self._work, task)
        return task

    def get(self, task_id: str) -> Task:
        self.expire()
        task = self._working.get(task_id) or self._finished.get(task_id)
        if task is None:
            raise MCPError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
        return task

    def cancel(self, task_id: str) -> None:
        """Ask a working task to stop (acknowledged at once; it ends once its work has)."""
        task = self.get(task_id)
        if task.status is not TaskStatus.WORKING:
            raise MCPError(INVALID_PARAMS, f"Task has already finished ({task.status}): nothing to cancel")
        if not task.cancel_requested:
            task.cancel_requested = True
            task.pending.stop()

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with a task on each status change; returns the unsubscribe."""
        key = next(self._listener_ids)
        self._listeners[key] = listener
        return lambda: self._listeners.pop(key, None) and None

    def expire(self) -> None:
        """Forget finished tasks past their TTL, and the oldest beyond the cap."""
        now = self._clock()
        while self._finished:
            task_id, task = next(iter(self._finished.items()))
            assert task.finished_at is not None
            if now - task.finished_at < self._ttl and len(self._finished) <= self._max_finished:
                break
            del self._finished[task_id]

    async def _work(self, task: Task) -> None:
        try:
            result = await task.pending.finish()
        except Exception:  # a bug here, never the child's doing: the request itself failed
            log.exception("MCP task %s failed", task.task_id)
            self._finish(task, TaskStatus.FAILED, error={"code": INTERNAL_ERROR, "message": "Internal error"})
            return
        if task.cancel_requested and result.is_error:
            self._finish(task, TaskStatus.CANCELLED)
        else:
            self._finish(task, TaskStatus.COMPLETED, result=result)

    def _finish(
        self,
        task: Task,
        status: TaskStatus,
        *,
        result: types.CallToolResult | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        task.status, task.result, task.error = status, result, error
        task.updated = datetime.now(UTC)
        task.finished_at = self._clock()
        self._working.pop(task.task_id, None)
        self._finished[task.task_id] = task
        self.expire()
        for listener in list(self._listeners.values()):
            try:
                listener(task)
            except Exception:  # one broken stream must not keep the others from hearing
                log.exception("a task status listener failed")


def declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request (of the 2026-07-28 era) declares the tasks extension."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return bool(extensions) and TASKS_EXTENSION in cast(Mapping[str, Any], extensions)


def _require_tasks(ctx: ServerRequestContext[Any, Any]) -> None:
    if not declares_tasks(ctx):
        raise MCPError(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
            data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )


Prepare = Callable[[ServerRequestContext[Any, Any], str, dict[str, Any]], Pending | types.CallToolResult]


class TasksExtension(Extension):
    """The tasks extension over a :class:`TaskBoard`.

    ``prepare(ctx, tool, arguments)`` checks a call and begins its work: a :class:`Pending`,
    or the call's answer at once (bad arguments are the blocking call's own one-line
    ``isError`` result, never a task).
    """

    identifier = TASKS_EXTENSION

    def __init__(self, board: TaskBoard, prepare: Prepare) -> None:
        self._board = board
        self._prepare = prepare

    def methods(self) -> list[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", TaskParams, self._get, protocol_versions=modern),
            MethodBinding("tasks/cancel", TaskParams, self._cancel, protocol_versions=modern),
            MethodBinding("tasks/update", TaskUpdateParams, self._update, protocol_versions=modern),
        ]

    async def intercept_tool_call(
        self, params: types.CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS or not declares_tasks(ctx):
            return await call_next(ctx)
        prepared = self._prepare(ctx, params.name, dict(params.arguments or {}))
        if isinstance(prepared, types.CallToolResult):
            return prepared
        task = self._board.create(prepared)
        return {"resultType": "task", **task.detailed(self._board.ttl_seconds)}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        _require_tasks(ctx)
        return {"resultType": "complete", **self._board.get(params.task_id).detailed(self._board.ttl_seconds)}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        _require_tasks(ctx)
        self._board.cancel(params.task_id)
        return {"resultType": "complete"}

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams) -> dict[str, Any]:
        _require_tasks(ctx)
        self._board.get(params.task_id)  # a known task; it never asks, so every response is ignored
        return {"resultType": "complete"}


def apply_extension(server: Server[Any], extension: Extension, call_tool: Any) -> None:
    """Apply ``extension`` to a low-level server as ``MCPServer`` applies one: its methods,
    its ``tools/call`` interceptor around ``call_tool``, its capability advertised."""
    for method in extension.methods():
        if server.get_request_handler(method.method) is not None:
            raise ValueError(f"method {method.method!r} is already served")
        server.add_request_handler(method.method, method.params_type, _gated(method))
    server.add_request_handler(
        "tools/call", types.CallToolRequestParams, compose_tool_call_handler([extension], call_tool)
    )
    server.extensions[extension.identifier] = extension.settings()


def _gated(method: MethodBinding) -> Any:
    if method.protocol_versions is None:
        return method.handler

    async def gated(ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        if ctx.protocol_version not in (method.protocol_versions or ()):
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", data=method.method)
        return await method.handler(ctx, params)

    return gated


class TaskListen:
    """``subscriptions/listen`` for task ids: the stream carries ``notifications/tasks``
    for each requested task on every status change, until the client ends it.

    The only kind of notification this server has to offer on such a stream: a request
    for another kind is acknowledged without it (never sent, as the protocol requires).
    """

    def __init__(self, board: TaskBoard) -> None:
        self._board = board

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen requires a request id")
        wanted = (params.notifications.model_extra or {}).get("taskIds")
        if wanted is not None:
            _require_tasks(ctx)
            if not isinstance(wanted, list) or not all(isinstance(item, str) for item in wanted):
                raise MCPError(INVALID_PARAMS, "taskIds must be a list of task ids")
        task_ids = frozenset(wanted or ())
        meta = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        honored = types.SubscriptionFilter.model_validate({"taskIds": sorted(task_ids)} if wanted else {})
        send, receive = anyio.create_memory_object_stream[Task](max_buffer_size=1024)

        def deliver(task: Task) -> None:
            if task.task_id in task_ids:
                try:
                    send.send_nowait(task)
                except (anyio.WouldBlock, anyio.ClosedResourceError):
                    log.warning("a task listen stream is not read: a status change was dropped")

        unsubscribe = self._board.listen(deliver)
        try:
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(
                    params=types.SubscriptionsAcknowledgedNotificationParams(
                        notifications=honored, _meta=meta
                    )
                ),
                related_request_id=subscription_id,
            )
            async with receive:
                async for task in receive:
                    document = {**task.detailed(self._board.ttl_seconds), "_meta": meta}
                    notification = _TaskNotification(params=document)
                    await ctx.session.send_notification(
                        cast(types.ServerNotification, notification), related_request_id=subscription_id
                    )
        finally:
            unsubscribe()
            send.close()
        return types.SubscriptionsListenResult(_meta=meta)
