"""The provider-neutral seam: what a parent asks for and what it gets back."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
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
    """The agent's own session id (ACP ``sessionId``, Codex ``threadId``, Claude Code
    ``session_id``) to continue instead of opening a new session.  Host-side only."""
    turns_before: int = 0
    """How many turns the conversation already had (an interrupted one counted): a
    resumed run is published idle with ``run.turn == turns_before``."""
    keep: bool = False
    """Open the session so that it can be resumed after this process is gone (the run
    is journaled: e.g. a Codex thread is started non-ephemeral)."""


class SubagentRequest(BaseModel):
    """One delegated task.

    The start-time options are carried so that the registry can *reject* them for a
    provider that cannot honour them, rather than silently dropping them.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

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

    model_config = ConfigDict(frozen=True)

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

    model_config = ConfigDict(frozen=True, extra="forbid")

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

    model_config = ConfigDict(frozen=True)

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


home("supervisor", StopReason, SubagentRequest, SubagentResult, Capabilities, Resources, Usage, SessionPlan)
