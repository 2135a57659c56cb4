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
    "supervise",
    "RunOutcome",
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
    # batches
    "batch",
    "BatchItem",
    "BatchRecord",
    "BatchError",
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


def test_kinds_are_found_through_the_entry_point_group() -> None:
    import pytest

    kinds = supervisor.installed_kinds()
    assert list(kinds) == ["acp", "dsh-sdk", "claude-code", "codex"]
    assert [k.extra for k in kinds.values()] == [None, None, "claude-code", "codex"]
    assert all(k.entry_point.group == supervisor.PROVIDERS_GROUP for k in kinds.values())
    acp = kinds["acp"].load()
    provider = supervisor.create_provider("acp", acp.config(command="agent"), "mine")
    assert provider.name == "mine"
    assert acp.vocabulary.label == "ACP"
    with pytest.raises(supervisor.NoProvider, match='no subagent provider kind "rocket" is installed'):
        supervisor.create_provider("rocket", acp.config(command="agent"))


def test_listing_kinds_imports_no_provider_module() -> None:
    import subprocess
    import sys

    code = (
        "import sys, supervisor; supervisor.installed_kinds(); "
        "print(sorted(m for m in sys.modules if m.startswith('supervisor.providers.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
