"""The diagnostic bound as a property over every code path that can produce a diagnostic.

The paths: a result (every ``SubagentResult`` a provider or the seam builds, through the
model's validator), a start failure (``StartFailed``: the startup line, joined with the
rollback's line when the rollback failed too, bounded in ``ProviderRun[Any].start``), a
teardown failure (``TeardownFailed``, bounded where the run builds it), and the CLI's
``--json`` document (its ``diagnostic`` and ``teardown`` fields carry those texts).

No real path can produce more than 4096 bytes: every line is built from closed facts
(:func:`test_no_real_diagnostic_can_reach_the_bound` proves the worst case over the whole
vocabulary stays far below it), and the fault and stateful tests check every real
diagnostic they see with ``assert_bounded``.  So the over-the-bound half of the property
is tested on the seam bound those paths share, ``bound_diagnostic``, and on each path by
driving it with an oversized text through the one hook that takes free text
(``StepFailed.extra_line``) or through the seam type itself.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from machines.acp import ACP_TOOL_KINDS, ACP_VOCABULARY, AcpEvent, AcpLifecycle
from machines.claude_code import CLAUDE_CODE_VOCABULARY
from machines.codex import CODEX_PERMISSION_REQUESTS, CODEX_VOCABULARY
from machines.dsh_sdk import DSH_SDK_VOCABULARY
from supervisor import RunOutcome, StopReason, SubagentRequest, SubagentResult, supervise
from supervisor._diagnostic import (
    MAX_DIAGNOSTIC_BYTES,
    TRUNCATION_SUFFIX,
    FailureFacts,
    bound_diagnostic,
    join_lines,
)
from supervisor._errors import StartAborted
from supervisor.cli._config_file import Entry
from supervisor.cli._run import _Interruption, _Plan, _report
from supervisor.process import ManagedProcess
from supervisor.provider import ProviderRun, RunContext, StepFailed
from supervisor.providers.acp import Config
from tests.conftest import PYTHON
from tests.support.reliability import assert_bounded
from tests.support.unkillable import UnkillableTree, phantom_process

pytestmark = pytest.mark.anyio

SUFFIX = TRUNCATION_SUFFIX.encode("utf-8")
utf8 = st.characters(codec="utf-8")


def size(text: str) -> int:
    return len(text.encode("utf-8"))


# Texts around and far over the bound: a run of one 1-4 byte character between random text.
near_the_bound = st.tuples(
    st.text(utf8, max_size=40),
    st.sampled_from(["a", "é", "€", "𝄞"]),
    st.integers(0, 4200),
    st.text(utf8, max_size=40),
).map(lambda p: p[0] + p[1] * p[2] + p[3])
texts = st.one_of(st.text(utf8, max_size=300), near_the_bound, st.text(utf8, min_size=4000, max_size=5000))


def check_bound(text: str, bounded: str | None) -> None:
    """``bounded`` is ``text`` under the seam's bound: the property, exactly."""
    if not text:
        assert bounded is None  # an empty diagnostic becomes None
        return
    assert bounded is not None
    data = bounded.encode("utf-8")  # valid UTF-8 (a str with no lone surrogate)
    assert len(data) <= MAX_DIAGNOSTIC_BYTES
    if size(text) <= MAX_DIAGNOSTIC_BYTES:
        assert bounded == text  # fits: untouched, no suffix added
        return
    assert bounded.endswith(TRUNCATION_SUFFIX)
    kept = bounded[: -len(TRUNCATION_SUFFIX)]
    assert text.startswith(kept)  # a prefix, never a split code point (kept is a str)
    assert size(kept) + len(SUFFIX) <= MAX_DIAGNOSTIC_BYTES
    following = text[len(kept)]
    assert size(kept) + size(following) + len(SUFFIX) > MAX_DIAGNOSTIC_BYTES  # the longest such prefix
    assert bound_diagnostic(bounded) == bounded  # a fixed point


