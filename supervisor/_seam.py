"""The provider-neutral seam: what a parent asks for and what it gets back, and the
progress snapshots it may read while a run works (:class:`Progress`; the engine's
tracker that builds them is ``supervisor.run._progress``)."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError, field_validator

from supervisor._diagnostic import bound_diagnostic
from supervisor._public import home
from supervisor.common._clean import clean_text


class StopReason(enum.StrEnum):
    """The shared terminal vocabulary.  A result may carry another string; treat it as a failure."""

    COMPLETED = "completed"
    MAX_TOKENS = "max-tokens"
    REFUSAL = "refusal"
    ABORTED = "aborted"
    ERROR = "error"


class Capabilities(BaseModel):
    """Optional features.  The four built-in providers support no start-time option
    (``output_schema`` to ``agent_options``) and all of them can converse."""

    model_config = ConfigDict(frozen=True)

    output_schema: bool = False
    depth_limit: bool = False
    tool_filter: bool = False
    persona: bool = False
    agent_options: bool = False
    conversation: bool = False
    """The kind keeps a run alive for more turns (``Registry.run(..., conversation=True)``)."""
    resume: bool = False
    """The kind can continue an agent's own session in a new process (a cold resume:
    ``SessionPlan.resume``), e.g. ACP ``session/resume`` or ``session/load``."""


NO_CAPABILITIES = Capabilities()


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """How a run treats the agent's own session, beyond opening a new one.

    The registry passes it to ``Provider.create_run(request, trace=..., session=plan)``
    only when it is needed (a kind written before it existed never sees the keyword),
    and a plan with ``resume`` only to a kind whose capabilities declare ``resume``.
    """

    run_id: str | None = None
    """The run takes this id instead of minting one: a resumed conversation keeps the
    journaled run id."""
    resume: str | None = None
    """The agent's own session id (ACP's ``sessionId``, or whatever id the kind's protocol
    gives a session) to continue instead of opening a new session.  Host-side only."""
    turns_before: int = 0
    """How many turns the conversation already had (an interrupted one counted): a
    resumed run is published idle with ``run.turn == turns_before``."""
    keep: bool = False
    """Open the session so that it can be resumed after this process is gone (the run
    is journaled: e.g. an agent that forgets a session unless told to keep it is told)."""


class SubagentRequest(BaseModel):
    """One delegated task.

    The start-time options are carried so that the registry can *reject* them for a
    provider that cannot honour them, rather than silently dropping them.
    """

    # defer_build: the schema is built on first validation, not when a command imports it.
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, defer_build=True)

    task: str
    label: str | None = None
    parent_cwd: Path | None = None
    output_schema: dict[str, Any] | None = None
    max_depth: Any = None
    tool_filter: dict[str, Any] | None = None
    persona: str | None = None
    agent_options: dict[str, Any] | None = None

    @field_validator("task")
    @classmethod
    def _task_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("task must not be blank")
        # A lone surrogate (a JSON ``\\ud800`` escape from an MCP client or a batch line)
        # cannot travel to the child as UTF-8: it becomes U+FFFD, like in every output.
        return clean_text(value)

    @field_validator("label")
    @classmethod
    def _label_clean(cls, value: str | None) -> str | None:
        return None if value is None else clean_text(value)


class Resources(BaseModel):
    """What a run's whole tree used, from the kernel's counters (cgroup containment only).

    A field is None where the kernel does not count it here (no memory or pids
    controller for the run).  Numbers only: nothing here comes from the child.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    cpu_s: float | None = Field(default=None, ge=0)
    """CPU time of the whole tree, in seconds."""
    memory_peak_bytes: int | None = Field(default=None, ge=0)
    """The highest memory use of the tree at once (cgroup accounting: it includes page cache)."""
    pids_peak: int | None = Field(default=None, ge=0)
    """The most processes and threads alive in the tree at once."""


MAX_TOKENS_COUNT = 2**63 - 1
TokenCount = Annotated[StrictInt, Field(ge=0, le=MAX_TOKENS_COUNT)]
Cost = Annotated[StrictFloat | StrictInt, Field(ge=0)]


