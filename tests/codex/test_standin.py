"""The codex provider against a scripted app-server stand-in (tests/children/codex_standin.py).

For what the real server cannot be made to send here: every class of server request,
message phases, malformed values, early notifications, exits at chosen moments.  Frames
of well-formed scripts are validated against the generated schema too (``transcript``),
so the stand-in stays honest about the protocol's shapes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor import AbortSignal, Registry, StartAborted, StartFailed, StopReason, SubagentResult
from supervisor.providers.codex import PermissionMode
from tests.support.codex import (
    STANDIN_THREAD,
    STANDIN_TURN,
    Transcript,
    agent_message,
    notify,
    request,
    run_once,
    standin,
    status_item,
    turn_completed,
    turn_error,
)

pytestmark = pytest.mark.anyio

FAILED = turn_completed("failed", turn_error("other"))


def line(stage: str = "turn", category: str = "unknown", **extra: object) -> str:
    fields = "".join(f"; {k.replace('_', ' ')}: {v}" for k, v in extra.items())
    return f"Subagent failure (provider: Codex; stage: {stage}; category: {category}{fields})"


def decision(request: str, answer: str, mode: str = "never") -> str:
    return f"Codex unattended decision (mode: {mode}; request: {request}; decision: {answer})"


# -- the handshake -------------------------------------------------------------------------


async def test_argv_handshake_and_thread_parameters(tmp_path: Path, transcript: Transcript) -> None:
    codex = standin(tmp_path, transcript, script=[agent_message("done"), turn_completed()], config=["x.y=1"])
    result, run = await run_once(codex, tmp_path, task="the task")

    assert result == SubagentResult(output="done", stop_reason="completed")
    (initialize,) = transcript.results("initialize")
    assert initialize["userAgent"] == (
        '["app-server", "-c", "x.y=1", "-c", "features.unbounded_connection_retries=false", '
        '"-c", "features.shell_snapshot=false"]'
    )
    (init,) = transcript.sent("initialize")
    assert init["params"] == {
        "clientInfo": {
            "name": "subagent_supervisor",
            "title": "subagent-supervisor",
            "version": init["params"]["clientInfo"]["version"],
        },
        "capabilities": {"experimentalApi": False, "requestAttestation": False},
    }
    assert [f.get("method") for d, f in transcript.frames if d == "send"][:4] == [
        "initialize",
        "initialized",
        "thread/start",
        "turn/start",
    ]
    (turn,) = transcript.sent("turn/start")
    assert turn["params"] == {
        "threadId": STANDIN_THREAD,
        "input": [{"type": "text", "text": "the task", "text_elements": []}],
    }
    assert run.exit_facts is not None
    assert run.exit_facts.exit_code == 0


@pytest.mark.parametrize(
    ("mode", "params"),
    [
        (PermissionMode.NEVER, {"approvalPolicy": "never"}),
        (
            PermissionMode.APPROVE_FOR_ME,
            {
                "approvalPolicy": "on-request",
                "approvalsReviewer": "auto_review",
                "sandbox": "workspace-write",
            },
        ),
        (PermissionMode.BYPASS, {"approvalPolicy": "never", "sandbox": "danger-full-access"}),
    ],
)
async def test_thread_parameters_by_mode(
    tmp_path: Path, transcript: Transcript, mode: PermissionMode, params: dict[str, str]
) -> None:
    codex = standin(
        tmp_path, transcript, script=[agent_message("ok"), turn_completed()], permission_mode=mode
    )
    await run_once(codex, tmp_path)
    (thread,) = transcript.sent("thread/start")
    assert thread["params"] == {"cwd": str(tmp_path), "ephemeral": True, **params}


# -- the answer ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "output"),
    [
        ([("plain", None)], "plain"),
        ([("final", "final_answer"), ("later plain", None)], "final"),
        ([("first", None), ("second", None)], "second"),
        ([("progress", "commentary"), ("answer", None), ("more progress", "commentary")], "answer"),
        ([("stable", "partial_answer"), ("the end", "final_answer")], "the end"),
    ],
)
async def test_the_answer_is_the_last_final_else_unphased_message(
    tmp_path: Path, transcript: Transcript, messages: list[tuple[str, str | None]], output: str
) -> None:
    steps = [agent_message(text, phase, f"msg_{i}") for i, (text, phase) in enumerate(messages)]
    result, _ = await run_once(standin(tmp_path, transcript, script=[*steps, turn_completed()]), tmp_path)
    assert result == SubagentResult(output=output, stop_reason="completed")


@pytest.mark.parametrize(
    "steps",
    [
        [],
        [agent_message("narration only", "commentary")],
        [agent_message("partial only", "partial_answer")],
        [agent_message(" \n\t ")],
    ],
    ids=["nothing", "commentary", "partial-answer", "blank"],
)
async def test_no_final_answer_is_an_invalid_result(
    tmp_path: Path, transcript: Transcript, steps: list[dict[str, Any]]
) -> None:
    result, _ = await run_once(standin(tmp_path, transcript, script=[*steps, turn_completed()]), tmp_path)
    assert result.stop_reason == "error"
    assert result.diagnostic == line(category="invalid-result")


async def test_an_unknown_phase_fails_closed(tmp_path: Path) -> None:
    codex = standin(tmp_path, script=[agent_message("hmm", "draft"), agent_message("ok"), turn_completed()])
    result, _ = await run_once(codex, tmp_path)
    assert (result.stop_reason, result.diagnostic) == ("error", line())


async def test_early_notifications_are_buffered_until_the_turn_is_known(
    tmp_path: Path, transcript: Transcript
) -> None:
    script = [agent_message("early bird"), turn_completed(), {"respond": True}]
    result, run = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    assert result == SubagentResult(output="early bird", stop_reason="completed")
    events = [t.event for t in run.audit.entries]
    assert events.index("turn_started") < events.index("turn_completed")


async def test_other_threads_and_turns_are_ignored(tmp_path: Path, transcript: Transcript) -> None:
    other_turn = "01a228c9-0000-7000-8000-0000000other"
    script = [
        notify(
            "item/completed",
            item={"type": "agentMessage", "id": "m0", "text": "not ours", "phase": None},
            threadId="$THREAD",
            turnId=other_turn,
            completedAtMs=1,
        ),
        turn_completed(turn_id=other_turn),
        turn_completed("failed", turn_error("other"), thread_id="01a228c9-0000-7000-8000-000000reviewr"),
        agent_message("ours"),
        turn_completed(),
    ]
    result, _ = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    assert result == SubagentResult(output="ours", stop_reason="completed")


# -- failed turns ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("info", "stop_reason", "diagnostic"),
    [
        ("usageLimitExceeded", "error", line(category="limit")),
        ("contextWindowExceeded", "max-tokens", line(category="limit")),
        ("unauthorized", "error", line(category="access-policy")),
        ("flexUnavailable", "error", line(category="service")),
        (
            {"responseStreamConnectionFailed": {"httpStatusCode": 502}},
            "error",
            line(category="transport", HTTP_status=502),
        ),
        ({"responseStreamDisconnected": {"httpStatusCode": None}}, "error", line(category="transport")),
        ({"activeTurnNotSteerable": {"turnKind": "review"}}, "error", line(category="product-error")),
        ("somethingNew", "error", line()),
        (None, "error", line()),
    ],
)
async def test_failed_turns_are_classified(
    tmp_path: Path, transcript: Transcript, info: object, stop_reason: str, diagnostic: str
) -> None:
    script = [turn_completed("failed", turn_error(info))]
    result, _ = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    assert (result.stop_reason, result.diagnostic) == (stop_reason, diagnostic)


async def test_a_malformed_http_status_is_dropped_never_copied(tmp_path: Path) -> None:
    script = [
        turn_completed("failed", turn_error({"httpConnectionFailed": {"httpStatusCode": "503 SECRET"}}))
    ]
    result, _ = await run_once(standin(tmp_path, script=script), tmp_path)
    assert result.diagnostic == line(category="transport")


async def test_the_final_error_notification_classifies_a_failed_turn_without_error(
    tmp_path: Path, transcript: Transcript
) -> None:
    def error(info: object, retry: bool) -> dict[str, Any]:
        return notify("error", error=turn_error(info), willRetry=retry, threadId="$THREAD", turnId="$TURN")

    script = [
        error({"responseStreamDisconnected": {"httpStatusCode": 500}}, True),
        error("serverOverloaded", False),
        turn_completed("failed", None),
    ]
    result, _ = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    assert result.diagnostic == line(category="service")


async def test_a_remote_interrupt_is_an_unknown_turn_failure(tmp_path: Path, transcript: Transcript) -> None:
    script = [agent_message("so far", "partial_answer"), turn_completed("interrupted")]
    result, _ = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    assert result == SubagentResult(output="so far", stop_reason="error", diagnostic=line())


async def test_a_sandbox_error_carries_a_sandbox_decision(tmp_path: Path, transcript: Transcript) -> None:
    script = [turn_completed("failed", turn_error("sandboxError"))]
    result, _ = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    assert result.diagnostic == line(category="access-policy") + "\n" + decision(
        "sandbox execution", "failed"
    )


# -- the app-server's requests -----------------------------------------------------------------

APPROVAL = {"threadId": "$THREAD", "turnId": "$TURN", "itemId": "call_1", "startedAtMs": 1}
COMMAND = {**APPROVAL, "command": "/bin/bash -lc 'rm -rf /'", "cwd": "/"}


@pytest.mark.parametrize(
    ("method", "params", "answer", "request_kind", "decided"),
    [
        pytest.param(
            "item/commandExecution/requestApproval",
            {**COMMAND, "availableDecisions": ["accept", "cancel"]},
            {"decision": "cancel"},
            "command approval",
            "cancelled",
            id="command-cancel-offered",
        ),
        pytest.param(
            "item/commandExecution/requestApproval",
            {**COMMAND, "availableDecisions": ["accept", "decline"]},
            {"decision": "decline"},
            "command approval",
            "declined",
            id="command-cancel-not-offered",
        ),
        pytest.param(
            "item/commandExecution/requestApproval",
            COMMAND,
            {"decision": "decline"},
            "command approval",
            "declined",
            id="command-no-list",
        ),
        pytest.param(
            "item/fileChange/requestApproval",
            {**APPROVAL, "reason": "write outside", "grantRoot": "/"},
            {"decision": "decline"},
            "file approval",
            "declined",
            id="file",
        ),
        pytest.param(
            "item/permissions/requestApproval",
            {**APPROVAL, "cwd": "/", "permissions": {"network": {"enabled": True}}},
            {"permissions": {}, "scope": "turn"},
            "permission grant",
            "denied",
            id="permissions",
        ),
        pytest.param(
            "item/tool/requestUserInput",
            {
                "threadId": "$THREAD",
                "turnId": "$TURN",
                "itemId": "call_1",
                "isBlocking": True,
                "questions": [{"id": "q", "header": "H", "question": "Which?", "options": None}],
            },
            {"answers": {}},
            "user input",
            "empty response",
            id="user-input",
        ),
        pytest.param(
            "mcpServer/elicitation/request",
            {
                "threadId": "$THREAD",
                "turnId": None,
                "serverName": "srv",
                "mode": "form",
                "_meta": None,
                "message": "Pick one",
                "requestedSchema": {"type": "object", "properties": {}},
            },
            {"action": "decline", "content": None, "_meta": None},
            "MCP elicitation",
            "declined",
            id="elicitation",
        ),
    ],
)
async def test_requests_are_answered_without_granting_authority(
    tmp_path: Path,
    transcript: Transcript,
    method: str,
    params: dict[str, Any],
    answer: dict[str, Any],
    request_kind: str,
    decided: str,
) -> None:
    script = [{"request": method, "params": params}, FAILED]
    result, _ = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    (asked,) = transcript.server_requests()
    assert transcript.answers() == [{"id": asked["id"], "result": answer}]
    assert result.diagnostic == line(category="product-error") + "\n" + decision(request_kind, decided)


async def test_only_the_latest_decision_is_kept_and_never_on_success(
    tmp_path: Path, transcript: Transcript
) -> None:
    user_input = {
        "threadId": "$THREAD",
        "turnId": "$TURN",
        "itemId": "c",
        "isBlocking": True,
        "questions": [],
    }
    script = [
        {"request": "item/fileChange/requestApproval", "params": APPROVAL},
        {"request": "item/tool/requestUserInput", "params": user_input},
        agent_message("fine"),
        turn_completed(),
    ]
    codex = standin(tmp_path, transcript, script=script, permission_mode=PermissionMode.APPROVE_FOR_ME)
    result, _ = await run_once(codex, tmp_path)
    assert result == SubagentResult(output="fine", stop_reason="completed")

    codex = standin(
        tmp_path, transcript, script=[*script[:2], FAILED], permission_mode=PermissionMode.APPROVE_FOR_ME
    )
    result, _ = await run_once(codex, tmp_path)
    assert result.diagnostic == (
        line(category="product-error") + "\n" + decision("user input", "empty response", "approve-for-me")
    )


@pytest.mark.parametrize(
    ("kind", "request_kind"), [("commandExecution", "command execution"), ("fileChange", "file change")]
)
async def test_declined_items_are_recorded(
    tmp_path: Path, transcript: Transcript, kind: str, request_kind: str
) -> None:
    script = [status_item(kind, "completed", "a"), status_item(kind, "declined", "b"), FAILED]
    result, _ = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    assert result.diagnostic == line(category="product-error") + "\n" + decision(request_kind, "declined")


@pytest.mark.parametrize(
    "method", ["item/tool/call", "account/chatgptAuthTokens/refresh", "execCommandApproval"]
)
async def test_any_other_request_fails_the_run(tmp_path: Path, method: str) -> None:
    transcript = Transcript()  # the params are not a real request's: no schema check
    script = [
        {"request": method, "params": {"threadId": "$THREAD"}},
        agent_message("never seen"),
        turn_completed(),
    ]
    result, _ = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    assert (result.stop_reason, result.diagnostic) == ("error", line())
    (answer,) = transcript.answers()
    assert answer["error"]["code"] == -32601


# -- the stream and the process -----------------------------------------------------------------


async def test_exit_before_the_terminal_is_a_process_failure(tmp_path: Path, transcript: Transcript) -> None:
    script = [agent_message("part", "partial_answer"), {"exit": 3}]
    result, run = await run_once(standin(tmp_path, transcript, script=script), tmp_path)
    assert result == SubagentResult(
        output="part", stop_reason="error", diagnostic=line(stage="process", category="process", exit_code=3)
    )
    assert run.stages_entered == (
        "initialize",
        "thread-start",
        "turn-start",
        "turn",
        "process",
        "teardown",
    )


async def test_a_signal_before_turn_start_answers_is_a_process_failure(tmp_path: Path) -> None:
    script = [{"respond": "skip"}, {"signal": "SIGTERM"}]
    result, _ = await run_once(standin(tmp_path, script=script), tmp_path)
    assert result.diagnostic == line(stage="process", category="process", signal="SIGTERM")


async def test_a_turn_start_error_fails_in_turn_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="supervisor"):
        result, _ = await run_once(standin(tmp_path, script=[{"respond": "error"}]), tmp_path)
    assert result == SubagentResult(output="", stop_reason="error", diagnostic=line(stage="turn-start"))
    carrying = [r for r in caplog.records if "SECRET turn failure detail" in r.getMessage()]
    assert carrying
    assert {(r.name, r.levelno) for r in carrying} == {("supervisor.child", logging.DEBUG)}


@pytest.mark.parametrize(
    ("step", "keys"),
    [
        ({"raw": "{not json"}, {}),
        ({"raw": "[1, 2]"}, {}),
        ({"raw": "x" * 5000}, {"max_frame_bytes": 4096}),
        ({"deep": 100_000}, {}),
    ],
    ids=["not-json", "not-an-object", "too-large", "nested-too-deep"],
)
async def test_a_broken_frame_fails_the_turn(
    tmp_path: Path, step: dict[str, Any], keys: dict[str, Any]
) -> None:
    script = [agent_message("kept", "final_answer"), step, turn_completed()]
    result, run = await run_once(standin(tmp_path, script=script, **keys), tmp_path)
    assert result == SubagentResult(output="kept", stop_reason="error", diagnostic=line())
    assert run.quiescent is True


async def test_invalid_utf8_inside_a_frame_is_replaced_and_the_answer_kept(tmp_path: Path) -> None:
    """The agent message holds the raw bytes 0xff 0xfe (the stand-in writes "\\udcff" as 0xff)."""
    message = agent_message("good \udcff\udcfe answer", "final_answer")
    frame = json.dumps({"method": message["notify"], "params": message["params"]}, ensure_ascii=False)
    frame = frame.replace("$THREAD", STANDIN_THREAD).replace("$TURN", STANDIN_TURN)
    script = [{"raw": frame}, turn_completed()]
    result, _ = await run_once(standin(tmp_path, script=script), tmp_path)
    assert result == SubagentResult(output="good \ufffd\ufffd answer", stop_reason="completed")


async def test_local_cancel_interrupts_the_turn(tmp_path: Path, transcript: Transcript) -> None:
    registry = Registry()
    registry.register(
        standin(tmp_path, transcript, script=[agent_message("so far", "partial_answer"), {"hang": True}])
    )
    async with registry.run("codex", request(tmp_path)) as run:
        await transcript.wait_method("item/completed")
        run.cancel()
        assert await run.result() == SubagentResult(output="so far", stop_reason="aborted")
        await transcript.wait_method("turn/completed", turn__status="interrupted")
    (interrupt,) = transcript.sent("turn/interrupt")
    assert interrupt["params"] == {"threadId": STANDIN_THREAD, "turnId": STANDIN_TURN}
    assert [t.event for t in run.audit.entries][-4:] == [
        "dispose_requested",
        "stdin_closed",
        "tree_exited",
        "tree_gone",
    ]


async def test_local_cancel_before_the_turn_is_known(tmp_path: Path, transcript: Transcript) -> None:
    registry = Registry()
    registry.register(standin(tmp_path, transcript, script=[{"respond": "skip"}, {"hang": True}]))
    async with registry.run("codex", request(tmp_path)) as run:
        await transcript.wait_method("turn/start", direction="send")
        run.cancel()
        assert await run.result() == SubagentResult(output="", stop_reason="aborted")
    assert transcript.sent("turn/interrupt") == []
    assert run.quiescent is True


# -- start failures ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("startup", "diagnostic"),
    [
        ("exit:5", line(stage="process", category="process", exit_code=5)),
        ("garbage", line(stage="initialize")),
        ("init-error", line(stage="initialize")),
        ("thread-error", line(stage="thread-start")),
        ("not-ephemeral", line(stage="thread-start")),
    ],
)
async def test_start_failures_roll_back_with_safe_facts(
    tmp_path: Path, startup: str, diagnostic: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="supervisor"), pytest.raises(StartFailed) as info:
        await run_once(standin(tmp_path, startup=startup), tmp_path)
    assert str(info.value) == diagnostic
    assert info.value.quiescent is True
    assert "SECRET" not in str(info.value)


async def test_a_missing_cwd_fails_before_anything_spawns(tmp_path: Path) -> None:
    with pytest.raises(StartFailed) as info:
        await run_once(standin(tmp_path), tmp_path / "gone")
    assert str(info.value) == line(stage="initialize")


async def test_a_vanished_binary_fails_the_start(tmp_path: Path) -> None:
    codex = standin(tmp_path)
    codex.binary.unlink()
    with pytest.raises(StartFailed) as info:
        await run_once(codex, tmp_path)
    assert str(info.value) == line(stage="initialize")


async def test_abort_before_publication(tmp_path: Path) -> None:
    signal = AbortSignal()
    transcript = Transcript()
    registry = Registry()
    registry.register(standin(tmp_path, transcript, startup="hang"))

    async def abort_once_initialize_is_sent() -> None:
        await transcript.wait_method("initialize", direction="send")
        signal.abort()

    async with anyio.create_task_group() as tg:
        tg.start_soon(abort_once_initialize_is_sent)
        with pytest.raises(
            StartAborted, match=r"^subagent request was aborted before the Codex child started$"
        ):
            async with registry.run("codex", request(tmp_path), abort=signal):
                pytest.fail("the run must not be published")


async def test_runs_of_one_provider_are_isolated(tmp_path: Path) -> None:
    transcript = Transcript()
    codex = standin(tmp_path, transcript, script=[agent_message("same"), turn_completed()])
    registry = Registry()
    registry.register(codex)
    results: list[SubagentResult] = []

    async def one() -> None:
        async with registry.run("codex", request(tmp_path)) as run:
            results.append(await run.result())

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    assert results == [SubagentResult(output="same", stop_reason=StopReason.COMPLETED)] * 3
    assert len(transcript.by_run) == 3


async def test_collected_output_is_bounded(tmp_path: Path, transcript: Transcript) -> None:
    script = [agent_message("é" * 600), turn_completed()]
    result, _ = await run_once(standin(tmp_path, transcript, script=script, max_output_bytes=1001), tmp_path)
    # within the cap, marked, never a split code point
    assert result == SubagentResult(output="é" * 491 + "\n[output truncated]", stop_reason="completed")
    assert len(result.output.encode()) <= 1001