# -- the seam bound -------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(text=texts)
def test_the_seam_bound(text: str) -> None:
    check_bound(text, bound_diagnostic(text))


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(text=texts, stop=st.sampled_from([*StopReason, "something-else"]), output=st.text(utf8, max_size=20))
def test_every_result_is_bounded(text: str, stop: str, output: str) -> None:
    """The result path: the model bounds whatever a provider (or the seam) puts in it."""
    result = SubagentResult(output=output, stop_reason=stop, diagnostic=text)
    check_bound(text, result.diagnostic)
    assert SubagentResult.model_validate(result.model_dump()) == result


def test_the_bound_at_its_edges() -> None:
    fits = "x" * MAX_DIAGNOSTIC_BYTES
    assert bound_diagnostic(fits) == fits
    over = fits + "y"
    assert bound_diagnostic(over) == "x" * (MAX_DIAGNOSTIC_BYTES - len(SUFFIX)) + TRUNCATION_SUFFIX
    wide = "€" * 2000  # 6000 bytes, 3 per code point: the cut falls back to a code point boundary
    bounded = bound_diagnostic(wide)
    assert bounded is not None
    assert bounded == "€" * ((MAX_DIAGNOSTIC_BYTES - len(SUFFIX)) // 3) + TRUNCATION_SUFFIX
    assert bound_diagnostic("") is None


def test_no_real_diagnostic_can_reach_the_bound() -> None:
    """The worst case over the closed vocabulary: every field at its longest, every line present."""
    signals = [s.name for s in signal.Signals] + ["SIG" + "9" * 10]
    longest_failure = max(
        len(
            f"Subagent failure (provider: {v.label}; stage: {max(v.stages, key=len)}; "
            f"category: {max(v.categories, key=len)}; HTTP status: 65535; stop reason: max_turn_requests; "
            f"exit code: 255; signal: {max(signals, key=len)})"
        )
        for v in (ACP_VOCABULARY, DSH_SDK_VOCABULARY, CLAUDE_CODE_VOCABULARY, CODEX_VOCABULARY)
    )
    longest_permission = max(
        len(
            f"ACP unattended decision (policy: reject; request: {max(ACP_TOOL_KINDS, key=len)}; decision: allowed)"
        ),
        len(
            "Claude Code unattended decision (mode: bypassPermissions; request: MCP elicitation; "
            "decision: cancelled)"
        ),
        len(
            "Codex unattended decision (mode: dangerously-bypass-approvals-and-sandbox; "
            f"request: {max(CODEX_PERMISSION_REQUESTS, key=len)}; decision: empty response)"
        ),
    )
    worst = longest_failure + 1 + longest_permission + 1 + longest_failure  # failure, decision, teardown
    assert worst < MAX_DIAGNOSTIC_BYTES // 4


# -- start and teardown failures -------------------------------------------------------------


class Oversized(ProviderRun[Config]):
    """A run whose hooks hand the seam oversized free text: what no real provider does.

    It spawns a real child (``cat``: it exits at stdin EOF) so the ladder runs for real.
    """

    vocabulary = ACP_VOCABULARY
    lifecycle = AcpLifecycle

    def __init__(self, context: RunContext[Config], *, text: str, fail_start: bool) -> None:
        super().__init__(context)
        self.text = text
        self.fail_start = fail_start

    async def handshake(self) -> None:
        self.process = await ManagedProcess.spawn(
            self.spawn_spec(["cat"], self.resolve_cwd()), self.task_group
        )
        if self.fail_start:
            raise StepFailed(self.failure("protocol"), extra_line=self.text)
        self.fact(AcpEvent.INITIALIZE_ANSWERED)
        self.fact(AcpEvent.SESSION_CREATED)

    async def drive(self) -> SubagentResult:
        self.fact(AcpEvent.STOP_REASON_RECEIVED)
        return SubagentResult(output="partial", stop_reason=StopReason.ERROR, diagnostic=self.text)

    def partial_output(self) -> str:
        return "partial"


@pytest.fixture(scope="module")
def phantom() -> Iterator[int]:
    with phantom_process() as pid:
        yield pid


async def drive(run: ProviderRun[Any]) -> RunOutcome:
    with anyio.fail_after(30):
        return await supervise(run)


CONFIG = Config(command="cat", dispose_eof_grace_ms=50, dispose_grace_ms=50)
LINE = "Subagent failure (provider: ACP; stage: initialize; category: protocol)"


def teardown_line(run: ProviderRun[Any]) -> str:
    """The teardown failure's line: ``cat`` exits 0 on EOF within the 50 ms grace, or, on a
    loaded machine, is ended by SIGTERM first (either way the line carries what happened)."""
    facts = run.exit_facts
    assert facts is not None
    return FailureFacts(
        ACP_VOCABULARY, "teardown", "unknown", exit_code=facts.exit_code, signal=facts.signal
    ).line()


@pytest.mark.parametrize("leak", [False, True], ids=["quiescent", "rollback-or-dispose-fails"])
@pytest.mark.parametrize("fail_start", [False, True], ids=["published", "start-fails"])
@settings(max_examples=3, deadline=None, derandomize=True, database=None)
@given(text=st.one_of(near_the_bound, st.text(utf8, max_size=50)))
async def test_every_path_of_a_run_applies_the_bound(
    text: str, fail_start: bool, leak: bool, phantom: int, workdir: Path
) -> None:
    """Results, StartFailed (with and without a failed rollback), TeardownFailed and the CLI JSON."""
    tree = UnkillableTree(phantom) if leak else None
    context = RunContext("oversized", CONFIG, SubagentRequest(task="t", parent_cwd=workdir), tree=tree)
    run = Oversized(context, text=text, fail_start=fail_start)
    with mock.patch("supervisor.process._managed.DEFAULT_KILL_WAIT_SECONDS", 0.1):
        outcome = await drive(run)
    result, teardown_error = outcome.result, outcome.teardown_error
    start_error = outcome.start_error
    assert not isinstance(start_error, StartAborted)
    if fail_start:
        assert start_error is not None
        expected = join_lines(LINE, text, teardown_line(run) if leak else None)
        assert expected is not None
        check_bound(expected, start_error.diagnostic)
        assert str(start_error) == start_error.diagnostic
        assert start_error.quiescent is not leak
    else:
        assert result is not None
        check_bound(text, result.diagnostic)
        if leak:
            assert teardown_error is not None
            assert teardown_error.diagnostic == str(teardown_error) == teardown_line(run)
            assert_bounded(teardown_error.diagnostic)
        else:
            assert teardown_error is None
    document = cli_json(outcome)
    assert_bounded(document["diagnostic"])
    if teardown_error is not None:
        assert_bounded(document["teardown"])


def cli_json(outcome: RunOutcome) -> dict[str, Any]:
    """The CLI's ``--json`` document for this outcome, as ``subagents run --json`` prints it."""
    entry = Entry(kind="acp", name="oversized", keys={}, where="test", base_dir=Path.cwd())
    plan = _Plan(entry=entry, overrides={}, task="t", parent_cwd=Path.cwd())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _report(plan, argparse.Namespace(json=True), outcome, _Interruption())
    document: dict[str, Any] = json.loads(out.getvalue())
    text = out.getvalue()
    assert text.encode("utf-8").decode("utf-8") == text
    return document


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bound")


def test_a_real_cli_failure_prints_a_bounded_closed_diagnostic(tmp_path: Path) -> None:
    """The CLI end to end on a failing run: the diagnostic in its JSON is a bounded fixed line."""
    proc = subprocess.run(
        [PYTHON, "-m", "supervisor.cli", "run", "--json", "--env", "SUBAGENT_EXAMPLE_EXIT=7", "hi"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    document = json.loads(proc.stdout)
    assert document["diagnostic"] == (
        "Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 7)"
    )
    assert_bounded(document["diagnostic"])
    assert (
        FailureFacts(ACP_VOCABULARY, "process", "process-exit", exit_code=7).line() == document["diagnostic"]
    )