class Usage(BaseModel):
    """What one turn used, as the agent reported it: numbers only, validated.

    ``input_tokens`` counts every input token of the turn, cached ones included
    (``cached_input_tokens`` says how many of them were read from a cache);
    ``output_tokens`` includes reasoning tokens; ``cost_usd`` is in US dollars.  A field
    the agent did not report is None.  Nothing here is ever child text.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    input_tokens: TokenCount | None = None
    output_tokens: TokenCount | None = None
    cached_input_tokens: TokenCount | None = None
    cost_usd: Cost | None = None

    @field_validator("cost_usd")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value):
            raise ValueError("cost_usd must be a finite number")
        return float(value)

    @classmethod
    def from_reported(cls, fields: Mapping[str, object]) -> Usage | None:
        """Build usage from numbers a child reported, keeping only the valid ones.

        A value that is not a valid number for its field (negative, a string, a bool,
        NaN, out of range) is dropped, never raised and never copied; None when
        nothing valid remains, or when ``fields`` is not a mapping at all.  (Building
        ``Usage(...)`` directly raises pydantic's ``ValidationError``, whose text quotes
        the value: never build it from a child's numbers that way.)
        """
        if not isinstance(fields, Mapping):  # the child reported something else entirely
            return None
        kept: dict[str, object] = {}
        for name in cls.model_fields:
            value = fields.get(name)
            if value is None:
                continue
            try:
                cls.model_validate({name: value})
            except (ValidationError, ValueError, TypeError, OverflowError):
                continue
            kept[name] = value
        return cls.model_validate(kept) if kept else None


class SubagentResult(BaseModel):
    """What the parent receives.  The diagnostic bound is applied here, on every path, and
    so is the one text rule: the child's text never holds a lone surrogate (each becomes
    U+FFFD), so every output (terminal, JSON, records, MCP, spans, logs) can encode it.

    ``usage`` is what the turn used, when the agent reported it.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    output: str = ""
    stop_reason: str
    diagnostic: str | None = Field(default=None)
    usage: Usage | None = None

    @field_validator("output", "stop_reason")
    @classmethod
    def _clean(cls, value: str) -> str:
        return clean_text(value)

    @field_validator("diagnostic")
    @classmethod
    def _bounded(cls, value: str | None) -> str | None:
        return bound_diagnostic(None if value is None else clean_text(value))


# -- progress: what a run is doing now (closed facts and numbers only) ----------------------

TOOL_KINDS: frozenset[str] = frozenset(
    ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other")
)
"""The default closed set of tool-call kinds: ACP's ``ToolKind``.  A provider whose
protocol names its calls otherwise sets ``ProviderRun.tool_kinds`` to its own closed set
(it must hold ``other``)."""
TOOL_CALL_STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed", "failed")
"""A tool call's statuses (ACP's ``ToolCallStatus``); every call is in exactly one."""
PLAN_STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed")
"""A plan entry's statuses (ACP's ``PlanEntryStatus``)."""
PERMISSION_DECISIONS: tuple[str, ...] = ("allowed", "denied")
"""How the unattended supervisor answered a permission request."""


