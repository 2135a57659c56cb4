"""The claude-code provider's protocol and lifecycle rules, over a scripted fake CLI.

The fake (``fake_cli.py``) speaks the CLI's stream-json control protocol, so the SDK and
the supervised transport run for real; only the CLI is scripted.  Each run takes well
under a second.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor import AbortSignal, Registry, Run, StartAborted, StartFailed, StopReason, SubagentRequest
from supervisor import SubagentResult as Result
from supervisor.process import RUN_TAG_VARIABLE
from supervisor.providers.claude_code import Provider
from supervisor.providers.claude_code._run import DENIAL_MESSAGE
from tests.claude_code.conftest import FakeCli, assistant_message, result_message
from tests.conftest import internals

pytestmark = pytest.mark.anyio

LINE = "Subagent failure (provider: Claude Code; stage: {stage}; category: {category})"


def line(stage: str, category: str, **exit_facts: object) -> str:
    text = LINE.format(stage=stage, category=category)
    if exit_facts:
        extra = "; ".join(f"{key.replace('_', ' ')}: {value}" for key, value in exit_facts.items())
        text = text[:-1] + f"; {extra})"
    return text


def decision(request: str, verdict: str, mode: str = "dontAsk") -> str:
    return f"Claude Code unattended decision (mode: {mode}; request: {request}; decision: {verdict})"


async def run_once(provider: Provider, cwd: Path, task: str = "the task") -> tuple[Result, Run]:
    registry = Registry()
    registry.register(provider)
    async with registry.run(provider.name, SubagentRequest(task=task, parent_cwd=cwd)) as run:
        result = await run.result()
    assert run.quiescent is True
    return result, run


async def test_the_task_reaches_the_cli_and_the_result_text_is_the_answer(fake_cli: FakeCli) -> None:
    provider = fake_cli.provider(
        {"steps": [{"emit": assistant_message("thinking")}, {"emit": result_message()}]}
    )
    result, run = await run_once(provider, fake_cli.work, task="summarise the repo")
    assert result == Result(output="the answer", stop_reason=StopReason.COMPLETED)
    assert fake_cli.seen("prompt") == ["summarise the repo"]
    assert fake_cli.seen("cwd") == [str(fake_cli.work)]
    assert run.stages_entered == ("query-start", "query-run", "teardown")
    assert run.exit_facts is not None
    assert run.exit_facts.exit_code == 0


async def test_no_cli_ever_starts_outside_the_supervisor(
    fake_cli: FakeCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

    async def forbidden(self: object) -> None:
        raise AssertionError("the SDK's own transport must never spawn the CLI")

    monkeypatch.setattr(SubprocessCLITransport, "connect", forbidden)
    provider = fake_cli.provider({"steps": [{"emit": result_message()}]})
    registry = Registry()
    registry.register(provider)
    async with registry.run(provider.name, SubagentRequest(task="t", parent_cwd=fake_cli.work)) as run:
        assert (await run.result()).stop_reason == StopReason.COMPLETED
        child = internals(run).process
        assert child is not None
        assert os.getsid(child.pid) == child.pid  # its own session, under the supervisor
    assert run.quiescent is True


async def test_the_cli_runs_with_the_unattended_argv_and_a_supervised_env(
    fake_cli: FakeCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDECODE", "1")
    monkeypatch.setenv("SOME_API_TOKEN", "ambient-credential")
    provider = fake_cli.provider({"steps": [{"emit": result_message()}]}, max_turns=4, env={"MINE": "x"})
    _, run = await run_once(provider, fake_cli.work)
    assert fake_cli.seen("argv") == [
        [
            "--output-format", "stream-json", "--verbose", "--system-prompt", "",
            "--max-turns", "4",
            "--disallowedTools", "AskUserQuestion",
            "--permission-prompt-tool", "stdio",
            "--permission-mode", "dontAsk",
            "--no-session-persistence",
            "--input-format", "stream-json",
        ]
    ]  # fmt: skip
    (env,) = fake_cli.seen("env")
    assert env[RUN_TAG_VARIABLE] == run.id
    assert env["MINE"] == "x"
    assert env["CLAUDE_CODE_ENTRYPOINT"] == "sdk-py"
    assert env["CLAUDE_AGENT_SDK_VERSION"] == provider.sdk_version
    assert env["CLAUDE_CODE_SDK_READS_SESSION_STATE"] == "1"
    assert env["PWD"] == str(fake_cli.work)
    assert "CLAUDECODE" not in env
    assert "SOME_API_TOKEN" not in env


async def test_an_elicitation_is_declined_and_recorded(fake_cli: FakeCli) -> None:
    elicit = {"subtype": "elicitation", "mcp_server_name": "srv", "message": "your password?"}
    provider = fake_cli.provider(
        {"steps": [{"request": elicit}, {"emit": result_message("error_during_execution", is_error=True)}]}
    )
    result, _ = await run_once(provider, fake_cli.work)
    assert [r["response"] for r in fake_cli.seen("response")] == [{"action": "decline"}]
    assert result.diagnostic == (
        f"{line('query-run', 'product-error')}\n{decision('MCP elicitation', 'declined')}"
    )


async def test_a_user_dialog_is_cancelled_and_recorded(fake_cli: FakeCli) -> None:
    dialog = {"subtype": "request_user_dialog", "dialog_kind": "refusal_fallback_prompt", "payload": {}}
    provider = fake_cli.provider(
        {"steps": [{"request": dialog}, {"emit": result_message("error_max_turns", is_error=True)}]},
        permission_mode="plan",
    )
    result, _ = await run_once(provider, fake_cli.work)
    assert [r["response"] for r in fake_cli.seen("response")] == [{"behavior": "cancelled"}]
    assert (
        result.diagnostic == f"{line('query-run', 'limit')}\n{decision('user dialog', 'cancelled', 'plan')}"
    )
    (argv,) = fake_cli.seen("argv")
    assert argv[argv.index("--disallowedTools") + 1] == "AskUserQuestion,ExitPlanMode"


@pytest.mark.parametrize("outcome", ["success", "error"])
async def test_a_tool_permission_request_is_denied(fake_cli: FakeCli, outcome: str) -> None:
    ask = {"subtype": "can_use_tool", "tool_name": "Write", "input": {"file_path": "/x"}, "tool_use_id": "t1"}
    end = result_message() if outcome == "success" else result_message("error_max_budget_usd", is_error=True)
    provider = fake_cli.provider({"steps": [{"request": ask}, {"emit": end}]}, permission_mode="acceptEdits")
    result, _ = await run_once(provider, fake_cli.work)
    responses = [r["response"] for r in fake_cli.seen("response")]
    assert responses == [{"behavior": "deny", "message": DENIAL_MESSAGE}]
    if outcome == "success":
        assert result == Result(output="the answer", stop_reason=StopReason.COMPLETED)
    else:
        expected = f"{line('query-run', 'limit')}\n{decision('tool permission', 'denied', 'acceptEdits')}"
        assert result.diagnostic == expected


async def test_only_the_latest_unattended_decision_is_kept(fake_cli: FakeCli) -> None:
    denied = {"type": "system", "subtype": "permission_denied", "tool_name": "Bash"}
    elicit = {"subtype": "elicitation", "mcp_server_name": "srv", "message": "m"}
    provider = fake_cli.provider(
        {"steps": [{"request": elicit}, {"emit": denied}, {"emit": result_message(is_error=True)}]}
    )
    result, _ = await run_once(provider, fake_cli.work)
    assert (
        result.diagnostic == f"{line('query-run', 'invalid-result')}\n{decision('tool permission', 'denied')}"
    )


async def test_bypass_mode_asks_nothing_over_stdio(fake_cli: FakeCli) -> None:
    provider = fake_cli.provider({"steps": [{"emit": result_message()}]}, permission_mode="bypassPermissions")
    result, _ = await run_once(provider, fake_cli.work)
    assert result.stop_reason == StopReason.COMPLETED
    (argv,) = fake_cli.seen("argv")
    assert "--permission-prompt-tool" not in argv
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"


@pytest.mark.parametrize(
    ("frame", "category"),
    [
        (result_message("success", result="   "), "invalid-result"),
        (result_message("success", result=None), "invalid-result"),
        (result_message("success", is_error=True, result="API Error: 500"), "invalid-result"),
        (result_message("error_max_turns", is_error=True, result=None), "limit"),
        (result_message("error_max_budget_usd", is_error=True, result=None), "limit"),
        (result_message("error_max_structured_output_retries", is_error=True), "limit"),
        (result_message("error_during_execution", is_error=True), "product-error"),
        (result_message("error_from_the_future", is_error=True), "unknown"),
        (result_message("success", is_error="yes"), "unknown"),
    ],
    ids=lambda value: value if isinstance(value, str) else f"{value['subtype']}-{value['result']!r}",
)
async def test_the_result_message_alone_decides_the_category(
    fake_cli: FakeCli, frame: dict[str, Any], category: str
) -> None:
    # The CLI exits 1 after an error result, as the real one does; that is never the category.
    provider = fake_cli.provider(
        {"steps": [{"emit": assistant_message("partial")}, {"emit": frame}, {"exit": 1}]}
    )
    result, run = await run_once(provider, fake_cli.work)
    assert result == Result(
        output="partial", stop_reason=StopReason.ERROR, diagnostic=line("query-run", category)
    )
    assert run.stages_entered == ("query-start", "query-run", "teardown")


async def test_raw_failure_text_goes_to_the_host_log_only(
    fake_cli: FakeCli, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="supervisor")
    frame = result_message(
        "error_during_execution", is_error=True, result="secret-result", errors=["secret-err"]
    )
    result, _ = await run_once(fake_cli.provider({"steps": [{"emit": frame}]}), fake_cli.work)
    assert result.diagnostic == line("query-run", "product-error")
    assert "secret" not in (result.output + (result.diagnostic or ""))
    logged = [r for r in caplog.records if "secret-err" in r.getMessage()]
    assert logged
    assert {(r.name, r.levelno) for r in logged} == {("supervisor.child", logging.DEBUG)}


@pytest.mark.parametrize(
    ("ending", "exit_facts"), [({"exit": 0}, {"exit_code": 0}), ({"exit": 7}, {"exit_code": 7})]
)
async def test_a_cli_that_exits_before_a_result_is_a_process_failure(
    fake_cli: FakeCli, ending: dict[str, int], exit_facts: dict[str, object]
) -> None:
    provider = fake_cli.provider({"steps": [{"emit": assistant_message("half an answer")}, ending]})
    result, run = await run_once(provider, fake_cli.work)
    assert result == Result(
        output="half an answer",
        stop_reason=StopReason.ERROR,
        diagnostic=line("process", "process", **exit_facts),
    )
    assert run.stages_entered == ("query-start", "query-run", "process", "teardown")


async def test_a_signalled_cli_reports_the_signal(fake_cli: FakeCli) -> None:
    provider = fake_cli.provider({"steps": [{"signal": "SIGKILL"}]})
    result, _ = await run_once(provider, fake_cli.work)
    assert result.diagnostic == line("process", "process", signal="SIGKILL")


async def test_lines_that_are_not_json_objects_are_skipped(fake_cli: FakeCli) -> None:
    noise = ["[SandboxDebug] some build prints this", "", '["an", "array"]']
    provider = fake_cli.provider({"steps": [*({"raw": text} for text in noise), {"emit": result_message()}]})
    result, _ = await run_once(provider, fake_cli.work)
    assert result == Result(output="the answer", stop_reason=StopReason.COMPLETED)


@pytest.mark.parametrize(
    "bad",
    ["{" + "x" * 3000 + "}", '{"type": "assistant", broken', '{"type": "result"}'],
    ids=["huge", "json", "malformed"],
)
async def test_a_frame_that_breaks_framing_fails_the_run(fake_cli: FakeCli, bad: str) -> None:
    steps = [{"raw": bad}, {"emit": result_message()}]
    provider = fake_cli.provider({"steps": steps}, max_frame_bytes=1024)
    result, _ = await run_once(provider, fake_cli.work)
    assert result == Result(output="", stop_reason=StopReason.ERROR, diagnostic=line("query-run", "unknown"))


async def test_a_frame_nested_too_deep_fails_the_run_like_any_broken_frame(fake_cli: FakeCli) -> None:
    """100,000 levels: Python's JSON decoder gives up with a RecursionError; the run fails in
    its stage as a broken frame does (Claude Code's vocabulary has no ``protocol``)."""
    deep = "[" * 100_000 + "]" * 100_000
    steps = [{"raw": '{"type": "x", "deep": ' + deep + "}"}, {"emit": result_message()}]
    result, _ = await run_once(fake_cli.provider({"steps": steps}), fake_cli.work)
    assert result == Result(output="", stop_reason=StopReason.ERROR, diagnostic=line("query-run", "unknown"))


async def test_invalid_utf8_inside_a_frame_is_replaced_and_the_answer_kept(fake_cli: FakeCli) -> None:
    """The result's text holds the raw bytes 0xff 0xfe ("\\udcff" is written as 0xff)."""
    frame = json.dumps(result_message(result="good \udcff\udcfe answer"), ensure_ascii=False)
    result, _ = await run_once(fake_cli.provider({"steps": [{"raw": frame}]}), fake_cli.work)
    assert result == Result(output="good \ufffd\ufffd answer", stop_reason=StopReason.COMPLETED)


# -- start ------------------------------------------------------------------------------------


async def test_a_cli_that_exits_at_startup_fails_the_start_with_its_exit_code(fake_cli: FakeCli) -> None:
    with pytest.raises(StartFailed) as info:
        await run_once(fake_cli.provider({"startup_exit": 3}), fake_cli.work)
    assert str(info.value) == line("process", "process", exit_code=3)
    assert info.value.quiescent is True


async def test_a_broken_frame_during_the_handshake_fails_the_start_at_once(fake_cli: FakeCli) -> None:
    provider = fake_cli.provider(
        {"startup_raw": "{" + "x" * 3000 + "}", "answer_initialize": False}, max_frame_bytes=1024
    )
    with anyio.fail_after(10), pytest.raises(StartFailed) as info:
        await run_once(provider, fake_cli.work)
    assert str(info.value) == line("query-start", "unknown")


async def test_a_bad_parent_cwd_fails_before_anything_spawns(fake_cli: FakeCli) -> None:
    with pytest.raises(StartFailed) as info:
        await run_once(fake_cli.provider({}), fake_cli.work / "missing")
    assert str(info.value) == line("query-start", "unknown")
    assert fake_cli.seen("argv") == []


async def test_a_cli_that_cannot_be_spawned_fails_the_start(fake_cli: FakeCli) -> None:
    provider = fake_cli.provider({})
    fake_cli.executable.unlink()
    with pytest.raises(StartFailed) as info:
        await run_once(provider, fake_cli.work)
    assert str(info.value) == line("query-start", "unknown")


async def test_an_abort_during_the_handshake_rolls_back(fake_cli: FakeCli) -> None:
    fifo = fake_cli.root / "ready.fifo"
    os.mkfifo(fifo)
    provider = fake_cli.provider({"ready_fifo": str(fifo), "answer_initialize": False})
    registry = Registry()
    registry.register(provider)
    abort = AbortSignal()

    async def abort_once_started() -> None:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            with anyio.fail_after(30):
                await anyio.wait_readable(fd)
        finally:
            os.close(fd)
        abort.abort()

    async with anyio.create_task_group() as group:
        group.start_soon(abort_once_started)
        with pytest.raises(
            StartAborted, match=r"^subagent request was aborted before the Claude Code child started$"
        ):
            async with registry.run(
                provider.name, SubagentRequest(task="t", parent_cwd=fake_cli.work), abort=abort
            ):
                pass


# -- cancellation ---------------------------------------------------------------------------


async def test_local_cancellation_settles_aborted_at_once_and_interrupts(fake_cli: FakeCli) -> None:
    provider = fake_cli.provider({"steps": [{"emit": assistant_message("working on it")}]})
    registry = Registry()
    registry.register(provider)
    async with registry.run(provider.name, SubagentRequest(task="t", parent_cwd=fake_cli.work)) as run:
        await run.output_arrived()
        run.cancel()
        assert await run.result() == Result(output="working on it", stop_reason=StopReason.ABORTED)
    assert run.quiescent is True
    assert [r["subtype"] for r in fake_cli.seen("sdk_request")] == ["interrupt"]


async def test_a_cli_that_ignores_eof_and_sigterm_is_still_taken_down(fake_cli: FakeCli) -> None:
    provider = fake_cli.provider(
        {"steps": [{"emit": result_message()}]},
        dispose_eof_grace_ms=100,
        dispose_grace_ms=100,
        env={"FAKE_CLAUDE_IGNORE_TERM": "1"},
    )
    registry = Registry()
    registry.register(provider)
    async with registry.run(provider.name, SubagentRequest(task="t", parent_cwd=fake_cli.work)) as run:
        child = internals(run).process
        assert child is not None
        assert (await run.result()).stop_reason == StopReason.COMPLETED
    assert run.quiescent is True
    assert run.exit_facts is not None
    assert run.exit_facts.signal in {signal.Signals.SIGTERM.name, signal.Signals.SIGKILL.name}
