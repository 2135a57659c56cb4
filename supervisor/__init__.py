"""subagent-supervisor: run AI coding agents as supervised child processes.

The parent gets one small, safe, auditable result: the child's answer, a stop reason
and, for failures only, a diagnostic built from closed facts.  Runs on anyio's
**asyncio** backend (python-statemachine's async engine and the ACP SDK need it).
"""

from __future__ import annotations

from supervisor._abort import AbortSignal as AbortSignal
from supervisor._batch import BatchError as BatchError
from supervisor._batch import BatchItem as BatchItem
from supervisor._batch import BatchRecord as BatchRecord
from supervisor._batch import batch as batch
from supervisor._consumers import JobOutcome as JobOutcome
from supervisor._consumers import JobStatus as JobStatus
from supervisor._consumers import foreground_text as foreground_text
from supervisor._consumers import job_outcome as job_outcome
from supervisor._consumers import settle_job as settle_job
from supervisor._diagnostic import MAX_DIAGNOSTIC_BYTES as MAX_DIAGNOSTIC_BYTES
from supervisor._diagnostic import bound_diagnostic as bound_diagnostic
from supervisor._errors import ConfigurationError as ConfigurationError
from supervisor._errors import DuplicateProvider as DuplicateProvider
from supervisor._errors import InvalidRequest as InvalidRequest
from supervisor._errors import NoProvider as NoProvider
from supervisor._errors import StartAborted as StartAborted
from supervisor._errors import StartFailed as StartFailed
from supervisor._errors import SubagentError as SubagentError
from supervisor._errors import TeardownFailed as TeardownFailed
from supervisor._errors import UnsupportedCapability as UnsupportedCapability
from supervisor._registry import Provider as Provider
from supervisor._registry import Registry as Registry
from supervisor._run import ProviderRun as Run
from supervisor._seam import Capabilities as Capabilities
from supervisor._seam import StopReason as StopReason
from supervisor._seam import SubagentRequest as SubagentRequest
from supervisor._seam import SubagentResult as SubagentResult
from supervisor.process import ExitFacts as ExitFacts
from supervisor.process import StderrMode as StderrMode

__all__ = (
    "MAX_DIAGNOSTIC_BYTES",
    "AbortSignal",
    "BatchError",
    "BatchItem",
    "BatchRecord",
    "Capabilities",
    "ConfigurationError",
    "DuplicateProvider",
    "ExitFacts",
    "InvalidRequest",
    "JobOutcome",
    "JobStatus",
    "NoProvider",
    "Provider",
    "Registry",
    "Run",
    "StartAborted",
    "StartFailed",
    "StderrMode",
    "StopReason",
    "SubagentError",
    "SubagentRequest",
    "SubagentResult",
    "TeardownFailed",
    "UnsupportedCapability",
    "batch",
    "bound_diagnostic",
    "foreground_text",
    "job_outcome",
    "settle_job",
)
