"""A provider's closed vocabulary: everything its diagnostic lines may say.

A failure line names the provider by its label, the stage it failed in, a category,
optional provider-specific closed fields (ACP's stop reason, Codex's HTTP status) and,
only where the vocabulary allows it, the child's exit facts.  A permission line
reports the latest unattended decision in closed terms.  Nothing here accepts free
text: every value is checked against the sets declared below, so a provider cannot
put an exception message, stderr or a payload into a line even by mistake.

Vocabularies live next to the charts they describe (the stages are read from the
chart, so the two cannot drift apart) and, like the charts, are pure data: the core
builds lines from a :class:`Vocabulary` and the facts, and names no provider itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ClosedField:
    """An extra field of a failure line whose value comes from a closed set of names."""

    key: str
    """The keyword a provider passes (``stop_reason``)."""
    title: str
    """How the line spells it (``stop reason``)."""
    values: frozenset[str]

    def check(self, value: object) -> str | int:
        if not isinstance(value, str) or value not in self.values:
            raise ValueError(f"{self.title} must be one of {', '.join(sorted(self.values))}")
        return value


@dataclass(frozen=True, slots=True)
class IntegerField:
    """An extra field of a failure line whose value is an integer in a closed range."""

    key: str
    title: str
    low: int
    high: int

    def check(self, value: object) -> str | int:
        if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
            raise ValueError(f"{self.title} must be an integer {self.low}..{self.high}")
        return value


LineField = ClosedField | IntegerField

BASE_CATEGORIES = frozenset({"unknown"})
"""Categories the base run itself reports for every kind (a provider task that raised, a
failed teardown); with ``start_timeout_category``, every vocabulary must name them."""


@dataclass(frozen=True, slots=True)
class DecisionField:
    """One field of a permission line.  ``fallback`` replaces an out-of-set value
    (ACP's tool kinds become ``unknown``); without one, such a value is an error."""

    name: str
    values: frozenset[str]
    fallback: str | None = None

    def render(self, value: object) -> str:
        if isinstance(value, str) and value in self.values:
            return value
        if self.fallback is not None:
            return self.fallback
        raise ValueError(f"unknown {self.name} {value!r}")


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """The closed vocabulary of one provider kind."""

    label: str
    """How diagnostics name the provider (``ACP``, ``Codex``)."""
    stages: tuple[str, ...]
    """Every stage, in chart order: read them from the chart (``Lifecycle.STAGES``)."""
    categories: frozenset[str]
    exit_categories: frozenset[str] = frozenset()
    """Categories whose lines may carry the child's exit code and signal."""
    teardown_stage: str = "teardown"
    """The stage a teardown (or shutdown) failure line names."""
    teardown_exit_facts: bool = True
    """Whether a teardown line carries the child's exit facts, whatever its category."""
    fields: tuple[LineField, ...] = ()
    """Extra closed fields, rendered in this order after the category."""
    decision: tuple[DecisionField, ...] = ()
    """The fields of this provider's permission line, in order (none: no such line)."""
    start_timeout_category: str = "unknown"
    """The category of a start that overran ``start_timeout_ms`` (in the stage it was in)."""
    _by_key: Mapping[str, LineField] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.label or not self.stages:
            raise ValueError("a vocabulary needs a label and at least one stage")
        missing = BASE_CATEGORIES - self.categories
        if missing:  # refused now, not when a run first fails
            raise ValueError(
                f"{self.label}: the vocabulary lacks the categories every run may report: {sorted(missing)}"
            )
        unknown = (self.exit_categories | {self.start_timeout_category}) - self.categories
        if self.teardown_stage not in self.stages:
            unknown |= {self.teardown_stage}
        if unknown:
            raise ValueError(f"{self.label}: names outside the vocabulary: {sorted(unknown)}")
        object.__setattr__(self, "_by_key", {f.key: f for f in self.fields})

    def allows_exit_facts(self, stage: str, category: str) -> bool:
        if category in self.exit_categories:
            return True
        return self.teardown_exit_facts and stage == self.teardown_stage

    def field(self, key: str) -> LineField:
        try:
            return self._by_key[key]
        except KeyError:
            raise ValueError(f"unknown field {key!r} for {self.label} lines") from None

    def permission_line(self, **values: str | None) -> str:
        """``<label> unattended decision (<name>: <value>; ...)`` from closed values."""
        if not self.decision:
            raise ValueError(f"{self.label} has no permission line")
        if set(values) != {d.name for d in self.decision}:
            raise ValueError(f"{self.label} permission line fields are {[d.name for d in self.decision]}")
        parts = "; ".join(f"{d.name}: {d.render(values[d.name])}" for d in self.decision)
        return f"{self.label} unattended decision ({parts})"


for _public in (Vocabulary, ClosedField, IntegerField, DecisionField):
    _public.__module__ = "machines"  # its public home (``machines``), as ``help()`` should say
del _public
