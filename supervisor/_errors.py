"""One exception hierarchy; every error carries a machine-readable ``code``.

The text of a start or teardown error is always built from safe facts (a diagnostic
line, a fixed sentence); the raw failure, if any, is on ``__cause__`` and in the host
log, never in ``str(error)``.
"""

from __future__ import annotations

import enum
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


class ProviderUnusable(NoProvider):
    """An installed provider (a plug-in) that cannot be used here: its module does not
    import, its entry point names no kind, or its run cannot be built (a run class that
    fills in no hooks).  The text names the distribution and why, in one line; the raw
    error is on ``__cause__`` and in the host log.  The CLI prints it and exits 1."""

    code = "PROVIDER_UNUSABLE"


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


class TurnInProgress(SubagentError):
    """``send`` was called while a turn of the conversation is still running (or while
    another ``send`` is waiting to begin the next one).  Nothing was sent; the running
    turn goes on."""

    code = "TURN_IN_PROGRESS"

    def __init__(self) -> None:
        super().__init__("a turn is already running")


class ConversationEnd(enum.StrEnum):
    """Why a conversation is over (closed values: they appear in the error's text)."""

    CHILD_EXITED = "child exited"
    """The child died, during a turn or between turns."""
    SESSION_UNUSABLE = "session unusable"
    """A turn left the protocol session unable to take another turn (a broken wire, a
    turn the agent never finished, a provider failure)."""
    IDLE_TIMEOUT = "idle timeout"
    """No turn for ``idle_timeout_ms``: the run was torn down."""
    CANCEL_UNFINISHED = "cancelled turn did not end"
    """A cancelled turn was not ended by the agent within ``dispose_grace_ms``."""
    ABORTED = "aborted"
    """The run's abort signal fired."""
    LIMIT = "limit"
    """A limit of the run (``timeout_ms``, ``stall_timeout_ms``) stopped a turn; the
    turn's diagnostic names it."""
    CLOSED = "closed"
    """The run was disposed (``dispose()`` or leaving its ``async with``)."""
    NOT_RESUMABLE = "not resumable"
    """A cold resume could not continue the agent's session: the kind cannot resume,
    or the agent does not offer or refused it.  Said before any task is sent."""


class ConversationOver(SubagentError):
    """``send`` on a conversation that has ended.  Its text is closed facts only::

        subagent conversation is over (provider: ACP; turn: 2; reason: child exited; exit code: 3)

    ``turn`` is the number of the last turn; ``exit_code`` and ``signal`` are the direct
    child's, when its exit was observed.  ``limit`` is the limit line when the kernel ended
    the idle child for one of the run's limits (``Subagent limit (resource: memory; limit:
    256 MiB)``), the second line of the text.
    """

    code = "CONVERSATION_OVER"

    def __init__(
        self,
        label: str,
        turn: int,
        reason: ConversationEnd,
        *,
        exit_code: int | None = None,
        signal: str | None = None,
        limit: str | None = None,
    ) -> None:
        fields = [f"provider: {label}", f"turn: {turn}", f"reason: {reason.value}"]
        if exit_code is not None:
            fields.append(f"exit code: {exit_code}")
        if signal is not None:
            fields.append(f"signal: {signal}")
        text = f"subagent conversation is over ({'; '.join(fields)})"
        super().__init__(text if limit is None else f"{text}\n{limit}")
        self.limit = limit
        self.turn = turn
        self.reason = reason
        self.exit_code = exit_code
        self.signal = signal


home(
    "supervisor",
    SubagentError,
    ConfigurationError,
    DuplicateProvider,
    InvalidRequest,
    NoProvider,
    ProviderUnusable,
    StartAborted,
    StartFailed,
    TeardownFailed,
    UnsupportedCapability,
    TurnInProgress,
    ConversationEnd,
    ConversationOver,
)
