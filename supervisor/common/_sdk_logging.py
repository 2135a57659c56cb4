"""Route a protocol SDK's own logging to ``supervisor.child`` at DEBUG, for our connections only.

Why this exists: protocol SDKs log what the child sent.  The ACP SDK
(``agent-client-protocol``) logs through the *root* logger with module-level calls
such as ``logging.exception("Unhandled error while handling notification
method=%s", method, exc_info=exc)``; the first module-level ``logging.exception``
call on a process whose root logger has no handler runs ``logging.basicConfig()``, so
a handler appears on the embedder's root logger and the child's text lands on
stderr.  An SDK that logs parse failures quoting the child's frames at ERROR through
its module loggers reaches stderr through logging's last-resort handler.

A filter or a handler cannot prevent that ``basicConfig()`` call, and touching the
root logger (or the SDK's loggers) would change the embedder's logging configuration.
So the narrowest correct fix is to replace the name the SDK module logs through
(``logging`` or ``logger``) with a stand-in that forwards everything to the original,
except the record-emitting methods: while a connection of this package is running (a
context variable, inherited by every task the SDK spawns for that connection), those
go to ``supervisor.child`` at DEBUG; any other use of the SDK in the same process
keeps the SDK's own behaviour.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from supervisor._public import home
from supervisor.common._logging import child_log

_ROUTED: ContextVar[bool] = ContextVar("supervisor_sdk_logging_routed", default=False)


class RoutedLogging:
    """Stands in for a ``logging`` module or a ``Logger`` inside an SDK module."""

    def __init__(self, original: Any) -> None:
        self.original = original

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)

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

    def _emit(self, function: str, msg: object, args: tuple[object, ...], kwargs: dict[str, Any]) -> None:
        if _ROUTED.get():
            kwargs.pop("stacklevel", None)
            child_log.debug("SDK: %s", _Deferred(msg, args), **kwargs)
        else:
            getattr(self.original, function)(msg, *args, **kwargs)


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


def route_sdk_logging(modules: tuple[str, ...], attribute: str) -> None:
    """Put a stand-in in place of ``attribute`` (the SDK module's ``logging`` or ``logger``) in
    each of ``modules``: inside :func:`sdk_logging_routed`, what the SDK logs goes to
    ``supervisor.child`` at DEBUG; elsewhere it behaves as before.  Idempotent; every module
    must import."""
    for name in modules:
        # already imported, as at every run after the first: no trip through the import system
        module = sys.modules.get(name) or importlib.import_module(name)
        original = getattr(module, attribute, None)
        if original is not None and not isinstance(original, RoutedLogging):
            setattr(module, attribute, RoutedLogging(original))


@contextlib.contextmanager
def sdk_logging_routed() -> Iterator[None]:
    """Inside: tasks created now (an SDK's connection tasks) log what an SDK module made
    ready with :func:`route_sdk_logging` logs to ``supervisor.child`` at DEBUG."""
    token = _ROUTED.set(True)
    try:
        yield
    finally:
        _ROUTED.reset(token)


home("supervisor.provider", route_sdk_logging, sdk_logging_routed)
