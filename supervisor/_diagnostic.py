"""Safe diagnostic text: fixed lines built from a provider's vocabulary and closed facts
(the failure line, the limit line), and the 4096-byte bound.

Nothing here accepts free text: every field is checked against the closed
:class:`~machines.Vocabulary` of the provider that reports it, so a provider cannot put
an exception message, stderr or a payload into a line even by mistake.  This module
names no provider; each provider brings its own vocabulary.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from machines import Vocabulary
from supervisor._public import home
from supervisor.common._text import cap_text

MAX_DIAGNOSTIC_BYTES = 4096
TRUNCATION_SUFFIX = "\n[diagnostic truncated]"


class FailureFacts:
    """The closed facts of one failure; :meth:`line` renders the fixed failure line.

    ``fields`` are the vocabulary's extra closed fields by key (``stop_reason=``,
    ``http_status=``); each is checked against the vocabulary and rendered in its order.
    """

    __slots__ = ("category", "exit_code", "fields", "signal", "stage", "vocabulary")

    def __init__(
        self,
        vocabulary: Vocabulary,
        stage: str,
        category: str,
        *,
        exit_code: int | None = None,
        signal: str | None = None,
        **fields: str | int | None,
    ) -> None:
        if stage not in vocabulary.stages:
            raise ValueError(f"{vocabulary.label}: unknown stage {stage!r}")
        if category not in vocabulary.categories:
            raise ValueError(f"{vocabulary.label}: unknown category {category!r}")
        present = {key: value for key, value in fields.items() if value is not None}
        checked = {key: vocabulary.field(key).check(value) for key, value in present.items()}
        has_exit = exit_code is not None or signal is not None
        if has_exit and not vocabulary.allows_exit_facts(stage, category):
            raise ValueError("exit facts belong on the vocabulary's exit categories or teardown lines only")
        if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
            raise ValueError("exit code must be an integer")
        if signal is not None and not (signal.startswith("SIG") and signal[3:].isalnum()):
            raise ValueError("signal must be a signal name")
        self.vocabulary = vocabulary
        self.stage = stage
        self.category = category
        self.fields: tuple[tuple[str, str | int], ...] = tuple(
            (f.title, checked[f.key]) for f in vocabulary.fields if f.key in checked
        )
        self.exit_code = exit_code
        self.signal = signal

    def line(self) -> str:
        fields = [
            f"provider: {self.vocabulary.label}",
            f"stage: {self.stage}",
            f"category: {self.category}",
        ]
        fields.extend(f"{title}: {value}" for title, value in self.fields)
        if self.exit_code is not None:
            fields.append(f"exit code: {self.exit_code}")
        if self.signal is not None:
            fields.append(f"signal: {self.signal}")
        return f"Subagent failure ({'; '.join(fields)})"

    def __repr__(self) -> str:
        return f"FailureFacts({self.line()!r})"


class LimitResource(enum.StrEnum):
    """What a limit bounds (the ``resource`` of a limit line)."""

    MEMORY = "memory"
    PROCESSES = "processes"
    TIME = "time"
    SILENCE = "silence"


class LimitScope(enum.StrEnum):
    """Whose limit it was, when not the run's own (the ``scope`` of a limit line)."""

    HOST = "host"
    """The host ceiling: one group over all runs of the supervising process."""
    SYSTEM = "system"
    """A limit above the supervisor (its own cgroup's, the container's, the machine's)."""


_BINARY_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def format_bytes(size: int) -> str:
    """``256 MiB``: the largest binary unit that divides the size exactly, else bytes."""
    for unit, factor in _BINARY_UNITS:
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


def format_seconds(ms: float) -> str:
    """``600 s``, ``1.5 s``, ``0.25 s``: milliseconds as seconds, never in exponent form."""
    text = f"{ms / 1000:.6f}".rstrip("0").rstrip(".")
    return f"{text or '0'} s"


@dataclass(frozen=True, slots=True)
class LimitFacts:
    """The closed facts of a limit that stopped a run; :meth:`line` renders the limit line.

    ``limit`` is bytes (memory), a count (processes) or milliseconds (time, silence);
    None only with ``scope`` ``system`` (a limit the supervisor did not set).  Nothing
    here comes from the child: the values are the configured limits and the resource
    the kernel's counters (or the supervisor's own clock) name.
    """

    resource: LimitResource
    limit: int | float | None
    scope: LimitScope | None = None
    """None: the run's own limit."""

    def __post_init__(self) -> None:
        if self.limit is None and self.scope is not LimitScope.SYSTEM:
            raise ValueError("only a system limit may be unknown")
        if isinstance(self.limit, bool) or (self.limit is not None and not self.limit > 0):
            raise ValueError("a limit is a positive number")

    def line(self) -> str:
        fields = [f"resource: {self.resource}"]
        if self.limit is not None:
            if self.resource is LimitResource.MEMORY:
                value = format_bytes(int(self.limit))
            elif self.resource is LimitResource.PROCESSES:
                value = str(int(self.limit))
            else:
                value = format_seconds(self.limit)
            fields.append(f"limit: {value}")
        if self.scope is not None:
            fields.append(f"scope: {self.scope}")
        return f"Subagent limit ({'; '.join(fields)})"


def join_lines(*lines: str | None) -> str | None:
    """Join the present lines with ``\\n``; None when there are none."""
    present = [line for line in lines if line]
    return "\n".join(present) if present else None


def bound_diagnostic(text: str | None) -> str | None:
    """Apply the seam's bound: None for empty, else at most 4096 UTF-8 bytes.

    Over the bound, keep the longest prefix that fits with the suffix
    ``\\n[diagnostic truncated]``, never splitting a code point (the one text cap).
    """
    if not text:
        return None
    return cap_text(text, MAX_DIAGNOSTIC_BYTES, mark=TRUNCATION_SUFFIX)


home("supervisor.provider", FailureFacts, bound_diagnostic, join_lines)
