"""Route the ACP SDK's own logging to ``supervisor.child`` at DEBUG, for our connections only.

Why this exists: the SDK (``agent-client-protocol``) logs through the *root* logger
with module-level calls such as ``logging.exception("Unhandled error while handling
notification method=%s", method, exc_info=exc)`` in ``acp.connection``,
``acp._transport``, ``acp.task.sender``, ``acp.task.supervisor`` and ``acp.stdio``.
Those records quote the child (a method name, a validation error's ``input_value``),
and the first module-level ``logging.exception`` call on a process whose root logger
has no handler runs ``logging.basicConfig()``: a handler appears on the embedder's
root logger and the child's text lands on stderr.

A filter or a handler cannot prevent that ``basicConfig()`` call, and touching the
root logger is exactly what must not happen.  So the narrowest correct fix is to
replace the name ``logging`` inside those SDK modules with a stand-in that forwards
everything to the real module, except the record-emitting functions: while a
connection of this package is running (a context variable, inherited by every task
the SDK spawns for that connection), those go to ``supervisor.child`` at DEBUG; any
other use of the SDK in the same process keeps the SDK's own behaviour.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from supervisor._logging import child_log

SDK_MODULES = ("acp.connection", "acp._transport", "acp.task.sender", "acp.task.supervisor", "acp.stdio")

_ROUTED: ContextVar[bool] = ContextVar("supervisor_acp_sdk_logging_routed", default=False)


class _RoutedLogging:
    """Stands in for the ``logging`` module inside the SDK's modules."""

    def __getattr__(self, name: str) -> Any:
        return getattr(logging, name)

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        self._emit("exception", msg, args, {"exc_info": exc_info, **kwargs})

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit("error", msg, args, kwargs)

    def critical(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit("critical", msg, args, kwargs)

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit("warning", msg, args, kwargs)

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit("info", msg, args, kwargs)

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._emit("debug", msg, args, kwargs)

    @staticmethod
    def _emit(function: str, msg: object, args: tuple[object, ...], kwargs: dict[str, Any]) -> None:
        if _ROUTED.get():
            kwargs.pop("stacklevel", None)
            child_log.debug("ACP SDK: %s", _Deferred(msg, args), **kwargs)
        else:
            getattr(logging, function)(msg, *args, **kwargs)


class _Deferred:
    """The SDK's message, formatted only if a DEBUG record is actually emitted."""

    __slots__ = ("args", "msg")

    def __init__(self, msg: object, args: tuple[object, ...]) -> None:
        self.msg = msg
        self.args = args

    def __str__(self) -> str:
        text = str(self.msg)
        if not self.args:
            return text
        try:
            return text % self.args
        except (TypeError, ValueError):
            return f"{text} {self.args!r}"


_STAND_IN = _RoutedLogging()


def install() -> None:
    """Put the stand-in into the SDK's modules (idempotent; the SDK must be importable)."""
    for name in SDK_MODULES:
        module = importlib.import_module(name)
        if getattr(module, "logging", None) is logging:
            module.logging = _STAND_IN  # type: ignore[attr-defined]


@contextlib.contextmanager
def routed() -> Iterator[None]:
    """Inside: tasks created now (the SDK's connection tasks) log to ``supervisor.child``."""
    token = _ROUTED.set(True)
    try:
        yield
    finally:
        _ROUTED.reset(token)
