"""The public surface is pinned: a name added or removed is a deliberate change."""

from __future__ import annotations

import importlib
import inspect
import types
from pathlib import Path

import pytest

import supervisor
import supervisor.provider

EXPORTS = {
    # the seam and the caller's side
    "AbortSignal",
    "Capabilities",
    "NO_CAPABILITIES",
    "StopReason",
    "SubagentRequest",
    "SubagentResult",
    "Usage",
    "Registry",
    "Provider",
    "Run",
    "supervise",
    "RunOutcome",
    "Resources",
    "SessionPlan",
    "Journal",
    "ExitFacts",
    "StderrMode",
    "AuditTrail",
    "Transition",
    "TransitionSink",
    "MAX_DIAGNOSTIC_BYTES",
    "Workspace",
    "foreground_text",
    "job_outcome",
    "settle_job",
    "set_host_ceiling",
    "own_orphans",
    "JobOutcome",
    "JobStatus",
    # progress
    "Progress",
    "ProgressCounts",
    "progress_line",
    # batches
    "batch",
    "BatchItem",
    "BatchRecord",
    "BatchError",
    "BatchTurn",
    # errors
    "SubagentError",
    "ConfigurationError",
    "DuplicateProvider",
    "InvalidRequest",
    "NoProvider",
    "ProviderUnusable",
    "StartAborted",
    "StartFailed",
    "TeardownFailed",
    "UnsupportedCapability",
    "TurnInProgress",
    "ConversationOver",
    "ConversationEnd",
    # kinds, found through the entry-point group
    "PROVIDERS_GROUP",
    "InstalledKind",
    "installed_kinds",
    "create_provider",
}

AUTHORS = {
    # a kind and its parts
    "PROVIDERS_GROUP",
    "ProviderKind",
    "Readiness",
    "Provider",
    "ProviderConfig",
    "CommandConfig",
    "StderrMode",
    "ConfigurationError",
    # the chart and the vocabulary
    "build_lifecycle",
    "common_rows",
    "Lifecycle",
    "CommonEvent",
    "SETTLED",
    "Transition",
    "TransitionSink",
    "Vocabulary",
    "ClosedField",
    "IntegerField",
    "DecisionField",
    # the run
    "ProviderRun",
    "RunContext",
    "SessionPlan",
    "NotResumable",
    "config_digest",
    "Run",
    "StepFailed",
    "FailureFacts",
    "bound_diagnostic",
    "join_lines",
    "MAX_DIAGNOSTIC_BYTES",
    "Capabilities",
    "NO_CAPABILITIES",
    "StopReason",
    "SubagentRequest",
    "SubagentResult",
    "Usage",
    # progress, fed with closed values
    "TOOL_KINDS",
    "TOOL_CALL_STATUSES",
    "PLAN_STATUSES",
    "PERMISSION_DECISIONS",
    # the child and its text
    "ManagedProcess",
    "SpawnSpec",
    "SpawnFailed",
    "ExitFacts",
    "TeardownReport",
    "LineReader",
    "FrameTooLarge",
    "child_environment",
    "CappedText",
    "cap_text",
    "utf8_prefix",
    "TRUNCATED_MARK",
    # framing and JSON-RPC: the tools the built-in clients use
    "decode_frame",
    "parse_frame",
    "FrameTooDeep",
    "MAX_FRAME_DEPTH",
    "encode_frame",
    "FrameWriter",
    "Pending",
    "PendingRequests",
    "RequestId",
    "is_request_id",
    "CloseOnce",
    "InboundRequests",
    "DEFAULT_MAX_INFLIGHT_REQUESTS",
    # what the built-in kinds use besides: the host log, an SDK's logging, config keys, waits
    "raw_failure",
    "route_sdk_logging",
    "sdk_logging_routed",
    "first_of",
    "resolve_executable",
    "check_timer_ms",
    "RUN_TAG_VARIABLE",
    "DEFAULT_MAX_FRAME_BYTES",
    "Containment",
}

# Names 0.2 exported from ``supervisor`` that are an author's: importable with a warning.
MOVED = {
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
    "bound_diagnostic",
}


def test_exports_are_pinned() -> None:
    assert set(supervisor.__all__) == EXPORTS
    assert len(supervisor.__all__) == len(EXPORTS)
    for name in EXPORTS:
        assert getattr(supervisor, name) is not None


def test_the_authors_module_is_pinned() -> None:
    assert set(supervisor.provider.__all__) == AUTHORS
    assert len(supervisor.provider.__all__) == len(AUTHORS)
    for name in AUTHORS:
        assert getattr(supervisor.provider, name) is not None


@pytest.mark.parametrize("surface", ["supervisor", "supervisor.provider", "supervisor.telemetry", "machines"])
def test_every_public_name_reports_its_public_module(surface: str) -> None:
    """``__module__`` names a public module (no ``_`` part) that really exports the name."""
    module = importlib.import_module(surface)
    for name in module.__all__:
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants and type aliases have no module of their own
        home = obj.__module__
        assert not any(part.startswith("_") for part in home.split(".")), (surface, name, home)
        assert getattr(importlib.import_module(home), obj.__name__) is obj, (surface, name, home)


