"""One ``invoke_agent`` span per run, over real children, exported to the in-memory exporter."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from unittest import mock

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from supervisor import Registry, StartFailed, StopReason, SubagentRequest, telemetry
from supervisor.providers import acp
from supervisor.providers.acp import example_agent_config
from tests.conftest import CHILDREN, PYTHON
from tests.reliability.test_secrets import run_to_end
from tests.support.reliability import acp_child, fake_claude
from tests.telemetry.conftest import Traced

pytestmark = pytest.mark.anyio

ACP_ARGV = [PYTHON, "-I", str(CHILDREN / "acp_child.py")]


def request(task: str = "say hello") -> SubagentRequest:
    return SubagentRequest(task=task, parent_cwd=Path.cwd())


def only(spans: list[ReadableSpan]) -> ReadableSpan:
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    assert context.trace_flags.sampled
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


async def test_a_run_is_one_client_span_with_closed_attributes_and_every_transition(traced: Traced) -> None:
    run = acp.Provider(example_agent_config()).create_run(request())
    result, error = await run_to_end(run)
    assert error is None
    assert result is not None
    assert result.stop_reason == StopReason.COMPLETED

    span = only(traced.spans())
    assert span.name == "invoke_agent acp"
    assert span.kind == SpanKind.CLIENT
    assert span.parent is None
    expected: dict[str, object] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "acp",
        "gen_ai.agent.name": "acp",
        "gen_ai.agent.id": run.id,
        "gen_ai.conversation.id": run.id,
        "subagent.kind": "acp",
        "subagent.turn": 1,
        "subagent.stop_reason": "completed",
        "subagent.quiescent": True,
        "process.exit.code": 0,
    }
    containment = getattr(run, "containment", None)
    if containment is not None:
        expected["subagent.containment"] = str(getattr(containment, "value", containment))
    if run.resources is not None:  # cgroup containment: what the tree used
        used = run.resources.model_dump(exclude_none=True)
        expected.update({f"subagent.resources.{name}": value for name, value in used.items()})
    assert dict(span.attributes or {}) == expected
    assert span.status.status_code == StatusCode.UNSET
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    assert events == [
        (t.event, {"source": t.source, "target": t.target, "machine": t.machine}) for t in run.audit.entries
    ]
    assert [name for name, _ in events] == [
        "initialize_answered",
        "session_created",
        "stop_reason_received",
        "dispose_requested",
        "stdin_closed",
        "tree_exited",
        "tree_gone",
    ]
    assert {attributes["machine"] for _, attributes in events} == {"lifecycle", "ladder"}


async def test_a_failing_child_sets_error_type_to_the_failure_category(traced: Traced) -> None:
    run = acp.Provider(acp_child({"EXIT_AT": "prompt", "EXIT_CODE": "3"})).create_run(request())
    result, error = await run_to_end(run)
    assert error is None
    assert result is not None
    assert (
        result.diagnostic
        == "Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 3)"
    )

    span = only(traced.spans())
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "process-exit"
    assert attributes["subagent.stop_reason"] == "error"
    assert attributes["process.exit.code"] == 3
    assert "subagent.exit.signal" not in attributes
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description is None
    assert "child_exited" in [e.name for e in span.events]


async def test_a_child_killed_by_a_signal_names_the_signal(traced: Traced) -> None:
    run = acp.Provider(acp_child({"SIGNAL_AT": "prompt"})).create_run(request())
    result, _ = await run_to_end(run)
    assert result is not None
    attributes = dict(only(traced.spans()).attributes or {})
    assert attributes["subagent.exit.signal"] == "SIGKILL"
    assert "process.exit.code" not in attributes
    assert attributes["error.type"] == "process-exit"


async def test_a_failed_start_ends_the_span_with_the_start_failure_category(traced: Traced) -> None:
    run = acp.Provider(acp_child({"ERROR_AT": "initialize"})).create_run(request())
    result, error = await run_to_end(run)
    assert result is None
    assert isinstance(error, StartFailed)
    assert str(error) == "Subagent failure (provider: ACP; stage: initialize; category: transport)"

    span = only(traced.spans())
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "transport"
    assert "subagent.stop_reason" not in attributes
    assert attributes["subagent.quiescent"] is True
    assert span.status.status_code == StatusCode.ERROR
    assert [e.name for e in span.events][:1] == ["start_failed"]


async def test_a_local_cancellation_is_not_an_error(traced: Traced) -> None:
    registry = Registry()
    registry.register(acp.Provider(acp_child({"HANG": "1"})))
    async with registry.run("acp", request()) as run:
        run.cancel()
        result = await run.result()
    assert result.stop_reason == StopReason.ABORTED
    span = only(traced.spans())
    assert dict(span.attributes or {})["subagent.stop_reason"] == "aborted"
    assert "error.type" not in dict(span.attributes or {})
    assert span.status.status_code == StatusCode.UNSET


async def test_the_child_gets_the_traceparent_of_its_run_span(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An inherited context must not reach the child beside ours.
    monkeypatch.setenv("TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    monkeypatch.setenv("TRACESTATE", "inherited=1")
    config = acp_child({"ECHO_ENV": "TRACEPARENT,TRACESTATE", "TEXT": ""})
    run = acp.Provider(config).create_run(request())
    result, _ = await run_to_end(run)
    assert result is not None
    span = only(traced.spans())
    assert result.output == f"TRACEPARENT={traceparent_of(span)}\nTRACESTATE unset\n"


async def test_the_claude_code_cli_gets_the_traceparent_of_its_run_span(
    traced: Traced, tmp_path: Path
) -> None:
    pytest.importorskip("claude_agent_sdk")
    log = tmp_path / "cli.jsonl"
    frame = {"type": "result", "subtype": "success", "duration_ms": 1, "duration_api_ms": 1}
    script = {
        "steps": [{"emit": {**frame, "is_error": False, "num_turns": 1, "result": "ok", "session_id": "s"}}]
    }
    provider = fake_claude(tmp_path / "claude", script, env={"FAKE_CLAUDE_LOG": str(log)})
    result, _ = await run_to_end(provider.create_run(request()))
    assert result is not None
    assert result.stop_reason == StopReason.COMPLETED
    span = only(traced.spans())
    assert span.name == "invoke_agent claude-code"
    assert dict(span.attributes or {})["gen_ai.provider.name"] == "anthropic"
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    (seen,) = [r["value"] for r in records if r["kind"] == "env"]
    assert seen["TRACEPARENT"] == traceparent_of(span)


async def test_an_explicit_traceparent_in_the_config_wins(traced: Traced) -> None:
    given = "00-11111111111111111111111111111111-2222222222222222-01"
    config = acp_child({"ECHO_ENV": "TRACEPARENT", "TEXT": ""}, env={"TRACEPARENT": given})
    result, _ = await run_to_end(acp.Provider(config).create_run(request()))
    assert result is not None
    assert result.output == f"TRACEPARENT={given}\n"


async def test_runs_nest_under_a_parent_span_and_an_embedders_active_span(traced: Traced) -> None:
    registry = Registry()
    registry.register(acp.Provider(example_agent_config()))
    with telemetry.span("subagents batch"):
        for _ in range(2):
            async with registry.run("acp", request()) as run:
                await run.result()
    tracer = traced.provider.get_tracer("embedder")
    with tracer.start_as_current_span("embedder request"):
        async with registry.run("acp", request()) as run:
            await run.result()

    spans = {s.name: s for s in traced.spans() if not s.name.startswith("invoke_agent")}
    runs = [s for s in traced.spans() if s.name == "invoke_agent acp"]
    assert len(runs) == 3
    batch, embedder = spans["subagents batch"], spans["embedder request"]
    assert batch.kind == SpanKind.INTERNAL
    for run_span, parent in zip(runs, [batch, batch, embedder], strict=True):
        assert run_span.parent is not None
        assert parent.context is not None
        assert run_span.parent.span_id == parent.context.span_id
        assert run_span.context is not None
        assert run_span.context.trace_id == parent.context.trace_id


async def test_a_carried_context_continues_the_trace_elsewhere(traced: Traced) -> None:
    with telemetry.span("subagents batch"):
        carrier = telemetry.inject()
    assert set(carrier) == {"traceparent"}
    with telemetry.attached(carrier):  # e.g. on a Ray worker
        run = acp.Provider(example_agent_config()).create_run(request())
        await run_to_end(run)
    batch, run_span = sorted(traced.spans(), key=lambda s: s.name != "subagents batch")
    assert run_span.parent is not None
    assert batch.context is not None
    assert run_span.parent.span_id == batch.context.span_id


def test_a_failing_parent_span_records_the_class_never_the_message(traced: Traced) -> None:
    with pytest.raises(ValueError, match="sk-hidden"), telemetry.span("subagents batch"):
        raise ValueError("sk-hidden")
    span = only(traced.spans())
    assert dict(span.attributes or {}) == {"error.type": "ValueError"}
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description is None
    assert span.events == ()


async def test_no_span_and_no_traceparent_when_telemetry_is_off(
    traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    telemetry.use(None)
    monkeypatch.delenv("TRACEPARENT", raising=False)
    config = acp_child({"ECHO_ENV": "TRACEPARENT", "TEXT": ""})
    result, _ = await run_to_end(acp.Provider(config).create_run(request()))
    assert result is not None
    assert result.output == "TRACEPARENT unset\n"
    assert traced.spans() == []
    with telemetry.span("subagents batch"):
        assert telemetry.inject() == {}
    assert traced.spans() == []


# -- what is imported when telemetry is off -----------------------------------------------------

LOADED = "sorted(m for m in sys.modules if m.split('.')[0] in ('opentelemetry', 'logfire'))"

CLI_PROBE = f"""
import json, sys
from supervisor.cli._main import main
status = main(sys.argv[1:])
print(json.dumps({{"status": status, "loaded": {LOADED}}}), file=sys.stderr)
"""

EMBED_PROBE = f"""
import json, sys
from pathlib import Path
import anyio
from supervisor import Registry, SubagentRequest
from supervisor.providers.acp import Provider, example_agent_config

