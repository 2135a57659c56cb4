"""The sans-io side of the DSH SDK wire: frame models, the values the client hands out,
and the fold of one owned turn (:class:`TurnProgress`).

Nothing here does I/O; the client feeds it parsed notifications.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from supervisor.providers.dsh_sdk._errors import DshProtocolError
from supervisor.wire import CappedText

__all__ = [
    "Notification",
    "ServerInfo",
    "SessionEvent",
    "SessionStatus",
    "SubagentFinished",
    "SubagentStarted",
    "TurnEnd",
    "TurnEndKind",
    "TurnOutcome",
    "TurnProgress",
    "new_session_id",
]


_M = TypeVar("_M", bound=BaseModel)
MAX_OPEN_CALLS: Final = 10_000


class _Wire(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class _RpcErrorBody(_Wire):
    code: int
    message: str
    data: Any = None


class _ServerInfo(_Wire):
    name: str
    version: str


class _InitializeResult(_Wire):
    serverInfo: _ServerInfo


class _PromptResult(_Wire):
    messageId: str


class _SessionEventParams(_Wire):
    sessionId: str
    event: Any = None


class _SessionStatusParams(_Wire):
    sessionId: str
    status: Literal["idle", "running"]


class _SubagentStartedParams(_Wire):
    parentSessionId: str
    childSessionId: str


class _Envelope(_Wire):
    type: str
    data: Any = None


class _ContentBlock(_Wire):
    type: str
    text: Any = None
    id: Any = None


class _AssistantMessage(_Wire):
    content: list[_ContentBlock]


class _AssistantMessageData(_Wire):
    message: _AssistantMessage


class _Chunk(_Wire):
    type: str
    text: str


class _AssistantChunkData(_Wire):
    chunk: _Chunk


class _Cause(_Wire):
    kind: str


class _Reason(_Wire):
    kind: str
    reason: Any = None


class _TurnEndData(_Wire):
    reason: _Reason


class _InsertedMessage(_Wire):
    id: Any = None


class _InboxSplicedData(_Wire):
    inserted: list[Any]


def _parse(model: type[_M], value: object) -> _M | None:
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


# --------------------------------------------------------------------------- public values


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """The runtime's identity from ``initialize``."""

    name: str
    version: str


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """``session.event``: one session-log envelope (raw JSON, validated only for the owned turn)."""

    session_id: str
    event: object

    @property
    def type(self) -> str | None:
        return _event_type(self.event)


@dataclass(frozen=True, slots=True)
class SessionStatus:
    """``session.status``."""

    session_id: str
    status: Literal["idle", "running"]


@dataclass(frozen=True, slots=True)
class SubagentStarted:
    """``subagent.started``: teaches the client the session lineage."""

    parent_session_id: str
    child_session_id: str


@dataclass(frozen=True, slots=True)
class SubagentFinished:
    """``subagent.finished`` (local in-process child runs only); ``params`` is raw."""

    parent_session_id: str
    child_session_id: str
    params: Mapping[str, object]


Notification = SessionEvent | SessionStatus | SubagentStarted | SubagentFinished


class TurnEndKind(enum.StrEnum):
    """The closed turn-end kinds the client recognises; anything else is ``UNKNOWN``."""

    COMPLETED = "completed"
    MAX_TOKENS = "max-tokens"
    ABORTED = "aborted"
    BLOCKED = "blocked"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    UNKNOWN = "unknown"


_KNOWN_KINDS: Final = {kind.value: kind for kind in TurnEndKind if kind is not TurnEndKind.UNKNOWN}


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """The ``reason`` of a root ``turn/end`` event.

    ``raw_kind`` is the runtime's string (``None`` when the reason was malformed); ``cause``
    is the nested ``reason.kind`` of an ``aborted`` end (``user``, ``parent``, ``hook``,
    ``disposed``, ``legacy``, or whatever the runtime sent), else ``None``.  Both are
    child-controlled: classify with :attr:`kind` / :attr:`disposed`, never display them.
    """

    raw_kind: str | None
    cause: str | None = None

    @property
    def kind(self) -> TurnEndKind:
        if self.raw_kind is None:
            return TurnEndKind.UNKNOWN
        return _KNOWN_KINDS.get(self.raw_kind, TurnEndKind.UNKNOWN)

    @property
    def disposed(self) -> bool:
        """An ``aborted`` end whose cause is ``disposed``."""
        return self.kind is TurnEndKind.ABORTED and self.cause == "disposed"


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """A turn that reached the root session's ``idle``."""

    output: str
    turn_end: TurnEnd | None
    """The last root ``turn/end`` of the turn; ``None`` when the runtime sent none."""


