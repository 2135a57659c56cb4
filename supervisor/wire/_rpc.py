"""The one JSON-RPC core the hand-written clients share.

Every client here speaks JSON-RPC over newline-delimited JSON on a child's stdio and
needs the same three mechanisms; each lives here once:

* :class:`PendingRequests`: requests awaiting their answer, by id, each settled once;
* :class:`CloseOnce`: the connection closes once, with the first reason, and every
  party that must learn it (pending requests, subscriptions, the owner) is told then;
* :class:`FrameWriter`: one frame at a time on the pipe (a write lock), so frames from
  concurrent requests and answers never interleave;
* :class:`InboundRequests`: the child's requests not answered yet, bounded, so a child
  that floods requests without reading the answers fails its connection instead of
  growing the parent's memory (each open request costs a task and a frame).

What differs between protocols stays in each client: id scheme, error types, the
``jsonrpc`` member, how a frame is dispatched.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Generic, TypeVar

import anyio

from supervisor._public import home

__all__ = [
    "DEFAULT_MAX_INFLIGHT_REQUESTS",
    "CloseOnce",
    "FrameWriter",
    "InboundRequests",
    "Pending",
    "PendingRequests",
    "RequestId",
    "encode_frame",
    "is_request_id",
]

RequestId = int | str
DEFAULT_MAX_INFLIGHT_REQUESTS = 64
"""How many of the child's requests may await an answer at once, unless configured."""
ReasonT = TypeVar("ReasonT")
PendingT = TypeVar("PendingT", bound="Pending")


def is_request_id(value: object) -> bool:
    """A JSON-RPC id this side accepts: a string or an integer (never a bool)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def encode_frame(frame: Mapping[str, object], *, ascii_only: bool = False) -> bytes:
    """One compact JSON line."""
    text = json.dumps(frame, ensure_ascii=ascii_only, separators=(",", ":"))
    return text.encode("utf-8") + b"\n"


class Pending:
    """One request awaiting its answer; settled once (later settlements are ignored)."""

    __slots__ = ("done", "error", "method", "result")

    def __init__(self, method: str) -> None:
        self.method = method
        self.done = anyio.Event()
        self.result: object = None
        self.error: BaseException | None = None

    def settle(self, result: object = None, error: BaseException | None = None) -> bool:
        """Record the answer (or the failure); False if it was already settled."""
        if self.done.is_set():
            return False
        self.result = result
        self.error = error
        self.done.set()
        return True

    async def wait(self) -> object:
        """The result, or raise the recorded failure."""
        await self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result


class PendingRequests(Generic[PendingT]):
    """Requests awaiting their answer, by id."""

    def __init__(self) -> None:
        self._by_id: dict[RequestId, PendingT] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[PendingT]:
        return iter(list(self._by_id.values()))

    def add(self, request_id: RequestId, pending: PendingT) -> PendingT:
        self._by_id[request_id] = pending
        return pending

    def get(self, request_id: object) -> PendingT | None:
        if isinstance(request_id, int | str) and is_request_id(request_id):
            return self._by_id.get(request_id)
        return None

    def discard(self, request_id: RequestId) -> None:
        self._by_id.pop(request_id, None)

    def fail_all(self, error: Callable[[], BaseException]) -> None:
        """Settle every pending request with a fresh ``error()`` and forget them."""
        for pending in self._by_id.values():
            pending.settle(error=error())
        self._by_id.clear()


class CloseOnce(Generic[ReasonT]):
    """A connection's end: the first reason wins and is fanned out exactly once."""

    def __init__(self) -> None:
        self._reason: ReasonT | None = None
        self._event = anyio.Event()
        self._listeners: list[Callable[[ReasonT], None]] = []

    @property
    def reason(self) -> ReasonT | None:
        return self._reason

    @property
    def closed(self) -> bool:
        return self._reason is not None

    def on_close(self, listener: Callable[[ReasonT], None]) -> None:
        """``listener(reason)`` runs once, when the connection closes (in registration order)."""
        self._listeners.append(listener)

    def close(self, reason: ReasonT) -> bool:
        """Close with ``reason`` unless already closed; True if this call closed it."""
        if self._reason is not None:
            return False
        self._reason = reason
        self._event.set()
        for listener in self._listeners:
            listener(reason)
        return True

    async def wait(self) -> None:
        await self._event.wait()


class FrameWriter:
    """Writes whole frames one at a time through ``write`` (a write lock)."""

    def __init__(self, write: Callable[[bytes], Awaitable[None]]) -> None:
        self._write = write
        self._lock = anyio.Lock()

    async def send(self, data: bytes, *, check: Callable[[], None] | None = None) -> None:
        """Send one frame; ``check`` runs again once the lock is held (the connection
        may have closed while this frame waited its turn) and raises to refuse."""
        async with self._lock:
            if check is not None:
                check()
            await self._write(data)


class InboundRequests:
    """The child's requests that were received and not answered yet, at most ``limit``."""

    __slots__ = ("_limit", "_open")

    def __init__(self, limit: int = DEFAULT_MAX_INFLIGHT_REQUESTS) -> None:
        if limit <= 0:
            raise ValueError("the limit of unanswered requests must be positive")
        self._limit = limit
        self._open = 0

    @property
    def open(self) -> int:
        return self._open

    def admit(self) -> bool:
        """Count one more request; False when that makes more than ``limit`` open at once
        (the connection should then fail: the child is not reading its answers)."""
        self._open += 1
        return self._open <= self._limit

    def answered(self) -> None:
        """One request was answered (or its answer abandoned)."""
        if self._open > 0:
            self._open -= 1


home(
    "supervisor.provider",
    Pending,
    PendingRequests,
    CloseOnce,
    FrameWriter,
    InboundRequests,
    encode_frame,
    is_request_id,
)