async def main():
    registry = Registry()
    registry.register(Provider(example_agent_config()))
    async with registry.run("acp", SubagentRequest(task="hi", parent_cwd=Path.cwd())) as run:
        return (await run.result()).stop_reason

reason = anyio.run(main)
print(json.dumps({{"reason": reason, "loaded": {LOADED}}}))
"""


def quiet_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "TRACEPARENT"}


def test_a_cli_run_without_otel_never_imports_opentelemetry(tmp_path: Path) -> None:
    # A scripted ACP child, so the ACP SDK (which would import OpenTelemetry) is loaded too.
    argv = ["run", "--json", "hello", "--", *ACP_ARGV]
    proc = subprocess.run(
        [PYTHON, "-c", CLI_PROBE, *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=quiet_environment(),
    )
    assert json.loads(proc.stdout)["stop_reason"] == "completed"
    probe = json.loads(proc.stderr.strip().splitlines()[-1])
    assert probe == {"status": 0, "loaded": []}


def test_an_embedded_run_without_telemetry_never_imports_opentelemetry(tmp_path: Path) -> None:
    proc = subprocess.run(
        [PYTHON, "-c", EMBED_PROBE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=quiet_environment(),
    )
    assert json.loads(proc.stdout) == {"reason": "completed", "loaded": []}, proc.stderr


def test_otel_without_the_extra_is_a_usage_error(tmp_path: Path) -> None:
    probe = "import sys\nsys.modules['opentelemetry'] = None\n" + CLI_PROBE
    proc = subprocess.run(
        [PYTHON, "-c", probe, "run", "--otel", "hello"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=quiet_environment(),
    )
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "subagents: --otel needs the otel extra: pip install 'subagent-supervisor[otel]'"
    assert json.loads(lines[-1])["status"] == 2
    assert proc.stdout == ""


def test_the_standard_environment_alone_turns_telemetry_on_and_none_turns_it_off() -> None:
    try:
        with mock.patch.dict(os.environ, {"OTEL_TRACES_EXPORTER": "none"}):
            assert telemetry.configure_from_cli(True) is False
        assert telemetry.configure_from_cli(False, environ={}) is False
        assert not telemetry.enabled()
        environ = {"OTEL_TRACES_EXPORTER": "console"}
        assert telemetry.configure_from_cli(False, environ=environ) is True
        assert telemetry.enabled()
    finally:
        telemetry.shutdown()
    assert not telemetry.enabled()


async def test_each_turn_of_a_conversation_is_a_span_sharing_the_run_id_as_conversation_id(
    traced: Traced,
) -> None:
    registry = Registry()
    registry.register(acp.Provider(example_agent_config()))
    caller = traced.provider.get_tracer("caller")
    async with registry.run("acp", request("what is 2+2?"), conversation=True) as run:
        await run.result()
        with caller.start_as_current_span("second call"):
            second = await run.send("and 3+3?\n@usage")
        await run.send("@recall")
    assert second.usage is not None
    spans = [s for s in traced.spans() if s.name == "invoke_agent acp"]
    assert [dict(s.attributes or {})["subagent.turn"] for s in spans] == [1, 2, 3]
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes["gen_ai.conversation.id"] == run.id
        assert attributes["gen_ai.agent.id"] == run.id
        assert attributes["gen_ai.provider.name"] == "acp"
        assert attributes["subagent.stop_reason"] == "completed"
        assert span.kind == SpanKind.CLIENT
        assert span.status.status_code == StatusCode.UNSET
    first, middle, last = (dict(s.attributes or {}) for s in spans)
    # Usage as the turn reported it; the process facts on the span that saw the teardown.
    assert middle["gen_ai.usage.input_tokens"] == second.usage.input_tokens == 2
    assert middle["gen_ai.usage.output_tokens"] == second.usage.output_tokens == 5
    assert "gen_ai.usage.input_tokens" not in first
    assert "subagent.quiescent" not in first
    assert "subagent.quiescent" not in middle
    assert last["subagent.quiescent"] is True
    # Each span holds the transitions of its own turn, in order.
    for number, span in enumerate(spans, start=1):
        assert [e.name for e in span.events] == [t.event for t in run.audit.entries if t.turn == number]
    assert [e.name for e in spans[1].events][:1] == ["turn_sent"]
    assert "tree_gone" in [e.name for e in spans[2].events]
    # A turn's span ends when its turn went idle, not at the next send.
    for span in spans[:2]:
        (idle,) = [e for e in span.events if e.name == "turn_ended"]
        assert span.end_time == idle.timestamp
    # A turn nests under the span its caller had open at the send.
    (call,) = [s for s in traced.spans() if s.name == "second call"]
    assert call.context is not None
    assert spans[1].parent is not None
    assert spans[1].parent.span_id == call.context.span_id
    assert spans[0].parent is None
    assert spans[2].parent is None


async def test_a_failed_turn_is_an_error_span_and_the_conversation_goes_on(traced: Traced) -> None:
    registry = Registry()
    registry.register(acp.Provider(example_agent_config()))
    async with registry.run("acp", request("hello"), conversation=True) as run:
        await run.result()
        failed = await run.send("x\n@fail")
        assert failed.stop_reason == StopReason.ERROR
        assert (await run.send("again")).stop_reason == StopReason.COMPLETED
    spans = [dict(s.attributes or {}) for s in traced.spans()]
    assert [(a["subagent.turn"], a["subagent.stop_reason"], a.get("error.type")) for a in spans] == [
        (1, "completed", None),
        (2, "error", "transport"),
        (3, "completed", None),
    ]
    assert [s.status.status_code for s in traced.spans()] == [
        StatusCode.UNSET,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]


def test_the_kinds_declare_their_gen_ai_provider_name() -> None:
    from supervisor._kinds import kind, kind_gen_ai_provider

    names = {name: kind_gen_ai_provider(kind(name).vocabulary) for name in ("acp", "dsh-sdk", "codex")}
    assert names == {"acp": "acp", "dsh-sdk": "dsh-sdk", "codex": "openai"}
    pytest.importorskip("claude_agent_sdk")
    assert kind_gen_ai_provider(kind("claude-code").vocabulary) == "anthropic"


async def test_continued_makes_a_callers_traceparent_the_parent_unless_a_span_records(
    traced: Traced,
) -> None:
    """What ``subagents mcp`` does with each call's ``params._meta`` (the mcp SDK's own
    middleware does the same today; this keeps it so without the middleware)."""
    from supervisor.telemetry import _switch

    registry = Registry()
    registry.register(acp.Provider(example_agent_config()))
    given = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with _switch.continued(given):
        async with registry.run("acp", request()) as run:
            await run.result()
    with traced.provider.get_tracer("sdk").start_as_current_span("tools/call"), _switch.continued(given):
        async with registry.run("acp", request()) as run:
            await run.result()
    with _switch.continued({"traceparent": "not a traceparent"}):
        async with registry.run("acp", request()) as run:
            await run.result()
    first, second, third = (s for s in traced.spans() if s.name == "invoke_agent acp")
    assert first.parent is not None
    assert (f"{first.context.trace_id:032x}", f"{first.parent.span_id:016x}") == (
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
    )
    (call,) = [s for s in traced.spans() if s.name == "tools/call"]
    assert second.parent is not None
    assert call.context is not None
    assert second.parent.span_id == call.context.span_id  # the recording span stays the parent
    assert third.context is not None
    assert f"{third.context.trace_id:032x}" != "0af7651916cd43dd8448eb211c80319c"  # ignored
