"""One exception hierarchy; every error carries a machine-readable ``code``.

The text of a start or teardown error is always built from safe facts (a diagnostic
line, a fixed sentence); the raw failure, if any, is on ``__cause__`` and in the host
log, never in ``str(error)``.
"""

from __future__ import annotations

from typing import ClassVar

from supervisor._public import home


class SubagentError(Exception):
    """Base of every error this package raises on purpose."""

    code: ClassVar[str] = "SUBAGENT_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NoProvider(SubagentError):
    code = "NO_PROVIDER"


class DuplicateProvider(SubagentError):
    code = "DUPLICATE_PROVIDER"


class UnsupportedCapability(SubagentError):
    code = "UNSUPPORTED_CAPABILITY"


class InvalidRequest(SubagentError):
    code = "INVALID_REQUEST"


class ConfigurationError(SubagentError):
    """A provider's configuration is unusable (found before anything spawns)."""

    code = "INVALID_CONFIG"


class StartFailed(SubagentError):
    """The child could not be started; it was rolled back first (unless ``quiescent`` is false).

    ``diagnostic`` is the bounded safe text (the startup failure line, then the
    teardown line when the rollback failed too).
    """

    code = "START_FAILED"

    def __init__(self, diagnostic: str, *, quiescent: bool = True) -> None:
        super().__init__(diagnostic)
        self.diagnostic = diagnostic
        self.quiescent = quiescent


class StartAborted(SubagentError):
    """The caller's abort signal fired before the child was published; it was rolled back."""

    code = "START_ABORTED"


class TeardownFailed(SubagentError):
    """The whole tree could not be proven gone, or the protocol shutdown failed.

    Never claims quiescence: ``quiescent`` is always false.
    """

    code = "TEARDOWN_FAILED"
    quiescent = False

    def __init__(self, diagnostic: str) -> None:
        super().__init__(diagnostic)
        self.diagnostic = diagnostic


home(
    "supervisor",
    SubagentError,
    ConfigurationError,
    DuplicateProvider,
    InvalidRequest,
    NoProvider,
    StartAborted,
    StartFailed,
    TeardownFailed,
    UnsupportedCapability,
)
