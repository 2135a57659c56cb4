"""The codex provider against the real ``codex app-server`` (npm @openai/codex, pinned).

The app-server talks to ``tests.mockmodel`` (the Responses API on 127.0.0.1) through an
isolated CODEX_HOME; every JSON-RPC frame of every run is validated against the schema
the pinned binary generates (the ``transcript`` fixture).
"""

from __future__ import annotations

import logging
import signal
import socket
from pathlib import Path

import anyio
import pytest

from supervisor import Registry, StartFailed, StopReason, SubagentResult, Usage, foreground_text, job_outcome
from supervisor.providers.codex import PermissionMode
from tests.conftest import internals
from tests.mockmodel import (
    Cut,
    EchoToolResult,
    Hang,
    HttpError,
    MockModelServer,
    RecordedRequest,
    Shell,
    StreamFailure,
    Text,
    ToolCall,
    Turn,
)
from tests.support.codex import (
    Transcript,
    guarded,
    kill,
    mcp_server_overrides,
    namespaced_tool_calls,
    provider,
    request,
    run_once,
    tagged_processes,
)
from tests.support.peers import PeerLaunch, codex_app_server_launch

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

LINE = "Subagent failure (provider: Codex; stage: {stage}; category: {category})"
USAGE = Usage(input_tokens=12, output_tokens=7, cached_input_tokens=0)  # the mock's default report


def line(stage: str = "turn", category: str = "unknown", **extra: object) -> str:
    fields = "".join(f"; {k.replace('_', ' ')}: {v}" for k, v in extra.items())
    return LINE.format(stage=stage, category=category)[:-1] + fields + ")"


# -- success and the answer ----------------------------------------------------------------


async def test_success_returns_the_answer_and_reaches_quiescence(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Text("MOCK_OK: hello from the mock"))
    result, run = await run_once(provider(launch, transcript), launch.cwd, task="say hello, codex")

    assert result == SubagentResult(
        output="MOCK_OK: hello from the mock",
        stop_reason=StopReason.COMPLETED,
        usage=Usage(input_tokens=12, output_tokens=7, cached_input_tokens=0),  # the mock's default usage
    )
    assert run.stages_entered == ("initialize", "thread-start", "turn-start", "turn", "teardown")
    assert run.quiescent is True
    assert run.exit_facts is not None
    assert run.exit_facts.exit_code == 0  # stdin EOF was enough
    (thread_start,) = transcript.sent("thread/start")
    assert thread_start["params"] == {"cwd": str(launch.cwd), "ephemeral": True, "approvalPolicy": "never"}
    (turn_start,) = transcript.sent("turn/start")
    assert turn_start["params"]["input"] == [
        {"type": "text", "text": "say hello, codex", "text_elements": []}
    ]
    assert "say hello, codex" in mock.model_requests[0].user_texts()
    assert run.id not in str(transcript.frames)  # the parent's run id never reaches the child's protocol


@pytest.mark.parametrize("text", ["", "   \n  "], ids=["empty", "blank"])
async def test_a_blank_answer_is_an_invalid_result(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript, text: str
) -> None:
    mock.script(Text(text, chunks=(text,) if text else ()))
    result, _ = await run_once(provider(launch, transcript), launch.cwd)
    assert result == SubagentResult(
        output="", stop_reason=StopReason.ERROR, diagnostic=line(category="invalid-result"), usage=USAGE
    )


# -- model-side failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("turn", "stop_reason", "diagnostic"),
    [
        pytest.param(HttpError(500), "error", line(category="service"), id="500"),
        pytest.param(
            HttpError(503, code="server_is_overloaded"),
            "error",
            line(category="service"),
            id="503-overloaded",
        ),
        pytest.param(
            HttpError(429, error_type="usage_limit_reached"),
            "error",
            line(category="limit"),
            id="429-usage-limit",
        ),
        pytest.param(
            HttpError(429, code="rate_limit_exceeded"),
            "error",
            line(category="transport", HTTP_status=429),
            id="429-rate-limit",
        ),
        pytest.param(
            HttpError.context_length_exceeded(), "max-tokens", line(category="limit"), id="400-context-length"
        ),
        pytest.param(HttpError(503), "error", line(category="transport", HTTP_status=503), id="503-generic"),
        pytest.param(
            StreamFailure(code="rate_limit_exceeded"), "error", line(category="limit"), id="stream-rate-limit"
        ),
    ],
)
async def test_model_failures_map_to_closed_categories(
    mock: MockModelServer,
    launch: PeerLaunch,
    transcript: Transcript,
    turn: Turn,
    stop_reason: str,
    diagnostic: str,
) -> None:
    mock.script(turn)
    result, run = await run_once(provider(launch, transcript), launch.cwd)
    assert (result.stop_reason, result.diagnostic, result.output) == (stop_reason, diagnostic, "")
    assert run.quiescent is True


