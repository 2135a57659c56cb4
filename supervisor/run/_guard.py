"""The run's task group as a provider sees it: a task that raises is reported, not spread.

In a plain anyio task group, a task that raises cancels every sibling and the error
leaves the group.  For a run that would be the worst order of events: the exit watcher
and the readers the teardown needs are cancelled, the group (and with it the caller's)
raises an ``ExceptionGroup``, and the child and its descendants keep running.  So the
tasks a run starts (the provider's readers, the process layer's watchers, the base's
own) run under :class:`GuardedTaskGroup`: an ``Exception`` a task raises goes to the
run (``on_error``), which settles as an ``unknown`` failure and is torn down like any
other failed run; siblings keep running until that teardown.  So does any other
``BaseException`` a provider's code raises (``SystemExit``, ``KeyboardInterrupt`` or
``GeneratorExit`` raised by a hook): it is a bug of the provider's like any exception,
and letting it go on would leave the child running and the caller's task group waiting
for it.  Only a cancellation passes through untouched (trio's ``run_process`` rule: the
child is gone before an error arrives, and the caller's cancellation is never eaten).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextvars import Context
from types import TracebackType
from typing import Any, Literal, TypeVar

import anyio
from anyio import TaskHandle
from anyio.abc import TaskGroup, TaskStatus

T = TypeVar("T")


def is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is a cancellation (of the running backend), or a group holding one:
    the one kind of ``BaseException`` from a provider's code the base lets go on."""
    if isinstance(exc, BaseExceptionGroup):
        return any(is_cancellation(inner) for inner in exc.exceptions)
    return isinstance(exc, anyio.get_cancelled_exc_class())


class GuardedTaskGroup(TaskGroup):
    """Starts tasks in ``group``; an exception one of them raises goes to ``on_error``.

    A task started with :meth:`start` that raises before it reports readiness raises to
    its starter, as anyio's would (the starter is the run's own code, which turns it into
    a failure); once started, it is guarded like any other.  The group itself belongs to
    the run: entering or leaving it here is refused.
    """

    def __init__(self, group: TaskGroup, on_error: Callable[[BaseException], None]) -> None:
        self._group = group
        self._on_error = on_error
        self.cancel_scope = group.cancel_scope
        self.unfinished = 0
        """Tasks started here whose code has not finished (counted from their creation, so a
        task cancelled before its first step stays counted: 0 means none is left)."""

    def create_task(
        self, coro: Coroutine[Any, Any, T], *, name: object = None, context: Context | None = None
    ) -> TaskHandle[Any]:
        self.unfinished += 1
        return self._group.create_task(self._guarded(coro), name=name, context=context)

    async def start(
        self,
        func: Callable[..., Coroutine[Any, Any, Any]],
        *args: object,
        name: object = None,
        return_handle: Literal[False, True] = False,
    ) -> Any:
        async def guarded(*, task_status: TaskStatus[Any]) -> None:
            status = _Status(task_status)
            try:
                await func(*args, task_status=status)
            except BaseException as exc:
                if is_cancellation(exc) or not status.reported:
                    raise  # the starter gets it
                self._on_error(exc)
            finally:
                self.unfinished -= 1

        self.unfinished += 1
        return await self._group.start(guarded, name=name, return_handle=return_handle)

    async def _guarded(self, coro: Coroutine[Any, Any, T]) -> T | None:
        try:
            return await coro
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            self._on_error(exc)
            return None
        finally:
            self.unfinished -= 1

    async def __aenter__(self) -> TaskGroup:
        raise RuntimeError("a run's task group is entered by the run itself")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool:
        raise RuntimeError("a run's task group is left by the run itself")


class _Status(TaskStatus[Any]):
    """Remembers whether the task reported readiness."""

    def __init__(self, inner: TaskStatus[Any]) -> None:
        self._inner = inner
        self.reported = False

    def started(self, value: Any = None) -> None:
        self.reported = True
        self._inner.started(value)
