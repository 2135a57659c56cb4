"""The provider-neutral seam: what a parent asks for and what it gets back."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from supervisor._clean import clean_text
from supervisor._diagnostic import bound_diagnostic
from supervisor._public import home


class StopReason(enum.StrEnum):
    """The shared terminal vocabulary.  A result may carry another string; treat it as a failure."""

    COMPLETED = "completed"
    MAX_TOKENS = "max-tokens"
    REFUSAL = "refusal"
    ABORTED = "aborted"
    ERROR = "error"


class Capabilities(BaseModel):
    """Optional start-time features.  All four out-of-process providers support none."""

    model_config = ConfigDict(frozen=True)

    output_schema: bool = False
    depth_limit: bool = False
    tool_filter: bool = False
    persona: bool = False
    agent_options: bool = False


NO_CAPABILITIES = Capabilities()


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


class SubagentResult(BaseModel):
    """What the parent receives.  The diagnostic bound is applied here, on every path, and
    so is the one text rule: the child's text never holds a lone surrogate (each becomes
    U+FFFD), so every output (terminal, JSON, records, MCP, spans, logs) can encode it."""

    model_config = ConfigDict(frozen=True)

    output: str = ""
    stop_reason: str
    diagnostic: str | None = Field(default=None)

    @field_validator("output", "stop_reason")
    @classmethod
    def _clean(cls, value: str) -> str:
        return clean_text(value)

    @field_validator("diagnostic")
    @classmethod
    def _bounded(cls, value: str | None) -> str | None:
        return bound_diagnostic(None if value is None else clean_text(value))


home("supervisor", StopReason, SubagentRequest, SubagentResult, Capabilities, Resources)
