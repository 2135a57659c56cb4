"""The parent's side of ACP: an unattended client.

The client advertises no capabilities, keeps only ``agent_message_chunk`` text and the
session's cumulative cost from ``usage_update`` (in US dollars only), and answers
permission requests by policy, recording the closed facts of the latest decision.  The
run's progress is fed from the same updates, closed values only: ``tool_call`` and
``tool_call_update`` (the call's id, ``ToolKind`` and status), ``plan`` (its entries'
statuses), the answer's bytes, the turn's cost so far, and each permission decision.  (The
raw results the provider classifies itself are kept by the transport:
:class:`~supervisor.providers.acp._transport.RawResults`.)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from acp import RequestError
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    SessionNotification,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
)

from machines.acp import ACP_VOCABULARY
from supervisor.provider import Usage
from supervisor.wire import CappedText

ALLOW_KINDS = ("allow_once", "allow_always")
COST_DIGITS = 10  # a turn's cost is a difference of two cumulative floats: drop the float noise


class ProgressFeed(Protocol):
    """The run's progress notes (``ProviderRun.note_*``)."""

    def note_tool_call(self, call: Hashable, kind: str | None = None, status: str | None = None) -> None: ...
    def note_plan(self, statuses: Iterable[str]) -> None: ...
    def note_permission(self, decision: str) -> None: ...
    def note_answer_bytes(self, n: int) -> None: ...
    def note_usage(self, usage: Usage | None) -> None: ...


@dataclass(frozen=True, slots=True)
class PermissionFact:
    policy: str
    kind: str | None
    decision: str

    def line(self) -> str:
        return ACP_VOCABULARY.permission_line(policy=self.policy, request=self.kind, decision=self.decision)


class UnattendedClient:
    """The ``acp.Client`` the provider hands to the SDK."""

    def __init__(
        self, *, policy: str, output: CappedText, on_output: Callable[[], None], progress: ProgressFeed
    ) -> None:
        self.policy = policy
        self.output = output
        self._on_output = on_output
        self._progress = progress
        self.session_id: str | None = None
        self.replaying: str | None = None
        """The session being loaded (``session/load``): its replayed history is neither
        output nor usage; only its cumulative cost is noted, as the baseline of the next turn's."""
        self.permission: PermissionFact | None = None
        self.cost_usd: float | None = None
        """The session's cumulative cost, from the latest ``usage_update`` in USD."""
        self.cost_reported = False
        """Whether a ``usage_update`` with a cost in USD arrived during this turn."""
        self.cost_before: float | None = 0.0
        """The session's cumulative cost when this turn began; None when unknown (a resumed
        session whose earlier cost the agent did not replay: the turn's cost is then unknown)."""
        self.cost_unknown = False
        """Set for a resumed session: before any cost is seen, the baseline is unknown, not 0."""

    def next_turn(self, output: CappedText) -> None:
        """A new turn: fresh output, no decision yet (the cumulative cost carries on)."""
        self.output = output
        self.permission = None
        self.cost_reported = False
        cost = self.cost_usd
        self.cost_before = cost if cost is not None else (None if self.cost_unknown else 0.0)

    @property
    def turn_cost(self) -> float | None:
        """What this turn added to the session's cost, when a cost was reported in it."""
        if not self.cost_reported or self.cost_usd is None or self.cost_before is None:
            return None
        return round(self.cost_usd - self.cost_before, COST_DIGITS)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if session_id != self.session_id:
            if session_id == self.replaying and isinstance(update, UsageUpdate):
                cost = update.cost
                if cost is not None and cost.currency.upper() == "USD":
                    self.cost_usd = cost.amount
            return
        if isinstance(update, AgentMessageChunk):
            if isinstance(update.content, TextContentBlock) and update.content.text:
                text = update.content.text
                self.output.add(text)
                self._progress.note_answer_bytes(len(text.encode("utf-8", "surrogatepass")))
                self._on_output()
        elif isinstance(update, ToolCallStart | ToolCallProgress):
            self._progress.note_tool_call(update.tool_call_id, update.kind, update.status)
        elif isinstance(update, AgentPlanUpdate):
            self._progress.note_plan(entry.status for entry in update.entries)
        elif isinstance(update, UsageUpdate):
            cost = update.cost
            if cost is not None and cost.currency.upper() == "USD":
                self.cost_usd = cost.amount
                self.cost_reported = True
                self._progress.note_usage(Usage.from_reported({"cost_usd": self.turn_cost}))

    async def take_update(self, params: object) -> None:
        """A raw ``session/update`` notification, straight from the transport: validated with
        the SDK's model and passed on exactly as the SDK's router would (a failure raises)."""
        notification = SessionNotification.model_validate(params)
        await self.session_update(
            notification.session_id, notification.update, **(notification.field_meta or {})
        )

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        chosen = None
        if self.policy == "allow":
            chosen = next((o for o in options if o.kind in ALLOW_KINDS), None)
        self.permission = PermissionFact(
            policy=self.policy, kind=tool_call.kind, decision="allowed" if chosen else "denied"
        )
        self._progress.note_permission(self.permission.decision)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    async def read_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/read_text_file")

    async def write_text_file(self, *args: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("fs/write_text_file")
