"""The DSH SDK wire's errors: one small hierarchy under :class:`DshError`.

``str()`` of every error is a fixed sentence: nothing the runtime sent (codes, messages,
data, payloads) is ever in it.  The raw facts stay on attributes, ``__cause__`` and the
``supervisor`` debug log.
"""

from __future__ import annotations

from typing import Final, Literal, Self

__all__ = [
    "DshError",
    "DshProtocolError",
    "DshRpcError",
    "DshTimeout",
    "DshTransportClosed",
    "TransportCloseReason",
]


class DshError(Exception):
    """Base of every DSH SDK wire failure.  ``str()`` is a fixed, safe sentence.

    A bare ``DshError`` (no subclass) means an unexpected fault of the wire itself.
    """

    def again(self) -> Self:
        """A fresh instance with the same facts (to raise one stored failure in many places)."""
        clone = type(self).__new__(type(self))
        clone.args = self.args
        clone.__dict__.update(self.__dict__)
        clone.__cause__ = self.__cause__
        return clone


class DshProtocolError(DshError):
    """The runtime broke the protocol: a malformed answer to a request, a wrong server
    identity, a malformed event of the owned turn, or a frame over ``max_frame_bytes``."""


class DshRpcError(DshError):
    """The runtime answered a request with a JSON-RPC error.

    ``code``, ``message`` and ``data`` are the runtime's own (child-controlled) values;
    they are kept as attributes for the host log and never appear in ``str()``/``repr()``.
    """

    def __init__(self, method: str, code: int, message: str, data: object) -> None:
        super().__init__(f"the DSH SDK runtime answered {method} with a JSON-RPC error")
        self.method = method
        self.code = code
        self.message = message
        self.data = data


TransportCloseReason = Literal["eof", "broken-pipe", "read-failed", "input-closed", "stopped"]

_CLOSE_TEXT: Final[dict[TransportCloseReason, str]] = {
    "eof": "the DSH SDK runtime closed its output (EOF on stdout)",
    "broken-pipe": "the DSH SDK runtime's input is gone (broken pipe on stdin)",
    "read-failed": "reading the DSH SDK runtime's output failed",
    "input-closed": "the DSH SDK runtime's input was already closed by the supervisor",
    "stopped": "the DSH SDK client stopped reading the runtime's output",
}


class DshTransportClosed(DshError):
    """The transport is gone: EOF on stdout or a broken stdin, whichever came first.

    ``reason`` says which (``eof``, ``broken-pipe``, ``read-failed``, ``input-closed``,
    ``stopped``); the first closing fact wins and later calls report the same one.
    """

    def __init__(self, reason: TransportCloseReason) -> None:
        super().__init__(_CLOSE_TEXT[reason])
        self.reason: TransportCloseReason = reason


class DshTimeout(DshError):
    """A request's own bound (the ``timeout`` argument) elapsed before its answer."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"{method} timed out after {timeout:g}s waiting for the DSH SDK runtime")
        self.method = method
        self.timeout = timeout