async def test_connection_refused_is_a_transport_failure_without_status(
    tmp_path: Path, codex_bin: Path, transcript: Transcript
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    # Nothing listens there now; without unbounded_connection_retries=false this turn never ends.
    with codex_app_server_launch(dead, root=tmp_path) as launch, anyio.fail_after(30):
        result, _ = await run_once(provider(launch, transcript), launch.cwd)
    assert result == SubagentResult(output="", stop_reason="error", diagnostic=line(category="transport"))


async def test_a_cut_stream_keeps_partial_output_and_pins_the_parent_texts(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Cut("the answer was going to be"))
    result, _ = await run_once(provider(launch, transcript), launch.cwd)

    assert foreground_text(result) == (
        "subagent run failed\n"
        "Diagnostic: Subagent failure (provider: Codex; stage: turn; category: product-error)\n"
        "Partial output before the run ended:\n"
        "the answer was going to be"
    )
    assert job_outcome(result).detail == (
        "error; diagnostic: Subagent failure (provider: Codex; stage: turn; category: product-error)"
    )


async def test_child_text_reaches_the_host_log_and_never_the_result(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript, caplog: pytest.LogCaptureFixture
) -> None:
    marker = "MOCK-SECRET-4711"
    mock.script(HttpError(400, message=f"bad request {marker}"))
    with caplog.at_level(logging.DEBUG, logger="supervisor"):
        result, _ = await run_once(provider(launch, transcript), launch.cwd)
    assert result.diagnostic == line(category="product-error")  # 400 arrives as "other"
    assert marker not in repr(result)
    carrying = [r for r in caplog.records if marker in r.getMessage()]
    assert carrying
    assert {(r.name, r.levelno) for r in carrying} == {("supervisor.child", logging.DEBUG)}


async def test_a_bad_override_fails_the_start_with_the_exit_facts(launch: PeerLaunch) -> None:
    # An unknown model provider is fatal to the app-server at start.
    codex = provider(launch, config=['model_provider="no-such-provider"'])
    with pytest.raises(StartFailed) as info:
        await run_once(codex, launch.cwd)
    assert info.value.diagnostic.startswith("Subagent failure (provider: Codex; stage: ")
    assert info.value.quiescent is True


# -- approvals: what the real server asks, per mode ---------------------------------------------


async def test_never_rejects_an_escalation_without_asking(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Shell("touch escalated.txt", escalated=True), EchoToolResult())
    result, _ = await run_once(provider(launch, transcript), launch.cwd)
    assert result.stop_reason == StopReason.COMPLETED
    assert transcript.server_requests() == []
    assert not (launch.cwd / "escalated.txt").exists()
    assert "approval policy is Never" in mock.model_requests[1].tool_results()[-1]


async def test_approve_for_me_routes_escalations_to_codex_reviewer_not_the_client(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    # The reviewer (a model call of its own) denies; the command item comes back declined.
    mock.script(*guarded("deny", Shell("touch escalated.txt", escalated=True), HttpError(500)))
    codex = provider(launch, transcript, permission_mode=PermissionMode.APPROVE_FOR_ME)
    result, _ = await run_once(codex, launch.cwd)

    assert transcript.server_requests() == []
    (thread_start,) = transcript.sent("thread/start")
    assert thread_start["params"] == {
        "cwd": str(launch.cwd),
        "ephemeral": True,
        "approvalPolicy": "on-request",
        "approvalsReviewer": "auto_review",
        "sandbox": "workspace-write",
    }
    assert result.diagnostic == (
        line(category="service") + "\nCodex unattended decision "
        "(mode: approve-for-me; request: command execution; decision: declined)"
    )
    assert not (launch.cwd / "escalated.txt").exists()


@pytest.mark.parametrize("last", ["answer", "failure"])
async def test_approve_for_me_forwards_an_mcp_elicitation_which_is_declined(
    mock: MockModelServer,
    tmp_path: Path,
    codex_bin: Path,
    transcript: Transcript,
    monkeypatch: pytest.MonkeyPatch,
    last: str,
) -> None:
    """The one request class the real server sends here: an MCP server's elicitation,
    once Codex's reviewer has allowed the tool call (approve-for-me)."""
    final: Turn = EchoToolResult("tool said: ") if last == "answer" else HttpError(500)
    mock.script(*guarded("allow", ToolCall("mcp__elicit::ask", {}), final))
    with namespaced_tool_calls(monkeypatch), codex_app_server_launch(mock, root=tmp_path) as launch:
        codex = provider(
            launch, transcript, permission_mode=PermissionMode.APPROVE_FOR_ME, config=mcp_server_overrides()
        )
        result, _ = await run_once(codex, launch.cwd)

    (asked,) = transcript.server_requests()
    assert asked["method"] == "mcpServer/elicitation/request"
    (answer,) = transcript.answers()
    assert answer == {"id": asked["id"], "result": {"action": "decline", "content": None, "_meta": None}}
    agent_requests = [r for r in mock.model_requests if r.tool_results()]
    assert "elicitation answered: decline" in agent_requests[-1].tool_results()[-1]
    if last == "answer":
        assert result.stop_reason == StopReason.COMPLETED
        assert result.diagnostic is None  # never a permission line on success
    else:
        assert result.diagnostic == (
            line(category="service") + "\nCodex unattended decision "
            "(mode: approve-for-me; request: MCP elicitation; decision: declined)"
        )


async def test_dangerous_bypass_runs_commands_outside_the_sandbox(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    mock.script(Shell(f"touch {outside}"), Text("written"))
    codex = provider(launch, transcript, permission_mode=PermissionMode.BYPASS)
    result, _ = await run_once(codex, launch.cwd)
    assert result.output == "written"
    assert outside.exists()
    (thread_start,) = transcript.sent("thread/start")
    assert thread_start["params"]["sandbox"] == "danger-full-access"
    assert thread_start["params"]["approvalPolicy"] == "never"


# -- cancellation, death, the tree -------------------------------------------------------------


async def test_local_cancel_settles_aborted_at_once_and_interrupts_the_turn(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Hang("thinking"))
    registry = Registry()
    registry.register(provider(launch, transcript))
    async with registry.run("codex", request(launch.cwd)) as run:
        await transcript.wait_method("item/agentMessage/delta")
        run.cancel()
        result = await run.result()
        assert result == SubagentResult(output="thinking", stop_reason=StopReason.ABORTED)
        await transcript.wait_method("turn/completed", turn__status="interrupted")
    (interrupt,) = transcript.sent("turn/interrupt")
    (started,) = transcript.results("turn/start")
    assert interrupt["params"]["turnId"] == started["turn"]["id"]
    assert run.quiescent is True
    assert run.state == "quiescent"


async def test_app_server_killed_mid_turn_is_a_process_failure_with_its_signal(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Hang("half-an-answer"))
    registry = Registry()
    registry.register(provider(launch, transcript))
    async with registry.run("codex", request(launch.cwd)) as run:
        await transcript.wait_method("item/agentMessage/delta")
        child = internals(run).process
        assert child is not None
        kill(child.pid, signal.SIGKILL)
        result = await run.result()
    assert result == SubagentResult(
        output="half-an-answer",
        stop_reason=StopReason.ERROR,
        diagnostic=line(stage="process", category="process", signal="SIGKILL"),
    )
    assert run.stages_entered[-2:] == ("process", "teardown")
    assert run.quiescent is True


async def test_a_tool_grandchild_is_never_orphaned(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    # The command outlives its tool call (a background terminal) and the app-server's death.
    mock.script(
        ToolCall("exec_command", {"cmd": "echo started; exec sleep 60", "yield_time_ms": 250}),
        Hang("waiting"),
    )
    registry = Registry()
    registry.register(provider(launch, transcript))
    async with registry.run("codex", request(launch.cwd)) as run:
        await anyio.to_thread.run_sync(lambda: mock.wait_for_requests(2, timeout_s=20))
        assert "started" in mock.model_requests[1].tool_results()[-1]
        tree = [f"{p.pid} {p.name()} ppid={p.ppid()}" for p in tagged_processes(run.id)]
        assert any(" sleep " in f" {t} " for t in tree), f"the tool command should still be running: {tree}"
        child = internals(run).process
        assert child is not None
        kill(child.pid, signal.SIGKILL)  # the app-server cannot clean up after itself now
        result = await run.result()
    assert result.diagnostic == line(stage="process", category="process", signal="SIGKILL")
    assert run.quiescent is True
    survivors = [f"{p.pid} {p.name()} ppid={p.ppid()}" for p in tagged_processes(run.id)]
    assert survivors == [], f"orphaned: {survivors}; the tree was {tree}"


async def test_two_concurrent_runs_are_isolated(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    def route(req: RecordedRequest) -> Turn:
        if any("alpha" in text for text in req.user_texts()):
            return Text("answer for alpha")
        return HttpError(503, code="server_is_overloaded")

    mock.script(route, route)
    registry = Registry()
    registry.register(provider(launch, transcript))
    results: dict[str, SubagentResult] = {}
    runs = {}

    async def one(task: str) -> None:
        async with registry.run("codex", request(launch.cwd, task)) as run:
            runs[task] = run
            results[task] = await run.result()

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "task alpha")
        tg.start_soon(one, "task beta")

    assert results["task alpha"] == SubagentResult(
        output="answer for alpha", stop_reason="completed", usage=USAGE
    )
    assert results["task beta"] == SubagentResult(
        output="", stop_reason="error", diagnostic=line(category="service")
    )
    assert runs["task alpha"].id != runs["task beta"].id
    assert all(run.quiescent for run in runs.values())
    assert len({result["thread"]["id"] for result in transcript.results("thread/start")}) == 2
