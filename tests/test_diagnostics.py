"""The diagnostic line builder and the 4096-byte bound, pinned word for word."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from machines.acp import ACP_VOCABULARY
from machines.claude_code import CLAUDE_CODE_VOCABULARY
from machines.codex import CODEX_VOCABULARY
from machines.dsh_sdk import DSH_SDK_VOCABULARY
from supervisor import MAX_DIAGNOSTIC_BYTES, StartFailed, SubagentResult
from supervisor._diagnostic import TRUNCATION_SUFFIX, FailureFacts
from supervisor.provider import bound_diagnostic


def test_fields_in_fixed_order() -> None:
    line = FailureFacts(CODEX_VOCABULARY, "process", "process", exit_code=None, signal="SIGKILL").line()
    assert line == "Subagent failure (provider: Codex; stage: process; category: process; signal: SIGKILL)"
    line = FailureFacts(CODEX_VOCABULARY, "turn", "transport", http_status=429).line()
    assert line == "Subagent failure (provider: Codex; stage: turn; category: transport; HTTP status: 429)"
    line = FailureFacts(ACP_VOCABULARY, "process", "process-exit", exit_code=3).line()
    assert line == "Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 3)"
    line = FailureFacts(DSH_SDK_VOCABULARY, "session-run", "missing-terminal").line()
    assert line == "Subagent failure (provider: DSH SDK; stage: session-run; category: missing-terminal)"
    line = FailureFacts(CLAUDE_CODE_VOCABULARY, "teardown", "unknown", exit_code=0).line()
    assert (
        line == "Subagent failure (provider: Claude Code; stage: teardown; category: unknown; exit code: 0)"
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"vocabulary": ACP_VOCABULARY, "stage": "turn", "category": "unknown"},
        {"vocabulary": ACP_VOCABULARY, "stage": "prompt", "category": "limit"},
        {"vocabulary": CODEX_VOCABULARY, "stage": "turn", "category": "unknown", "stop_reason": "unknown"},
        {"vocabulary": ACP_VOCABULARY, "stage": "prompt", "category": "unknown", "stop_reason": "end_turn"},
        {"vocabulary": ACP_VOCABULARY, "stage": "prompt", "category": "unknown", "http_status": 500},
        {"vocabulary": CODEX_VOCABULARY, "stage": "turn", "category": "service", "http_status": 70000},
        {"vocabulary": ACP_VOCABULARY, "stage": "prompt", "category": "transport", "exit_code": 1},
        {"vocabulary": DSH_SDK_VOCABULARY, "stage": "session-run", "category": "transport", "exit_code": 1},
        {"vocabulary": CODEX_VOCABULARY, "stage": "process", "category": "process", "signal": "kill -9; rm"},
    ],
)
def test_facts_outside_the_closed_vocabulary_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"unknown|stop reason|HTTP status|exit facts|signal"):
        FailureFacts(**kwargs)  # type: ignore[arg-type]


def test_permission_lines() -> None:
    assert ACP_VOCABULARY.permission_line(policy="allow", request="execute", decision="allowed") == (
        "ACP unattended decision (policy: allow; request: execute; decision: allowed)"
    )
    assert ACP_VOCABULARY.permission_line(policy="reject", request="rm -rf /", decision="denied") == (
        "ACP unattended decision (policy: reject; request: unknown; decision: denied)"
    )
    assert ACP_VOCABULARY.permission_line(policy="reject", request=None, decision="denied").endswith(
        "request: unknown; decision: denied)"
    )
    assert CLAUDE_CODE_VOCABULARY.permission_line(
        mode="dontAsk", request="tool permission", decision="denied"
    ) == ("Claude Code unattended decision (mode: dontAsk; request: tool permission; decision: denied)")
    assert CODEX_VOCABULARY.permission_line(
        mode="never", request="command approval", decision="declined"
    ) == ("Codex unattended decision (mode: never; request: command approval; decision: declined)")
    with pytest.raises(ValueError, match="unknown request"):
        CODEX_VOCABULARY.permission_line(mode="never", request="anything the child said", decision="declined")


def test_exactly_4096_bytes_pass_unchanged() -> None:
    text = "x" * MAX_DIAGNOSTIC_BYTES
    assert bound_diagnostic(text) == text


def test_multibyte_text_is_truncated_on_a_code_point() -> None:
    bounded = bound_diagnostic("权限" * 4096)
    assert bounded is not None
    assert bounded.endswith(TRUNCATION_SUFFIX)
    assert len(bounded.encode()) <= MAX_DIAGNOSTIC_BYTES
    assert set(bounded.removesuffix(TRUNCATION_SUFFIX)) == {"权", "限"}


def test_empty_diagnostic_becomes_none() -> None:
    assert bound_diagnostic("") is None
    assert SubagentResult(stop_reason="error", diagnostic="").diagnostic is None


@given(st.text(min_size=1))
def test_bound_is_a_prefix_with_a_suffix_exactly_when_needed(text: str) -> None:
    bounded = bound_diagnostic(text)
    assert bounded is not None
    data = bounded.encode("utf-8")
    assert len(data) <= MAX_DIAGNOSTIC_BYTES
    if len(text.encode("utf-8")) <= MAX_DIAGNOSTIC_BYTES:
        assert bounded == text
    else:
        assert bounded.endswith(TRUNCATION_SUFFIX)
        assert text.startswith(bounded.removesuffix(TRUNCATION_SUFFIX))


@given(st.sampled_from("aé权😀\n"), st.integers(1000, 5000), st.text(max_size=20))
def test_every_result_is_bounded(char: str, repeat: int, tail: str) -> None:
    text = char * repeat + tail
    result = SubagentResult(stop_reason="error", diagnostic=text)
    assert result.diagnostic is not None
    assert len(result.diagnostic.encode()) <= MAX_DIAGNOSTIC_BYTES


def test_start_failed_carries_its_diagnostic() -> None:
    error = StartFailed("Subagent failure (provider: ACP; stage: initialize; category: transport)")
    assert error.code == "START_FAILED"
    assert error.diagnostic == str(error)


def test_each_kind_names_the_category_of_an_overrun_start() -> None:
    categories = {
        vocabulary.label: vocabulary.start_timeout_category
        for vocabulary in (ACP_VOCABULARY, DSH_SDK_VOCABULARY, CLAUDE_CODE_VOCABULARY, CODEX_VOCABULARY)
    }
    assert categories == {
        "ACP": "transport",
        "DSH SDK": "transport",
        "Claude Code": "unknown",
        "Codex": "unknown",
    }


def test_an_overrun_start_category_outside_the_vocabulary_is_refused() -> None:
    from machines import Vocabulary

    with pytest.raises(ValueError, match=r"names outside the vocabulary: \['timeout'\]"):
        Vocabulary(
            label="X",
            stages=("go", "teardown"),
            categories=frozenset({"unknown"}),
            start_timeout_category="timeout",
        )
    with pytest.raises(ValueError, match=r"lacks the categories every run may report: \['unknown'\]"):
        Vocabulary(label="X", stages=("go", "teardown"), categories=frozenset({"transport"}))


def test_a_vocabulary_without_the_base_categories_is_refused_when_built() -> None:
    """The base run reports ``unknown`` for every kind (a task that raised, a failed teardown):
    a vocabulary without it would break at that moment, so it is refused at once."""
    from machines import Vocabulary

    with pytest.raises(
        ValueError, match=r"^X: the vocabulary lacks the categories every run may report: \['unknown'\]$"
    ):
        Vocabulary(
            label="X",
            stages=("go", "teardown"),
            categories=frozenset({"transport"}),
            start_timeout_category="transport",
        )
