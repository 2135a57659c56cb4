"""The ``result`` message, read at the boundary and mapped to closed facts.

The SDK raises after yielding an error result (and a custom transport raises nothing),
so the category always comes from the result message itself: ``subtype``, ``is_error``
and ``result``.  Nothing read here ever reaches a diagnostic except the category.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from machines.claude_code import ClaudeCodeEvent

LIMIT_SUBTYPES = frozenset({"error_max_turns", "error_max_budget_usd", "error_max_structured_output_retries"})
PRODUCT_ERROR_SUBTYPES = frozenset({"error_during_execution"})


class ResultFacts(BaseModel):
    """The fields of a ``result`` message this provider relies on."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    subtype: str
    is_error: bool = Field(strict=True)
    result: str | None = None
    permission_denials: list[Any] | None = None

    @property
    def denied_something(self) -> bool:
        return bool(self.permission_denials)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a result message means: the event to feed, and the failure category (None: success)."""

    event: ClaudeCodeEvent
    category: str | None

    @property
    def succeeded(self) -> bool:
        return self.category is None


def read_result(fields: dict[str, Any]) -> ResultFacts | None:
    """Validate a result message's fields; None when they are malformed."""
    try:
        return ResultFacts.model_validate(fields)
    except ValidationError:
        return None


def classify(facts: ResultFacts | None) -> Verdict:
    """Success only for ``success`` + not ``is_error`` + a non-blank answer."""
    if facts is None:
        return Verdict(ClaudeCodeEvent.RESULT_FAILED, "unknown")
    if facts.subtype == "success":
        if facts.is_error or facts.result is None or not facts.result.strip():
            return Verdict(ClaudeCodeEvent.RESULT_INVALID, "invalid-result")
        return Verdict(ClaudeCodeEvent.RESULT_SUCCEEDED, None)
    if facts.subtype in LIMIT_SUBTYPES:
        return Verdict(ClaudeCodeEvent.RESULT_FAILED, "limit")
    if facts.subtype in PRODUCT_ERROR_SUBTYPES:
        return Verdict(ClaudeCodeEvent.RESULT_FAILED, "product-error")
    return Verdict(ClaudeCodeEvent.RESULT_FAILED, "unknown")
