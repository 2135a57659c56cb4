"""What a parent does with a result: foreground text, or a one-shot background job outcome."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from supervisor._errors import StartAborted, SubagentError
from supervisor._handle import Run
from supervisor._public import home
from supervisor._seam import StopReason, SubagentResult

_HEADLINES = {
    StopReason.ABORTED: "subagent run was cancelled",
    StopReason.ERROR: "subagent run failed",
    StopReason.MAX_TOKENS: "subagent run hit its token limit before finishing",
    StopReason.REFUSAL: "subagent declined the task",
}


def headline(stop_reason: str) -> str:
    """The first line shown for a non-completed result."""
    try:
        return _HEADLINES[StopReason(stop_reason)]
    except (ValueError, KeyError):
        return f"subagent run ended abnormally ({stop_reason})"


def foreground_text(result: SubagentResult) -> str:
    """The text a parent model sees: the output, or headline, diagnostic, partial output."""
    if result.stop_reason == StopReason.COMPLETED:
        return result.output
    text = headline(result.stop_reason)
    if result.diagnostic:
        text += f"\nDiagnostic: {result.diagnostic}"
    if result.output:
        text += f"\nPartial output before the run ended:\n{result.output}"
    return text


class JobStatus(enum.StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    KILLED = "killed"


@dataclass(frozen=True)
class JobOutcome:
    status: JobStatus
    output: str = ""
    detail: str | None = None


def job_outcome(result: SubagentResult) -> JobOutcome:
    """Settle a one-shot background job from a run's result (before dispose is counted)."""
    if result.stop_reason == StopReason.COMPLETED:
        return JobOutcome(JobStatus.COMPLETED, output=result.output)
    if result.stop_reason == StopReason.ABORTED and not result.diagnostic:
        return JobOutcome(JobStatus.KILLED)
    detail = result.stop_reason
    if result.diagnostic:
        detail += f"; diagnostic: {result.diagnostic}"
    return JobOutcome(JobStatus.FAILED, detail=detail)


def start_failure_outcome(error: BaseException) -> JobOutcome:
    """A start that was rejected: ``killed`` only for a clean explicit abort."""
    if isinstance(error, StartAborted):
        return JobOutcome(JobStatus.KILLED)
    detail = str(error) if isinstance(error, SubagentError) else "start failed"
    return JobOutcome(JobStatus.FAILED, detail=detail)


async def settle_job(start: Callable[[], Awaitable[Run]]) -> JobOutcome:
    """Run a one-shot job: start, await the result, always dispose, then settle.

    ``start`` is e.g. ``lambda: registry.start(name, request, task_group=tg, abort=signal)``.
    A dispose failure turns any outcome into ``failed`` with ``; dispose failed: ...``.
    """
    try:
        run = await start()
    except SubagentError as error:
        return start_failure_outcome(error)
    try:
        outcome = job_outcome(await run.result())
    finally:
        dispose_error: SubagentError | None = None
        try:
            await run.dispose()
        except SubagentError as error:
            dispose_error = error
    if dispose_error is None:
        return outcome
    suffix = f"dispose failed: {dispose_error}"
    detail = f"{outcome.detail}; {suffix}" if outcome.detail else suffix
    return JobOutcome(JobStatus.FAILED, output=outcome.output, detail=detail)


home("supervisor", JobOutcome, JobStatus, foreground_text, job_outcome, settle_job)