def test_a_provider_written_for_0_2_keeps_working_and_is_told_where_to_look() -> None:
    for name in MOVED:
        with pytest.warns(DeprecationWarning, match=rf"^supervisor\.{name} is a provider author's name: "):
            moved = getattr(supervisor, name)
        assert moved is getattr(supervisor.provider, name)
    with pytest.raises(AttributeError, match="has no attribute 'Nonesuch'"):
        supervisor.Nonesuch  # noqa: B018


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
        "resources",
        "result",
        "cancel",
        "dispose",
        "conversation",
        "turn",
        "send",
        "progress",
        "watch",
    } <= members


def test_conversation_errors_join_the_one_hierarchy() -> None:
    assert issubclass(supervisor.TurnInProgress, supervisor.SubagentError)
    assert issubclass(supervisor.ConversationOver, supervisor.SubagentError)
    assert supervisor.TurnInProgress.code == "TURN_IN_PROGRESS"
    assert supervisor.ConversationOver.code == "CONVERSATION_OVER"
    assert str(supervisor.TurnInProgress()) == "a turn is already running"
    over = supervisor.ConversationOver("ACP", 2, supervisor.ConversationEnd.CHILD_EXITED, exit_code=3)
    assert (
        str(over)
        == "subagent conversation is over (provider: ACP; turn: 2; reason: child exited; exit code: 3)"
    )
    assert (over.turn, over.reason, over.exit_code, over.signal) == (2, "child exited", 3, None)


def test_kinds_are_found_through_the_entry_point_group() -> None:
    kinds = supervisor.installed_kinds()
    builtin = ["acp", "dsh-sdk", "claude-code", "codex"]
    assert list(kinds)[:4] == builtin  # this distribution's kinds come first; others may follow
    assert [kinds[name].extra for name in builtin] == [None, None, "claude-code", "codex"]
    assert {kinds[name].distribution for name in builtin} == {"subagent-supervisor"}
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


def test_the_imported_supervisor_is_this_package() -> None:
    """supervisord's package is imported as ``supervisor`` too; this one is told apart by its
    entry-point group, and ``doctor`` says which one it found."""
    from supervisor.cli._doctor import package_line

    assert supervisor.PROVIDERS_GROUP == "subagent_supervisor.providers"
    assert not (Path(supervisor.__file__ or "").parent / "supervisord.py").exists()
    assert package_line().startswith("package: subagent-supervisor ")


def test_doctor_says_when_supervisord_shares_the_name(tmp_path: Path) -> None:
    from supervisor.cli._doctor import package_line

    folder = tmp_path / "supervisor"
    folder.mkdir()
    theirs = types.ModuleType("supervisor")
    theirs.__file__ = str(folder / "__init__.py")
    expected = (
        f"package: supervisord shares the import name `supervisor` here ({folder}); "
        "it and subagent-supervisor cannot share one environment"
    )
    assert package_line(theirs) == expected  # supervisord's __init__ won
    (folder / "supervisord.py").write_text("")
    mixed = types.ModuleType("supervisor")
    mixed.__file__ = theirs.__file__
    mixed.PROVIDERS_GROUP = supervisor.PROVIDERS_GROUP  # type: ignore[attr-defined]
    assert package_line(mixed) == expected  # ours won, but their files are mixed in


def test_authors_frame_a_childs_text_as_the_built_in_kinds_do() -> None:
    """The framing tools are public and the same objects the built-in clients use."""
    from supervisor import provider, wire

    for name in ("parse_frame", "decode_frame", "FrameTooDeep", "MAX_FRAME_DEPTH", "PendingRequests"):
        assert getattr(provider, name) is getattr(wire, name)
    assert provider.parse_frame(b'{"text": "caf\xe9"}') == {"text": "caf\ufffd"}
    assert provider.decode_frame(b"caf\xe9") == "caf\ufffd"
    deep = b"[" * (provider.MAX_FRAME_DEPTH + 1) + b"]" * (provider.MAX_FRAME_DEPTH + 1)
    with pytest.raises(provider.FrameTooDeep):
        provider.parse_frame(deep)
    with pytest.raises(provider.FrameTooDeep):
        provider.parse_frame(b"[" * 100_000)  # too deep to parse at all
    assert provider.parse_frame(b"[" * provider.MAX_FRAME_DEPTH + b"]" * provider.MAX_FRAME_DEPTH) is not None
    assert provider.encode_frame({"id": 1}) == b'{"id":1}\n'


@pytest.mark.parametrize(
    "reported",
    [
        ["input_tokens", 3],
        "input_tokens=3",
        {"input_tokens": "12", "output_tokens": -1, "cost_usd": float("nan")},
        {"input_tokens": 10**400, "cached_input_tokens": True, "output_tokens": {"n": 1}},
    ],
)
def test_usage_from_reported_drops_what_is_not_a_number_and_never_raises(reported: object) -> None:
    assert supervisor.provider.Usage.from_reported(reported) is None  # type: ignore[arg-type]


def test_usage_from_reported_keeps_the_valid_numbers() -> None:
    usage = supervisor.provider.Usage.from_reported(
        {"input_tokens": 5, "output_tokens": "x", "cost_usd": 0.5}
    )
    assert usage == supervisor.Usage(input_tokens=5, cost_usd=0.5)
