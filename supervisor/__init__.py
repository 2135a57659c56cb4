"""subagent-supervisor: run AI coding agents as supervised child processes.

The parent gets one small, safe, auditable result: the child's answer, a stop reason
and, for failures only, a diagnostic built from closed facts.  Runs need anyio's
**asyncio** backend: the process layer subclasses asyncio's
``SubprocessStreamProtocol`` and builds its ``Process`` by hand, and the ACP SDK
speaks over asyncio streams.

Callers use the seam types, :class:`Registry` and the :class:`Run` protocol.  Provider
authors (a kind of their own, in a distribution of their own) use the second group:
:class:`ProviderRun` with its :class:`RunContext`, :class:`ProviderKind`, the config
base models, :class:`Vocabulary` with its fields, :class:`StepFailed` and
:class:`FailureFacts`, and register the kind under the entry-point group
``subagent_supervisor.providers``.
"""

from __future__ import annotations

from machines import AuditTrail as AuditTrail
from machines import ClosedField as ClosedField
from machines import CommonEvent as CommonEvent
from machines import DecisionField as DecisionField
from machines import IntegerField as IntegerField
from machines import Lifecycle as Lifecycle
from machines import Transition as Transition
from machines import TransitionSink as TransitionSink
from machines import Vocabulary as Vocabulary
from machines import build_lifecycle as build_lifecycle
from machines import common_rows as common_rows
from supervisor._abort import AbortSignal as AbortSignal
from supervisor._config import CommandConfig as CommandConfig
from supervisor._config import ProviderConfig as ProviderConfig
from supervisor._consumers import JobOutcome as JobOutcome
from supervisor._consumers import JobStatus as JobStatus
from supervisor._consumers import foreground_text as foreground_text
from supervisor._consumers import job_outcome as job_outcome
from supervisor._consumers import settle_job as settle_job
from supervisor._diagnostic import MAX_DIAGNOSTIC_BYTES as MAX_DIAGNOSTIC_BYTES
from supervisor._diagnostic import FailureFacts as FailureFacts
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
from supervisor._handle import Run as Run
from supervisor._kinds import PROVIDERS_GROUP as PROVIDERS_GROUP
from supervisor._kinds import InstalledKind as InstalledKind
from supervisor._kinds import ProviderKind as ProviderKind
from supervisor._kinds import create_provider as create_provider
from supervisor._kinds import installed_kinds as installed_kinds
from supervisor._registry import Provider as Provider
from supervisor._registry import Registry as Registry
from supervisor._run import ProviderRun as ProviderRun
from supervisor._run import RunContext as RunContext
from supervisor._run import StepFailed as StepFailed
from supervisor._seam import NO_CAPABILITIES as NO_CAPABILITIES
from supervisor._seam import Capabilities as Capabilities
from supervisor._seam import StopReason as StopReason
from supervisor._seam import SubagentRequest as SubagentRequest
from supervisor._seam import SubagentResult as SubagentResult
from supervisor._sequence import RunOutcome as RunOutcome
from supervisor._sequence import supervise as supervise
from supervisor.batching._local import BatchError as BatchError
from supervisor.batching._local import BatchItem as BatchItem
from supervisor.batching._local import BatchRecord as BatchRecord
from supervisor.batching._local import batch as batch
from supervisor.process import ExitFacts as ExitFacts
from supervisor.process import StderrMode as StderrMode

__all__ = (
    "MAX_DIAGNOSTIC_BYTES",
    "NO_CAPABILITIES",
    "PROVIDERS_GROUP",
    "AbortSignal",
    "AuditTrail",
    "BatchError",
    "BatchItem",
    "BatchRecord",
    "Capabilities",
    "ClosedField",
    "CommandConfig",
    "CommonEvent",
    "ConfigurationError",
    "DecisionField",
    "DuplicateProvider",
    "ExitFacts",
    "FailureFacts",
    "InstalledKind",
    "IntegerField",
    "InvalidRequest",
    "JobOutcome",
    "JobStatus",
    "Lifecycle",
    "NoProvider",
    "Provider",
    "ProviderConfig",
    "ProviderKind",
    "ProviderRun",
    "Registry",
    "Run",
    "RunContext",
    "RunOutcome",
    "StartAborted",
    "StartFailed",
    "StderrMode",
    "StepFailed",
    "StopReason",
    "SubagentError",
    "SubagentRequest",
    "SubagentResult",
    "TeardownFailed",
    "Transition",
    "TransitionSink",
    "UnsupportedCapability",
    "Vocabulary",
    "batch",
    "bound_diagnostic",
    "build_lifecycle",
    "common_rows",
    "create_provider",
    "foreground_text",
    "installed_kinds",
    "job_outcome",
    "settle_job",
    "supervise",
)
