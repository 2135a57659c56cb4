"""The public surface is pinned: a name added or removed is a deliberate change."""

from __future__ import annotations

import supervisor

EXPORTS = {
    # the seam and the caller's side
    "AbortSignal",
    "Capabilities",
    "NO_CAPABILITIES",
    "StopReason",
    "SubagentRequest",
    "SubagentResult",
    "Registry",
    "Provider",
    "Run",
    "ExitFacts",
    "StderrMode",
    "AuditTrail",
    "Transition",
    "TransitionSink",
    "MAX_DIAGNOSTIC_BYTES",
    "bound_diagnostic",
    "foreground_text",
    "job_outcome",
    "settle_job",
    "JobOutcome",
    "JobStatus",
    # errors
    "SubagentError",
    "ConfigurationError",
    "DuplicateProvider",
    "InvalidRequest",
    "NoProvider",
    "StartAborted",
    "StartFailed",
    "TeardownFailed",
    "UnsupportedCapability",
    # kinds, found through the entry-point group
    "PROVIDERS_GROUP",
    "InstalledKind",
    "installed_kinds",
    "create_provider",
    # the provider-author API
    "ProviderKind",
    "ProviderRun",
    "RunContext",
    "ProviderConfig",
    "CommandConfig",
    "StepFailed",
    "FailureFacts",
    "Vocabulary",
    "ClosedField",
    "IntegerField",
    "DecisionField",
    "Lifecycle",
    "CommonEvent",
    "build_lifecycle",
    "common_rows",
}


def test_exports_are_pinned() -> None:
    assert set(supervisor.__all__) == EXPORTS
    assert len(supervisor.__all__) == len(EXPORTS)
    for name in EXPORTS:
        assert getattr(supervisor, name) is not None


def test_the_run_protocol_is_what_callers_get() -> None:
    members = {n for n in dir(supervisor.Run) if not n.startswith("_")}
    # provider helpers stay off the caller's surface
    assert not members & {"fact", "failure", "spawn_child", "task_group", "machine", "config"}
    assert {
        "id",
        "stage",
        "state",
        "audit",
        "exit_facts",
        "quiescent",
        "result",
        "cancel",
        "dispose",
    } <= members
