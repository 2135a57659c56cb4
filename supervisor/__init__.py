"""subagent-supervisor: run AI coding agents as supervised child processes.

The parent gets one small, safe, auditable result: the child's answer, a stop reason
and, for failures only, a diagnostic built from closed facts.  Runs need anyio's
**asyncio** backend: the process layer subclasses asyncio's
``SubprocessStreamProtocol`` and builds its ``Process`` by hand, and the ACP SDK
speaks over asyncio streams.

This is the callers' surface: the seam types, :class:`Registry` and the :class:`Run`
protocol, :func:`supervise` (start -> result -> dispose, as every front-end does it),
the consumers, batches, the errors and the installed kinds.  Provider authors (a kind
of their own, in a distribution of their own) use :mod:`supervisor.provider`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names are; at run time each is imported on first use (``_ORIGINS``)
    from machines import AuditTrail as AuditTrail
    from machines import Transition as Transition
    from machines import TransitionSink as TransitionSink
    from supervisor._abort import AbortSignal as AbortSignal
    from supervisor._diagnostic import MAX_DIAGNOSTIC_BYTES as MAX_DIAGNOSTIC_BYTES
    from supervisor._errors import ConfigurationError as ConfigurationError
    from supervisor._errors import ConversationEnd as ConversationEnd
    from supervisor._errors import ConversationOver as ConversationOver
    from supervisor._errors import DuplicateProvider as DuplicateProvider
    from supervisor._errors import InvalidRequest as InvalidRequest
    from supervisor._errors import NoProvider as NoProvider
    from supervisor._errors import ProviderUnusable as ProviderUnusable
    from supervisor._errors import StartAborted as StartAborted
    from supervisor._errors import StartFailed as StartFailed
    from supervisor._errors import SubagentError as SubagentError
    from supervisor._errors import TeardownFailed as TeardownFailed
    from supervisor._errors import TurnInProgress as TurnInProgress
    from supervisor._errors import UnsupportedCapability as UnsupportedCapability
    from supervisor._handle import Provider as Provider
    from supervisor._handle import Run as Run
    from supervisor._kinds import PROVIDERS_GROUP as PROVIDERS_GROUP
    from supervisor._kinds import InstalledKind as InstalledKind
    from supervisor._kinds import create_provider as create_provider
    from supervisor._kinds import installed_kinds as installed_kinds
    from supervisor._registry import Registry as Registry
    from supervisor._seam import NO_CAPABILITIES as NO_CAPABILITIES
    from supervisor._seam import Capabilities as Capabilities
    from supervisor._seam import Progress as Progress
    from supervisor._seam import ProgressCounts as ProgressCounts
    from supervisor._seam import Resources as Resources
    from supervisor._seam import SessionPlan as SessionPlan
    from supervisor._seam import StopReason as StopReason
    from supervisor._seam import SubagentRequest as SubagentRequest
    from supervisor._seam import SubagentResult as SubagentResult
    from supervisor._seam import Usage as Usage
    from supervisor._seam import progress_line as progress_line
    from supervisor.batching._jobs import BatchError as BatchError
    from supervisor.batching._jobs import BatchItem as BatchItem
    from supervisor.batching._jobs import BatchRecord as BatchRecord
    from supervisor.batching._jobs import BatchTurn as BatchTurn
    from supervisor.batching._local import batch as batch
    from supervisor.fronts._consumers import JobOutcome as JobOutcome
    from supervisor.fronts._consumers import JobStatus as JobStatus
    from supervisor.fronts._consumers import foreground_text as foreground_text
    from supervisor.fronts._consumers import job_outcome as job_outcome
    from supervisor.fronts._consumers import settle_job as settle_job
    from supervisor.fronts._sequence import RunOutcome as RunOutcome
    from supervisor.fronts._sequence import supervise as supervise
    from supervisor.journal import Journal as Journal
    from supervisor.process import ExitFacts as ExitFacts
    from supervisor.process import StderrMode as StderrMode
    from supervisor.process._host_limits import set_host_ceiling as set_host_ceiling
    from supervisor.process._tree import own_orphans as own_orphans
    from supervisor.workspace import Workspace as Workspace

# Where each public name is defined.  ``import supervisor`` imports none of them: the CLI's
# ``--version`` must not pay for pydantic, python-statemachine and asyncio, and a name's
# module (and only its dependencies) is imported when the name is first used.
_ORIGINS: dict[str, str] = {
    "AuditTrail": "machines",
    "Transition": "machines",
    "TransitionSink": "machines",
    "AbortSignal": "supervisor._abort",
    "JobOutcome": "supervisor.fronts._consumers",
    "JobStatus": "supervisor.fronts._consumers",
    "foreground_text": "supervisor.fronts._consumers",
    "job_outcome": "supervisor.fronts._consumers",
    "settle_job": "supervisor.fronts._consumers",
    "MAX_DIAGNOSTIC_BYTES": "supervisor._diagnostic",
    "ConfigurationError": "supervisor._errors",
    "DuplicateProvider": "supervisor._errors",
    "InvalidRequest": "supervisor._errors",
    "NoProvider": "supervisor._errors",
    "ProviderUnusable": "supervisor._errors",
    "StartAborted": "supervisor._errors",
    "StartFailed": "supervisor._errors",
    "SubagentError": "supervisor._errors",
    "TeardownFailed": "supervisor._errors",
    "UnsupportedCapability": "supervisor._errors",
    "TurnInProgress": "supervisor._errors",
    "ConversationOver": "supervisor._errors",
    "ConversationEnd": "supervisor._errors",
    "Run": "supervisor._handle",
    "set_host_ceiling": "supervisor.process._host_limits",
    "own_orphans": "supervisor.process._tree",
    "PROVIDERS_GROUP": "supervisor._kinds",
    "InstalledKind": "supervisor._kinds",
    "create_provider": "supervisor._kinds",
    "installed_kinds": "supervisor._kinds",
    "Provider": "supervisor._handle",
    "Registry": "supervisor._registry",
    "NO_CAPABILITIES": "supervisor._seam",
    "Capabilities": "supervisor._seam",
    "Resources": "supervisor._seam",
    "Workspace": "supervisor.workspace",
    "SessionPlan": "supervisor._seam",
    "Journal": "supervisor.journal",
    "StopReason": "supervisor._seam",
    "SubagentRequest": "supervisor._seam",
    "SubagentResult": "supervisor._seam",
    "Usage": "supervisor._seam",
    "Progress": "supervisor._seam",
    "ProgressCounts": "supervisor._seam",
    "progress_line": "supervisor._seam",
    "RunOutcome": "supervisor.fronts._sequence",
    "supervise": "supervisor.fronts._sequence",
    "BatchError": "supervisor.batching._jobs",
    "BatchItem": "supervisor.batching._jobs",
    "BatchRecord": "supervisor.batching._jobs",
    "BatchTurn": "supervisor.batching._jobs",
    "batch": "supervisor.batching._local",
    "ExitFacts": "supervisor.process",
    "StderrMode": "supervisor.process",
}

__all__ = (
    "MAX_DIAGNOSTIC_BYTES",
    "NO_CAPABILITIES",
    "PROVIDERS_GROUP",
    "AbortSignal",
    "AuditTrail",
    "BatchError",
    "BatchItem",
    "BatchRecord",
    "BatchTurn",
    "Capabilities",
    "ConfigurationError",
    "ConversationEnd",
    "ConversationOver",
    "DuplicateProvider",
    "ExitFacts",
    "InstalledKind",
    "InvalidRequest",
    "JobOutcome",
    "JobStatus",
    "Journal",
    "NoProvider",
    "Progress",
    "ProgressCounts",
    "Provider",
    "ProviderUnusable",
    "Registry",
    "Resources",
    "Run",
    "RunOutcome",
    "SessionPlan",
    "StartAborted",
    "StartFailed",
    "StderrMode",
    "StopReason",
    "SubagentError",
    "SubagentRequest",
    "SubagentResult",
    "TeardownFailed",
    "Transition",
    "TransitionSink",
    "TurnInProgress",
    "UnsupportedCapability",
    "Usage",
    "Workspace",
    "batch",
    "create_provider",
    "foreground_text",
    "installed_kinds",
    "job_outcome",
    "own_orphans",
    "progress_line",
    "set_host_ceiling",
    "settle_job",
    "supervise",
)

_MOVED_TO_PROVIDER = frozenset(
    {
        "ClosedField",
        "CommandConfig",
        "CommonEvent",
        "DecisionField",
        "FailureFacts",
        "IntegerField",
        "Lifecycle",
        "ProviderConfig",
        "ProviderKind",
        "ProviderRun",
        "RunContext",
        "StepFailed",
        "Vocabulary",
        "bound_diagnostic",
        "build_lifecycle",
        "common_rows",
    }
)
"""Authors' names that 0.2 exported from here: still importable, with a DeprecationWarning."""


def __getattr__(name: str) -> Any:
    """A public name, imported on first use; a provider written for 0.2 (``from supervisor
    import ProviderRun``) keeps working and is told where the name lives now."""
    origin = _ORIGINS.get(name)
    if origin is not None:
        value = getattr(importlib.import_module(origin), name)
        globals()[name] = value  # the next lookup is an ordinary attribute
        return value
    if name in _MOVED_TO_PROVIDER:
        from supervisor import provider
        from supervisor.run._deprecated import moved_to_provider

        moved_to_provider(name)
        return getattr(provider, name)
    raise AttributeError(f"module 'supervisor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
