"""``codexErrorInfo`` of a failed turn -> the closed Codex category.

The pinned app-server (codex 0.171.0) describes ``CodexErrorInfo`` as a union of plain
strings and single-key objects, closed by a catch-all ``string | object``.  Only the
variants listed here are *well-formed*; anything else (another string, an object with
another key or more than one key, a non-object payload, a missing value) is malformed
and classifies as ``unknown``.  Nothing from the value is ever copied into a result:
the category comes from a fixed table and the HTTP status is kept only when it is an
integer in 0..65535.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "OBJECT_VARIANTS",
    "STRING_VARIANTS",
    "Category",
    "Classification",
    "classify",
]


class Category(enum.StrEnum):
    """The closed Codex categories a failed turn can carry."""

    LIMIT = "limit"
    ACCESS_POLICY = "access-policy"
    SERVICE = "service"
    TRANSPORT = "transport"
    PRODUCT_ERROR = "product-error"
    UNKNOWN = "unknown"


STRING_VARIANTS: Final[Mapping[str, Category]] = {
    # limit
    "contextWindowExceeded": Category.LIMIT,
    "sessionBudgetExceeded": Category.LIMIT,
    "usageLimitExceeded": Category.LIMIT,
    "rateLimitExceeded": Category.LIMIT,
    # access-policy
    "unauthorized": Category.ACCESS_POLICY,
    "cyberPolicy": Category.ACCESS_POLICY,
    "sandboxError": Category.ACCESS_POLICY,
    # service
    "serverOverloaded": Category.SERVICE,
    "internalServerError": Category.SERVICE,
    "flexUnavailable": Category.SERVICE,
    # product-error: named by the contract ...
    "badRequest": Category.PRODUCT_ERROR,
    "threadRollbackFailed": Category.PRODUCT_ERROR,
    "modelNotFound": Category.PRODUCT_ERROR,
    "other": Category.PRODUCT_ERROR,
    # ... and every other well-formed string variant of the pinned schema.
    "policyCapacityUnavailable": Category.PRODUCT_ERROR,
    "bioPolicy": Category.PRODUCT_ERROR,
    "misalignmentPolicyViolation": Category.PRODUCT_ERROR,
    "tooManyDenials": Category.PRODUCT_ERROR,
    "inferenceHookDenied": Category.PRODUCT_ERROR,
}
"""Every string variant of the pinned schema and its category."""

_TRANSPORT_KEYS: Final = frozenset(
    {
        "httpConnectionFailed",
        "responseStreamConnectionFailed",
        "responseStreamDisconnected",
        "responseTooManyFailedAttempts",
    }
)
_NON_STEERABLE_TURN_KINDS: Final = frozenset({"review", "compact"})

OBJECT_VARIANTS: Final[Mapping[str, Category]] = {
    **dict.fromkeys(sorted(_TRANSPORT_KEYS), Category.TRANSPORT),
    "activeTurnNotSteerable": Category.PRODUCT_ERROR,
}
"""Every single-key object variant of the pinned schema and its category."""

MAX_HTTP_STATUS: Final = 65535


@dataclass(frozen=True, slots=True)
class Classification:
    """The closed facts drawn from one ``codexErrorInfo``."""

    category: Category
    http_status: int | None = None
    context_window_exceeded: bool = False
    sandbox_error: bool = False


_UNKNOWN: Final = Classification(Category.UNKNOWN)


def _http_status(payload: Mapping[object, object]) -> int | None:
    value = payload.get("httpStatusCode")
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_HTTP_STATUS:
        return value
    return None


def classify(info: object) -> Classification:
    """Classify a ``codexErrorInfo`` value as received (already JSON-decoded)."""
    if isinstance(info, str):
        category = STRING_VARIANTS.get(info)
        if category is None:
            return _UNKNOWN
        return Classification(
            category,
            context_window_exceeded=info == "contextWindowExceeded",
            sandbox_error=info == "sandboxError",
        )
    if not isinstance(info, Mapping) or len(info) != 1:
        return _UNKNOWN
    ((key, payload),) = info.items()
    if not isinstance(key, str) or key not in OBJECT_VARIANTS or not isinstance(payload, Mapping):
        return _UNKNOWN
    if key in _TRANSPORT_KEYS:
        return Classification(Category.TRANSPORT, http_status=_http_status(payload))
    # activeTurnNotSteerable: the schema requires its turn kind.
    turn_kind = payload.get("turnKind")
    if not isinstance(turn_kind, str) or turn_kind not in _NON_STEERABLE_TURN_KINDS:
        return _UNKNOWN
    return Classification(Category.PRODUCT_ERROR)
