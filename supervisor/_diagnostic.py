"""Safe diagnostic text: fixed lines built from closed facts, and the 4096-byte bound.

Nothing here accepts free text: every field is checked against the closed vocabulary
of its provider, so a provider cannot put an exception message, stderr or a payload
into a line even by mistake.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

MAX_DIAGNOSTIC_BYTES = 4096
TRUNCATION_SUFFIX = "\n[diagnostic truncated]"


class ProviderLabel(enum.StrEnum):
    """How a provider is named in a diagnostic line."""

    ACP = "ACP"
    DSH_SDK = "DSH SDK"
    CLAUDE_CODE = "Claude Code"
    CODEX = "Codex"


@dataclass(frozen=True)
class _Vocabulary:
    stages: frozenset[str]
    categories: frozenset[str]
    exit_categories: frozenset[str]
    teardown_stages: frozenset[str]


VOCABULARY: dict[ProviderLabel, _Vocabulary] = {
    ProviderLabel.ACP: _Vocabulary(
        stages=frozenset({"initialize", "new-session", "prompt", "process", "teardown"}),
        categories=frozenset(
            {
                "configuration",
                "protocol",
                "transport",
                "process-start",
                "process-exit",
                "remote-limit",
                "unknown",
            }
        ),
        exit_categories=frozenset({"process-exit"}),
        teardown_stages=frozenset({"teardown"}),
    ),
    ProviderLabel.DSH_SDK: _Vocabulary(
        stages=frozenset({"initialize", "session-run", "shutdown"}),
        categories=frozenset(
            {
                "configuration",
                "protocol",
                "transport",
                "child-error",
                "child-disposed",
                "child-unknown",
                "missing-terminal",
                "unknown",
            }
        ),
        exit_categories=frozenset(),
        teardown_stages=frozenset({"shutdown"}),
    ),
    ProviderLabel.CLAUDE_CODE: _Vocabulary(
        stages=frozenset({"query-start", "query-run", "process", "teardown"}),
        categories=frozenset({"limit", "product-error", "invalid-result", "process", "unknown"}),
        exit_categories=frozenset({"process"}),
        teardown_stages=frozenset({"teardown"}),
    ),
    ProviderLabel.CODEX: _Vocabulary(
        stages=frozenset({"initialize", "thread-start", "turn-start", "turn", "process", "teardown"}),
        categories=frozenset(
            {
                "limit",
                "access-policy",
                "service",
                "transport",
                "product-error",
                "invalid-result",
                "process",
                "unknown",
            }
        ),
        exit_categories=frozenset({"process"}),
        teardown_stages=frozenset({"teardown"}),
    ),
}

ACP_STOP_REASONS = frozenset({"max_turn_requests", "unknown"})


@dataclass(frozen=True)
class FailureFacts:
    """The closed facts of one failure; :meth:`line` renders the fixed failure line."""

    provider: ProviderLabel
    stage: str
    category: str
    http_status: int | None = None
    stop_reason: str | None = None
    exit_code: int | None = None
    signal: str | None = None

    def __post_init__(self) -> None:
        vocab = VOCABULARY[self.provider]
        if self.stage not in vocab.stages:
            raise ValueError(f"{self.provider}: unknown stage {self.stage!r}")
        if self.category not in vocab.categories:
            raise ValueError(f"{self.provider}: unknown category {self.category!r}")
        if self.stop_reason is not None and (
            self.provider is not ProviderLabel.ACP or self.stop_reason not in ACP_STOP_REASONS
        ):
            raise ValueError("stop reason is an ACP fact limited to max_turn_requests|unknown")
        if self.http_status is not None and (
            self.provider is not ProviderLabel.CODEX
            or not isinstance(self.http_status, int)
            or not 0 <= self.http_status <= 65535
        ):
            raise ValueError("HTTP status is a Codex fact, an integer 0..65535")
        has_exit = self.exit_code is not None or self.signal is not None
        if has_exit and not (self.category in vocab.exit_categories or self.stage in vocab.teardown_stages):
            raise ValueError("exit facts belong on process-exit/process or teardown lines only")
        if self.signal is not None and not (self.signal.startswith("SIG") and self.signal[3:].isalnum()):
            raise ValueError("signal must be a signal name")

    def line(self) -> str:
        fields = [f"provider: {self.provider}", f"stage: {self.stage}", f"category: {self.category}"]
        if self.http_status is not None:
            fields.append(f"HTTP status: {self.http_status}")
        if self.stop_reason is not None:
            fields.append(f"stop reason: {self.stop_reason}")
        if self.exit_code is not None:
            fields.append(f"exit code: {self.exit_code}")
        if self.signal is not None:
            fields.append(f"signal: {self.signal}")
        return f"Subagent failure ({'; '.join(fields)})"


def _closed(value: str, allowed: frozenset[str], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}")
    return value


ACP_TOOL_KINDS = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"}
)


def acp_permission_line(*, policy: str, kind: str | None, decision: str) -> str:
    """``kind`` outside the closed ACP tool kinds (or missing) becomes ``unknown``."""
    _closed(policy, frozenset({"allow", "reject"}), "ACP policy")
    _closed(decision, frozenset({"allowed", "denied"}), "ACP decision")
    request = kind if kind in ACP_TOOL_KINDS else "unknown"
    return f"ACP unattended decision (policy: {policy}; request: {request}; decision: {decision})"


def claude_code_permission_line(*, mode: str, request: str, decision: str) -> str:
    _closed(mode, frozenset({"dontAsk", "acceptEdits", "plan", "bypassPermissions", "default"}), "mode")
    _closed(request, frozenset({"tool permission", "MCP elicitation", "user dialog"}), "request")
    _closed(decision, frozenset({"denied", "declined", "cancelled"}), "decision")
    return f"Claude Code unattended decision (mode: {mode}; request: {request}; decision: {decision})"


CODEX_PERMISSION_REQUESTS = frozenset(
    {
        "command approval",
        "file approval",
        "permission grant",
        "user input",
        "MCP elicitation",
        "command execution",
        "file change",
        "sandbox execution",
    }
)


def codex_permission_line(*, mode: str, request: str, decision: str) -> str:
    _closed(
        mode,
        frozenset({"never", "approve-for-me", "dangerously-bypass-approvals-and-sandbox"}),
        "mode",
    )
    _closed(request, CODEX_PERMISSION_REQUESTS, "request")
    _closed(decision, frozenset({"cancelled", "declined", "denied", "empty response", "failed"}), "decision")
    return f"Codex unattended decision (mode: {mode}; request: {request}; decision: {decision})"


def join_lines(*lines: str | None) -> str | None:
    """Join the present lines with ``\\n``; None when there are none."""
    present = [line for line in lines if line]
    return "\n".join(present) if present else None


def bound_diagnostic(text: str | None) -> str | None:
    """Apply the seam's bound: None for empty, else at most 4096 UTF-8 bytes.

    Over the bound, keep the longest prefix that fits with the suffix
    ``\\n[diagnostic truncated]``, never splitting a code point.
    """
    if not text:
        return None
    data = text.encode("utf-8")
    if len(data) <= MAX_DIAGNOSTIC_BYTES:
        return text
    cut = MAX_DIAGNOSTIC_BYTES - len(TRUNCATION_SUFFIX.encode("utf-8"))
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut].decode("utf-8") + TRUNCATION_SUFFIX
