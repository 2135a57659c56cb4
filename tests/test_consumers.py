"""Foreground text and one-shot job settlement."""

from __future__ import annotations

import pytest

from supervisor import (
    JobOutcome,
    JobStatus,
    StartAborted,
    StartFailed,
    SubagentResult,
    TeardownFailed,
    foreground_text,
    job_outcome,
    settle_job,
)
from supervisor.fronts._consumers import start_failure_outcome

pytestmark = pytest.mark.anyio

LINE = "Subagent failure (provider: ACP; stage: prompt; category: transport)"


@pytest.mark.parametrize(
    ("stop_reason", "headline"),
    [
        ("aborted", "subagent run was cancelled"),
        ("error", "subagent run failed"),
        ("max-tokens", "subagent run hit its token limit before finishing"),
        ("refusal", "subagent declined the task"),
        ("exploded", "subagent run ended abnormally (exploded)"),
    ],
)
def test_headlines(stop_reason: str, headline: str) -> None:
    assert foreground_text(SubagentResult(stop_reason=stop_reason)) == headline


def test_completed_is_just_the_output() -> None:
    assert foreground_text(SubagentResult(output="the answer", stop_reason="completed")) == "the answer"


def test_diagnostic_comes_before_partial_output() -> None:
    result = SubagentResult(output="half", stop_reason="error", diagnostic=LINE)
    assert (
        foreground_text(result)
        == f"subagent run failed\nDiagnostic: {LINE}\nPartial output before the run ended:\nhalf"
    )


def test_job_outcomes() -> None:
    assert job_outcome(SubagentResult(output="ok", stop_reason="completed")) == JobOutcome(
        JobStatus.COMPLETED, output="ok"
    )
    assert job_outcome(SubagentResult(output="x", stop_reason="aborted")) == JobOutcome(JobStatus.KILLED)
    assert job_outcome(
        SubagentResult(stop_reason="aborted", diagnostic="ACP unattended decision (...)")
    ) == JobOutcome(JobStatus.FAILED, detail="aborted; diagnostic: ACP unattended decision (...)")
    assert (
        job_outcome(SubagentResult(stop_reason="error", diagnostic=LINE)).detail
        == f"error; diagnostic: {LINE}"
    )
    assert job_outcome(SubagentResult(stop_reason="refusal")).detail == "refusal"
    assert job_outcome(SubagentResult(stop_reason="weird")).status == JobStatus.FAILED


def test_start_failures() -> None:
    assert start_failure_outcome(StartAborted("aborted")) == JobOutcome(JobStatus.KILLED)
    assert start_failure_outcome(StartFailed(LINE)) == JobOutcome(JobStatus.FAILED, detail=LINE)
    # an abort whose rollback failed surfaces as StartFailed: failed, not killed
    assert start_failure_outcome(StartFailed(LINE, quiescent=False)).status == JobStatus.FAILED


class _Run:
    def __init__(self, result: SubagentResult, dispose_error: Exception | None = None) -> None:
        self._result = result
        self._dispose_error = dispose_error
        self.disposed = False

    async def result(self) -> SubagentResult:
        return self._result

    async def dispose(self) -> None:
        self.disposed = True
        if self._dispose_error is not None:
            raise self._dispose_error


async def test_settle_job_disposes_before_settling() -> None:
    run = _Run(SubagentResult(output="done", stop_reason="completed"))

    async def start() -> _Run:
        return run

    assert await settle_job(start) == JobOutcome(JobStatus.COMPLETED, output="done")  # type: ignore[arg-type]
    assert run.disposed


async def test_dispose_failure_turns_the_job_failed() -> None:
    teardown = "Subagent failure (provider: ACP; stage: teardown; category: unknown)"

    async def start() -> _Run:
        return _Run(SubagentResult(stop_reason="error", diagnostic=LINE), TeardownFailed(teardown))

    outcome = await settle_job(start)  # type: ignore[arg-type]
    assert outcome == JobOutcome(
        JobStatus.FAILED, detail=f"error; diagnostic: {LINE}; dispose failed: {teardown}"
    )

    async def start_ok() -> _Run:
        return _Run(SubagentResult(output="x", stop_reason="completed"), TeardownFailed(teardown))

    assert (await settle_job(start_ok)).detail == f"dispose failed: {teardown}"  # type: ignore[arg-type]


async def test_aborted_start_is_killed() -> None:
    async def start() -> _Run:
        raise StartAborted("subagent request was aborted before the ACP child started")

    assert await settle_job(start) == JobOutcome(JobStatus.KILLED)  # type: ignore[arg-type]