class TurnProgress:
    """The fold of one owned turn, readable while the turn runs and after it failed.

    Output rule: the text of the last *non-empty* root ``assistant/message`` (content
    with at least one block; a block-ful message without text blocks counts and yields
    ``""``), else the root ``text-delta`` chunks accumulated.  Only notifications after
    the inbox receipt are folded, so a rejected or malformed prompt attributes no text.
    ``max_output_bytes`` bounds both texts (a prefix is kept).

    Progress, closed values only: :attr:`answer_bytes`, and :attr:`tool_updates` (the run
    drains them after each notification).  The runtime reports no tool results, so a
    root ``tool-call`` block is ``in_progress`` until the model speaks again (a later
    chunk or message of the turn: it has the call's result) or the turn ends, and then
    ``completed``; a failed call cannot be told apart.
    """

    def __init__(self, *, max_output_bytes: int | None = None) -> None:
        if max_output_bytes is not None and max_output_bytes < 0:
            raise ValueError("max_output_bytes must be non-negative")
        self._max_output_bytes = max_output_bytes
        self._message: CappedText | None = None
        self._deltas = CappedText(max_output_bytes)
        self.received = False
        """Whether the inbox receipt of the prompt has been seen."""
        self.turn_end: TurnEnd | None = None
        """The last root ``turn/end`` seen so far."""
        self._delta_bytes = 0
        self._message_bytes = 0
        self._open_calls: list[str] = []
        self.tool_updates: list[tuple[str, str]] = []
        """``(call id, status)`` updates not yet drained by the run."""

    @property
    def answer_bytes(self) -> int:
        """UTF-8 bytes of answer text received (before any cap): the deltas', or the
        latest message's when that is more."""
        return max(self._delta_bytes, self._message_bytes)

    def _close_calls(self) -> None:
        self.tool_updates.extend((call, "completed") for call in self._open_calls)
        self._open_calls.clear()

    @property
    def output(self) -> str:
        if self._message is not None:
            return self._message.text
        return self._deltas.text

    @property
    def truncated(self) -> bool:
        """Whether the current output hit ``max_output_bytes``."""
        return (self._message if self._message is not None else self._deltas).truncated

    def _fold(self, envelope: _Envelope) -> None:
        if envelope.type == "assistant/message":
            data = _parse(_AssistantMessageData, envelope.data)
            if data is None:
                raise DshProtocolError("an assistant/message event of the turn carried malformed content")
            content = data.message.content
            self._close_calls()
            if content:
                message = CappedText(self._max_output_bytes)
                size = 0
                for block in content:
                    if block.type == "text" and isinstance(block.text, str):
                        message.add(block.text)
                        size += len(block.text.encode("utf-8", "surrogatepass"))
                    elif block.type == "tool-call" and isinstance(block.id, str):
                        if len(self._open_calls) < MAX_OPEN_CALLS:
                            self._open_calls.append(block.id)
                        self.tool_updates.append((block.id, "in_progress"))
                self._message = message
                self._message_bytes = size
        elif envelope.type == "assistant/chunk":
            chunk = _parse(_AssistantChunkData, envelope.data)
            self._close_calls()
            if chunk is not None and chunk.chunk.type == "text-delta":
                self._deltas.add(chunk.chunk.text)
                self._delta_bytes += len(chunk.chunk.text.encode("utf-8", "surrogatepass"))
        elif envelope.type == "turn/end":
            self._close_calls()
            self.turn_end = _turn_end(envelope.data)


def _turn_end(data: object) -> TurnEnd:
    parsed = _parse(_TurnEndData, data)
    if parsed is None:
        return TurnEnd(raw_kind=None)
    cause = None
    if parsed.reason.kind == TurnEndKind.ABORTED:
        nested = _parse(_Cause, parsed.reason.reason)
        cause = nested.kind if nested is not None else None
    return TurnEnd(raw_kind=parsed.reason.kind, cause=cause)


def _event_type(event: object) -> str | None:
    if isinstance(event, dict):
        value = event.get("type")
        if isinstance(value, str):
            return value
    return None


def _is_receipt(note: Notification, session_id: str, message_id: str) -> bool:
    if not isinstance(note, SessionEvent) or note.session_id != session_id:
        return False
    envelope = _parse(_Envelope, note.event)
    if envelope is None or envelope.type != "agent/inbox/spliced":
        return False
    data = _parse(_InboxSplicedData, envelope.data)
    if data is None:
        return False
    return any(
        entry is not None and entry.id == message_id
        for entry in (_parse(_InsertedMessage, item) for item in data.inserted)
    )


def new_session_id() -> str:
    """A fresh child session id, minted by the client (``session-<uuid hex>``)."""
    return f"session-{uuid.uuid4().hex}"