class ProgressCounts(Mapping[str, int]):
    """An immutable, hashable count per closed name (zero counts are left out), in name
    order.  Compares equal to any mapping with the same non-zero items."""

    __slots__ = ("_counts", "_hash")

    def __init__(self, counts: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = counts.items() if isinstance(counts, Mapping) else counts
        self._counts: dict[str, int] = {name: int(n) for name, n in sorted(items) if n}
        self._hash: int | None = None

    @classmethod
    def _of(cls, counts: dict[str, int]) -> ProgressCounts:
        """From the tracker's own counts (ints already): no checks, no copy of zeros."""
        made = cls.__new__(cls)
        made._counts = dict(sorted(item for item in counts.items() if item[1]))
        made._hash = None
        return made

    def __getitem__(self, name: str) -> int:
        return self._counts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._counts.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if other is self:  # a snapshot reuses its counts while they do not change
            return True
        if isinstance(other, ProgressCounts):
            return self._counts == other._counts
        if isinstance(other, Mapping):
            return self._counts == {k: v for k, v in other.items() if v}
        return NotImplemented

    def __repr__(self) -> str:
        return f"ProgressCounts({self._counts!r})"

    @property
    def total(self) -> int:
        """The sum of the counts."""
        return sum(self._counts.values())


NO_COUNTS = ProgressCounts()


@dataclass(frozen=True, slots=True)
class Progress:
    """What a run is doing, as closed facts and numbers: never a title, a path, a
    command, an argument or any other child text.  Frozen, hashable and comparable.

    The counts are the current turn's (a conversation's later turn starts again from
    zero); ``elapsed_ms`` counts from the turn's start (the spawn, for turn 1) and stops
    when the turn settles.
    """

    stage: str
    """The run's current stage (its lifecycle's vocabulary)."""
    turn: int
    """The turn's number: 1 is the request's task, each ``send`` the next."""
    elapsed_ms: int
    """Milliseconds since the turn began (frozen once it settled)."""
    tool_calls: ProgressCounts = NO_COUNTS
    """Tool calls by kind (the provider's closed set: ACP's ``ToolKind`` by default, or the
    kind's own ``tool_kinds``, e.g. its protocol's item types or its agent's tool names;
    ``other`` for the rest)."""
    tool_call_status: ProgressCounts = NO_COUNTS
    """The same calls by their latest status (:data:`TOOL_CALL_STATUSES`)."""
    permissions: ProgressCounts = NO_COUNTS
    """Permission requests by the decision taken (:data:`PERMISSION_DECISIONS`)."""
    plan: ProgressCounts = NO_COUNTS
    """The agent's latest plan: its entries by status (:data:`PLAN_STATUSES`)."""
    answer_bytes: int = 0
    """UTF-8 bytes of answer text received so far (before any output cap)."""
    usage: Usage | None = None
    """What the turn used so far, where the agent reports it while it works."""
    settled: bool = False
    """Whether the turn's result has settled (this snapshot is its last word)."""

    @property
    def tool_call_total(self) -> int:
        """How many tool calls the turn made."""
        return self.tool_calls.total

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-ready values (counts as objects, usage as its non-None fields)."""
        return {
            "stage": self.stage,
            "turn": self.turn,
            "elapsed_ms": self.elapsed_ms,
            "tool_calls": dict(self.tool_calls),
            "tool_call_status": dict(self.tool_call_status),
            "permissions": dict(self.permissions),
            "plan": dict(self.plan),
            "answer_bytes": self.answer_bytes,
            "usage": None if self.usage is None else self.usage.model_dump(exclude_none=True),
            "settled": self.settled,
        }


# -- the line ---------------------------------------------------------------------------

SEPARATOR = " · "


def progress_line(p: Progress) -> str:
    """One fixed English line of ``p``, for people and models, e.g.
    ``prompt · turn 2 · 42 s · 5 tool calls (edit 3, execute 2) · 1,204 output tokens``.

    The grammar, in order, parts joined by `` · ``; a part whose count is zero (or
    unknown) is left out:

    * the stage; ``turn N``; the elapsed time (``7 s``, ``3 min 07 s``, ``1 h 02 min``);
    * ``N tool call(s) (kind n, ...)``, kinds by count then name, then ``; N running``
      (pending or in progress) and ``N failed`` inside the parentheses when not zero;
    * ``plan D/N done`` (completed entries of all);
    * ``N permission request(s) (allowed n, denied n)``;
    * ``N answer byte(s)``; ``N output token(s)`` (when the agent reported them).

    Numbers use a comma every three digits.
    """
    parts = [p.stage, f"turn {p.turn}", _elapsed(p.elapsed_ms)]
    kinds = p.tool_calls._counts  # this module's own: plain dicts read directly (a live line's cost)
    if kinds:
        calls = sum(kinds.values())
        ordered = sorted(kinds.items(), key=_count_then_name) if len(kinds) > 1 else kinds.items()
        inner = ", ".join([f"{kind} {n:,}" for kind, n in ordered])
        status = p.tool_call_status._counts
        running = status.get("pending", 0) + status.get("in_progress", 0)
        failed = status.get("failed", 0)
        if running or failed:
            tail = [f"{running:,} running"] if running else []
            if failed:
                tail.append(f"{failed:,} failed")
            inner += "; " + ", ".join(tail)
        parts.append(f"{_count(calls, 'tool call')} ({inner})")
    plan = p.plan._counts
    if plan:
        parts.append(f"plan {plan.get('completed', 0):,}/{sum(plan.values()):,} done")
    asked = p.permissions._counts
    if asked:
        inner = ", ".join([f"{d} {asked[d]:,}" for d in PERMISSION_DECISIONS if d in asked])
        parts.append(f"{_count(sum(asked.values()), 'permission request')} ({inner})")
    if p.answer_bytes:
        parts.append(_count(p.answer_bytes, "answer byte"))
    tokens = None if p.usage is None else p.usage.output_tokens
    if tokens is not None:
        parts.append(_count(tokens, "output token"))
    return SEPARATOR.join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _count_then_name(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def _elapsed(ms: int) -> str:
    seconds = max(ms, 0) // 1000
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600:,} h {seconds // 60 % 60:02d} min"


home("supervisor", StopReason, SubagentRequest, SubagentResult, Capabilities, Resources, Usage, SessionPlan)
home("supervisor", Progress, ProgressCounts, progress_line)
