"""The agent messages of the owned turn: which text is the answer, which is partial output."""

from __future__ import annotations

from supervisor.providers.codex._protocol import AgentMessageItem
from supervisor.wire import CappedText, cap_text

__all__ = ["Answers"]


class Answers:
    """The agent messages of the owned turn: the answer, and partial text for failures.

    The answer is the last completed ``final_answer`` message, else the last completed
    message without a phase; ``commentary`` never counts.  Partial output (for a run
    that did not complete) falls back to a ``partial_answer`` or to streamed deltas.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._phases: dict[str, str | None] = {}
        self._streams: dict[str, CappedText] = {}
        self._streaming: str | None = None
        self._final: str | None = None
        self._unphased: str | None = None
        self._partial: str | None = None

    def started(self, item: AgentMessageItem) -> None:
        self._phases[item.id] = item.phase

    def delta(self, item_id: str, text: str) -> None:
        if self._phases.get(item_id) == "commentary":
            return
        self._streams.setdefault(item_id, CappedText(self._limit)).add(text)
        self._streaming = item_id

    def completed(self, item: AgentMessageItem) -> None:
        self._streams.pop(item.id, None)
        if self._streaming == item.id:
            self._streaming = None
        text = cap_text(item.text, self._limit)
        if item.phase == "final_answer":
            self._final = text
        elif item.phase is None:
            self._unphased = text
        elif item.phase == "partial_answer":
            self._partial = text

    def answer(self) -> str | None:
        return self._final if self._final is not None else self._unphased

    def partial(self) -> str:
        stream = self._streams.get(self._streaming) if self._streaming is not None else None
        streamed = stream.text if stream is not None else ""
        for candidate in (self._final, self._unphased, self._partial, streamed):
            if candidate and candidate.strip():
                return candidate
        return ""
