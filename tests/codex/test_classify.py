"""``codexErrorInfo`` -> category, over every variant the pinned binary's schema lists."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from machines.codex import CODEX_VOCABULARY
from supervisor._diagnostic import FailureFacts
from supervisor.providers.codex._classify import OBJECT_VARIANTS, STRING_VARIANTS, Category, classify
from tests.support.codex_schema import ProtocolSchema

# The contract's Codex table; "any other well-formed variant" is product-error.
SPEC_TABLE: dict[str, str] = {
    "contextWindowExceeded": "limit",
    "sessionBudgetExceeded": "limit",
    "usageLimitExceeded": "limit",
    "rateLimitExceeded": "limit",
    "unauthorized": "access-policy",
    "cyberPolicy": "access-policy",
    "sandboxError": "access-policy",
    "serverOverloaded": "service",
    "internalServerError": "service",
    "flexUnavailable": "service",
    "httpConnectionFailed": "transport",
    "responseStreamConnectionFailed": "transport",
    "responseStreamDisconnected": "transport",
    "responseTooManyFailedAttempts": "transport",
    "badRequest": "product-error",
    "threadRollbackFailed": "product-error",
    "activeTurnNotSteerable": "product-error",
    "modelNotFound": "product-error",
    "other": "product-error",
}


def expected(variant: str) -> str:
    return SPEC_TABLE.get(variant, "product-error")


def example_payload(schema: dict[str, Any]) -> dict[str, Any]:
    """A minimal well-formed payload for an object variant's schema."""
    payload: dict[str, Any] = {}
    for name in schema.get("required", []):
        if name == "turnKind":
            payload[name] = "review"
        else:  # pragma: no cover - the pinned schema has no other required field
            raise AssertionError(f"unexpected required field {name}")
    return payload


def test_the_classifier_knows_exactly_the_schema_variants(protocol: ProtocolSchema) -> None:
    assert set(STRING_VARIANTS) == protocol.codex_error_strings()
    assert set(OBJECT_VARIANTS) == set(protocol.codex_error_objects())
    assert set(SPEC_TABLE) <= protocol.codex_error_strings() | set(protocol.codex_error_objects())


def test_every_string_variant_maps_per_the_contract(protocol: ProtocolSchema) -> None:
    for variant in sorted(protocol.codex_error_strings()):
        verdict = classify(variant)
        assert verdict.category == expected(variant), variant
        assert verdict.http_status is None
        assert verdict.context_window_exceeded == (variant == "contextWindowExceeded")
        assert verdict.sandbox_error == (variant == "sandboxError")


def test_every_object_variant_maps_per_the_contract(protocol: ProtocolSchema) -> None:
    for key, schema in sorted(protocol.codex_error_objects().items()):
        payload = example_payload(schema)
        verdict = classify({key: payload})
        assert verdict.category == expected(key), key
        assert verdict.http_status is None
        if "httpStatusCode" in schema.get("properties", {}):
            assert classify({key: {"httpStatusCode": 429}}).http_status == 429
            assert classify({key: {"httpStatusCode": None}}).http_status is None


@pytest.mark.parametrize(
    ("status", "kept"),
    [
        (0, 0),
        (200, 200),
        (65535, 65535),
        (-1, None),
        (65536, None),
        ("503", None),
        (503.0, None),
        (True, None),
    ],
)
def test_http_status_only_when_an_integer_in_range(status: object, kept: int | None) -> None:
    verdict = classify({"responseTooManyFailedAttempts": {"httpStatusCode": status}})
    assert verdict.category is Category.TRANSPORT
    assert verdict.http_status == kept


@pytest.mark.parametrize(
    "info",
    [
        None,
        42,
        True,
        [],
        ["other"],
        {},
        "",
        "Other",
        "somethingNewer",
        {"somethingNewer": {}},
        {"httpConnectionFailed": 503},
        {"httpConnectionFailed": None},
        {"httpConnectionFailed": {}, "other": {}},
        {"other": {}},
        {"activeTurnNotSteerable": {}},
        {"activeTurnNotSteerable": {"turnKind": "chat"}},
        {"activeTurnNotSteerable": {"turnKind": ["review"]}},
    ],
)
def test_malformed_or_unknown_values_are_unknown(info: object) -> None:
    assert classify(info).category is Category.UNKNOWN
    assert classify(info).http_status is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=30), inner, max_size=3),
    max_leaves=8,
)


@given(info=json_values | st.sampled_from(sorted(STRING_VARIANTS)))
def test_any_value_gives_a_closed_category(info: object) -> None:
    verdict = classify(info)
    codex = CODEX_VOCABULARY
    assert verdict.category.value in codex.categories
    # The facts always render in the closed shape: nothing of the value is copied.
    line = FailureFacts(
        CODEX_VOCABULARY, "turn", verdict.category.value, http_status=verdict.http_status
    ).line()
    assert re.fullmatch(
        r"Subagent failure \(provider: Codex; stage: turn; category: [a-z-]+(; HTTP status: \d+)?\)", line
    )
