"""The ACP provider over real stdio against the scripted ACP child: every mapping row and stage."""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor import (
    AbortSignal,
    Registry,
    StartAborted,
    StartFailed,
    StderrMode,
    SubagentRequest,
    SubagentResult,
    foreground_text,
    job_outcome,
)
from supervisor.providers.acp import Config, Provider, example_agent_config
from tests.conftest import CHILDREN, PYTHON

pytestmark = pytest.mark.anyio

ACP_CHILD = str(CHILDREN / "acp_child.py")
SECRET = "sk-secret-" + uuid.uuid4().hex


def child(**env: Any) -> Config:
    """An ``acp`` config running the scripted child with ``ACP_CHILD_<KEY>`` variables."""
    keys: dict[str, Any] = {}
    for name in ("permission", "authenticate", "stderr", "max_frame_bytes", "cwd"):
        if name in env:
            keys[name] = env.pop(name)
    return Config(
        command=PYTHON,
        args=["-I", ACP_CHILD],
        env={f"ACP_CHILD_{k}": v for k, v in env.items()},
        dispose_eof_grace_ms=2000,
        dispose_grace_ms=1000,
        **keys,
    )


async def run_once(config: Config, tmp_path: Path, task: str = "the task") -> tuple[SubagentResult, Any]:
    registry = Registry()
    registry.register(Provider(config))
    async with registry.run("acp", SubagentRequest(task=task, parent_cwd=tmp_path)) as run:
        result = await run.result()
    assert run.quiescent
    return result, run


# -- stop reasons -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("end_turn", SubagentResult(output="hello from acp_child", stop_reason="completed")),
        ("max_tokens", SubagentResult(output="hello from acp_child", stop_reason="max-tokens")),
        ("refusal", SubagentResult(output="hello from acp_child", stop_reason="refusal")),
        ("cancelled", SubagentResult(output="hello from acp_child", stop_reason="aborted")),
        (
            "max_turn_requests",
            SubagentResult(
                output="hello from acp_child",
                stop_reason="error",
                diagnostic="Subagent failure (provider: ACP; stage: prompt; category: remote-limit; "
                "stop reason: max_turn_requests)",
            ),
        ),
        pytest.param(  # a fixed id: every xdist worker must collect the same names
            SECRET,
            SubagentResult(
                output="hello from acp_child",
                stop_reason="error",
                diagnostic="Subagent failure (provider: ACP; stage: prompt; category: unknown; stop reason: unknown)",
            ),
            id="a-secret-stop-reason",
        ),
    ],
)
async def test_stop_reason_mapping(tmp_path: Path, stop: str, expected: SubagentResult) -> None:
    result, run = await run_once(child(STOP=stop), tmp_path)
    assert result == expected
    assert run.stages_entered == ("initialize", "new-session", "prompt", "teardown")


async def test_malformed_prompt_result_is_a_protocol_failure(tmp_path: Path) -> None:
    result, _ = await run_once(child(PROMPT_RESULT=json.dumps({"stopReason": 7})), tmp_path)
    assert result.stop_reason == "error"
    assert result.diagnostic == "Subagent failure (provider: ACP; stage: prompt; category: protocol)"


async def test_only_agent_message_text_is_collected(tmp_path: Path) -> None:
    result, _ = await run_once(child(NON_TEXT_UPDATES="1", TEXT="just this"), tmp_path)
    assert result.output == "just this"


def chunk(session: str, text: str, **extra: Any) -> dict[str, Any]:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session, "update": update, **extra},
    }


async def test_session_updates_are_taken_as_the_sdk_takes_them(tmp_path: Path) -> None:
    """Valid chunks of the session count (``_meta`` included), in order; another session's,
    and any the SDK's model rejects, are dropped and the run goes on."""
    frames = [
        chunk("s1", "one "),
        chunk("another-session", "not this "),
        {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1"}},
        {"jsonrpc": "2.0", "method": "session/update", "params": ["s1"]},
        {"jsonrpc": "2.0", "method": "session/update"},
        chunk("s1", 7),  # type: ignore[arg-type]  # text that is not a string
        chunk("s1", "two ", _meta={"from": "the child"}),
        chunk("s1", "three "),
    ]
    config = child(SESSION_ID="s1", FRAMES_AT="prompt", FRAMES=json.dumps(frames), TEXT="zero")
    result, _ = await run_once(config, tmp_path)
    assert result == SubagentResult(output="zeroone two three ", stop_reason="completed")  # the text first


# -- permissions --------------------------------------------------------------------------


async def test_reject_policy_denies_and_explains_the_remote_cancel(tmp_path: Path) -> None:
    result, _ = await run_once(child(PERMISSION="edit", TEXT=""), tmp_path)
    assert result == SubagentResult(
        output="permission edit: cancelled\n",
        stop_reason="aborted",
        diagnostic="ACP unattended decision (policy: reject; request: edit; decision: denied)",
    )
    assert job_outcome(result).status == "failed"  # aborted with a diagnostic is not a clean kill


async def test_allow_policy_selects_the_first_allow_option(tmp_path: Path) -> None:
    result, _ = await run_once(child(PERMISSION="execute", TEXT="", permission="allow"), tmp_path)
    assert result == SubagentResult(
        output="permission execute: selected allow-once\n", stop_reason="completed"
    )


async def test_allow_policy_without_an_allow_option_denies(tmp_path: Path) -> None:
    options = json.dumps([{"optionId": "no", "name": SECRET, "kind": "reject_once"}])
    result, _ = await run_once(
        child(PERMISSION="delete", PERMISSION_OPTIONS=options, TEXT="", permission="allow"), tmp_path
    )
    assert result.stop_reason == "aborted"
    assert result.diagnostic == "ACP unattended decision (policy: allow; request: delete; decision: denied)"


async def test_unknown_tool_kind_is_reported_as_unknown(tmp_path: Path) -> None:
    result, _ = await run_once(child(PERMISSION=SECRET, TEXT=""), tmp_path)
    assert result.diagnostic == "ACP unattended decision (policy: reject; request: unknown; decision: denied)"


async def test_permission_line_follows_the_failure_line(tmp_path: Path) -> None:
    result, _ = await run_once(
        child(PERMISSION="read,edit", PERMISSION_DENIED_STOP="max_turn_requests", TEXT=""), tmp_path
    )
    assert result.diagnostic == (
        "Subagent failure (provider: ACP; stage: prompt; category: remote-limit; stop reason: max_turn_requests)\n"
        "ACP unattended decision (policy: reject; request: edit; decision: denied)"
    )


async def test_no_permission_line_on_success(tmp_path: Path) -> None:
    result, _ = await run_once(child(PERMISSION="read", TEXT="", permission="allow"), tmp_path)
    assert result.stop_reason == "completed"
    assert result.diagnostic is None


# -- startup failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"EXIT_AT": "initialize", "EXIT_CODE": "5"},
            "Subagent failure (provider: ACP; stage: initialize; category: process-exit; exit code: 5)",
        ),
        (
            {"SIGNAL_AT": "new-session", "SIGNAL": "SIGSEGV"},
            "Subagent failure (provider: ACP; stage: new-session; category: process-exit; signal: SIGSEGV)",
        ),
        (
            {"MISSING_SESSION_ID": "1"},
            "Subagent failure (provider: ACP; stage: new-session; category: protocol)",
        ),
        (
            {"ERROR_AT": "initialize", "ERROR_TEXT": SECRET},
            "Subagent failure (provider: ACP; stage: initialize; category: transport)",
        ),
        (
            {"ERROR_AT": "new-session", "ERROR_TEXT": SECRET},
            "Subagent failure (provider: ACP; stage: new-session; category: transport)",
        ),
        (
            {"AUTH_METHOD": "key", "AUTH_FAIL": "1", "authenticate": "key"},
            "Subagent failure (provider: ACP; stage: initialize; category: protocol)",
        ),
    ],
)
async def test_startup_failures(tmp_path: Path, env: dict[str, str], line: str) -> None:
    registry = Registry()
    registry.register(Provider(child(**env)))
    with pytest.raises(StartFailed) as info:
        async with registry.run("acp", SubagentRequest(task="t", parent_cwd=tmp_path)):
            pytest.fail("must not publish")
    assert str(info.value) == line
    assert SECRET not in str(info.value)


async def test_authenticate_with_the_configured_method(tmp_path: Path) -> None:
    result, _ = await run_once(child(AUTH_METHOD="key", authenticate="key"), tmp_path)
    assert result.stop_reason == "completed"


async def test_missing_command_is_process_start(tmp_path: Path) -> None:
    registry = Registry()
    registry.register(Provider(Config(command=str(tmp_path / "no-agent"))))
    with pytest.raises(
        StartFailed, match=r"^Subagent failure \(provider: ACP; stage: process; category: process-start\)$"
    ):
        async with registry.run("acp", SubagentRequest(task="t", parent_cwd=tmp_path)):
            pass


async def test_bad_cwd_is_a_configuration_failure(tmp_path: Path) -> None:
    registry = Registry()
    registry.register(Provider(child()))
    with pytest.raises(StartFailed, match=r"stage: initialize; category: configuration\)$"):
        async with registry.run("acp", SubagentRequest(task="t", parent_cwd=tmp_path / "nope")):
            pass


async def first_frame(fifo: Path) -> bytes:
    """The first frame the child logs to ``fifo``: proof it is up and has read its stdin."""

    def read() -> bytes:
        with fifo.open("rb") as stream:
            return stream.readline()

    with anyio.fail_after(30):
        return await anyio.to_thread.run_sync(read, abandon_on_cancel=True)


async def test_abort_while_initialize_hangs(tmp_path: Path) -> None:
    fifo = tmp_path / "frames"
    os.mkfifo(fifo)
    registry = Registry()
    registry.register(Provider(child(HANG="initialize", LOG_FILE=str(fifo))))
    abort = AbortSignal()

    async def abort_once_initialize_is_read() -> None:
        assert json.loads(await first_frame(fifo))["method"] == "initialize"
        abort.abort()

    async with anyio.create_task_group() as tg:
        tg.start_soon(abort_once_initialize_is_read)
        with pytest.raises(
            StartAborted, match=r"^subagent request was aborted before the ACP child started$"
        ):
            async with registry.run("acp", SubagentRequest(task="t", parent_cwd=tmp_path), abort=abort):
                pass


# -- after publication --------------------------------------------------------------------


async def test_prompt_error_answer_is_transport_and_never_copied(tmp_path: Path) -> None:
    result, _ = await run_once(child(ERROR_AT="prompt", ERROR_TEXT=SECRET), tmp_path)
    assert result == SubagentResult(
        output="hello from acp_child",
        stop_reason="error",
        diagnostic="Subagent failure (provider: ACP; stage: prompt; category: transport)",
    )


async def test_exit_during_prompt_is_process_exit_with_partial_output(tmp_path: Path) -> None:
    result, run = await run_once(child(EXIT_AT="prompt", EXIT_CODE="9"), tmp_path)
    assert result == SubagentResult(
        output="hello from acp_child",
        stop_reason="error",
        diagnostic="Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 9)",
    )
    assert "process" in run.stages_entered


async def test_exit_while_a_grandchild_holds_stdout_settles_from_the_exit_facts(tmp_path: Path) -> None:
    result, _ = await run_once(child(EXIT_AT="prompt", EXIT_CODE="9", HOLD_STDOUT="1"), tmp_path)
    assert result == SubagentResult(
        output="hello from acp_child",
        stop_reason="error",
        diagnostic="Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 9)",
    )


async def test_frame_over_the_limit_is_protocol(tmp_path: Path) -> None:
    result, _ = await run_once(child(HUGE_LINE=str(300_000), max_frame_bytes=100000), tmp_path)
    assert result.stop_reason == "error"
    assert result.diagnostic == "Subagent failure (provider: ACP; stage: prompt; category: protocol)"


async def test_local_cancel_mid_stream_sends_session_cancel(tmp_path: Path) -> None:
    log = tmp_path / "frames.log"
    registry = Registry()
    registry.register(Provider(child(TEXT="one two three four five six", SLOW_MS="2000", LOG_FILE=str(log))))
    async with registry.run("acp", SubagentRequest(task="t", parent_cwd=tmp_path)) as run:
        await run.output_arrived()
        run.cancel()
        result = await run.result()
    assert result == SubagentResult(output="one ", stop_reason="aborted")
    methods = [json.loads(line).get("method") for line in log.read_text().splitlines()]
    assert "session/cancel" in methods


async def test_leaving_the_block_cancels_a_child_that_ignores_cancel(tmp_path: Path) -> None:
    registry = Registry()
    registry.register(Provider(child(HANG="prompt", IGNORE_CANCEL="1")))
    async with registry.run("acp", SubagentRequest(task="t", parent_cwd=tmp_path)) as run:
        await run.output_arrived()
    result = await run.result()
    assert (result.stop_reason, result.diagnostic) == ("aborted", None)
    assert result.output
    assert "hello from acp_child".startswith(result.output)  # the words streamed before the cancel
    assert run.quiescent


@pytest.mark.parametrize(
    ("env", "rung"),
    [({"IGNORE_EOF": "1"}, "term-wait"), ({"IGNORE_EOF": "1", "TRAP_TERM": "1"}, "kill-wait")],
)
async def test_stubborn_children_are_taken_down(tmp_path: Path, env: dict[str, str], rung: str) -> None:
    config = child(**env).model_copy(update={"dispose_eof_grace_ms": 100, "dispose_grace_ms": 100})
    result, run = await run_once(config, tmp_path)
    assert result.stop_reason == "completed"
    assert rung in [t.target for t in run.audit.entries]


@pytest.mark.parametrize("descendant", ["GRANDCHILD", "DAEMON"])
async def test_descendants_are_part_of_the_run(tmp_path: Path, descendant: str) -> None:
    config = child(**{descendant: "trap-term"}).model_copy(update={"dispose_eof_grace_ms": 100})
    result, run = await run_once(config, tmp_path)
    assert result.stop_reason == "completed"
    assert run.quiescent  # and the leak guard checks nothing is left


# -- workspace, environment, stderr -------------------------------------------------------


async def test_cwd_is_the_process_cwd_and_the_session_cwd(tmp_path: Path) -> None:
    result, _ = await run_once(child(ECHO_CWD="1", TEXT=""), tmp_path)
    assert result.output == f"cwd={tmp_path}\nsession_cwd={tmp_path}\n"


async def test_configured_cwd_wins_over_the_parent(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    config = child(ECHO_CWD="1", TEXT="")
    config = Config.model_validate(
        {**config.model_dump(exclude={"cwd"}), "cwd": "work"}, context={"base_dir": tmp_path}
    )
    result, _ = await run_once(config, Path("/"))
    assert result.output == f"cwd={tmp_path / 'work'}\nsession_cwd={tmp_path / 'work'}\n"


async def test_environment_is_scrubbed_with_explicit_entries_on_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARENT_API_KEY", SECRET)
    monkeypatch.setenv("DSH_TOKEN_HOME", "x")
    config = child(ECHO_ENV="PARENT_API_KEY,DSH_TOKEN_HOME,CHILD_API_KEY", TEXT="")
    config = config.model_copy(update={"env": {**config.env, "CHILD_API_KEY": "given"}})
    result, _ = await run_once(config, tmp_path)
    assert result.output == "PARENT_API_KEY unset\nDSH_TOKEN_HOME unset\nCHILD_API_KEY=given\n"


async def test_stderr_log_mode_reaches_the_host_log_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="supervisor")
    result, _ = await run_once(child(STDERR_TEXT=SECRET, EXIT_AT="prompt", stderr="log"), tmp_path)
    assert SECRET in caplog.text
    assert SECRET not in (result.diagnostic or "") + result.output


async def test_stderr_discard_mode(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    await run_once(child(STDERR_TEXT=SECRET, stderr=StderrMode.DISCARD), tmp_path)
    assert SECRET not in capfd.readouterr().err


async def test_stderr_inherit_mode(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    await run_once(child(STDERR_TEXT=SECRET, stderr=StderrMode.INHERIT), tmp_path)
    assert SECRET in capfd.readouterr().err


# -- many at once, consumers, the example agent -------------------------------------------


async def test_ten_concurrent_runs_are_isolated(tmp_path: Path) -> None:
    registry = Registry()
    registry.register(Provider(child(ECHO_PROMPT="1", TEXT="")))
    seen: dict[str, str] = {}

    async def one(i: int) -> None:
        async with registry.run("acp", SubagentRequest(task=f"task-{i}", parent_cwd=tmp_path)) as run:
            seen[run.id] = (await run.result()).output

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(one, i)
    assert sorted(seen.values()) == sorted(f"prompt=task-{i}\n" for i in range(10))


async def test_failing_run_snapshot(tmp_path: Path) -> None:
    result, _ = await run_once(child(EXIT_AT="prompt", EXIT_CODE="2", TEXT="half an answer"), tmp_path)
    assert foreground_text(result) == (
        "subagent run failed\n"
        "Diagnostic: Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 2)\n"
        "Partial output before the run ended:\n"
        "half an answer"
    )
    assert job_outcome(result).detail == (
        "error; diagnostic: Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 2)"
    )


async def test_example_agent_answers_without_a_key(tmp_path: Path) -> None:
    result, run = await run_once(example_agent_config(), tmp_path, task="say hello")
    assert result.stop_reason == "completed"
    assert result.output.startswith("Hello!")
    assert run.exit_facts is not None
    assert run.exit_facts.exit_code == 0


async def test_example_agent_permission_allow_writes_a_file(tmp_path: Path) -> None:
    result, _ = await run_once(
        example_agent_config(permission="allow"), tmp_path, task="make a file\n@permission edit"
    )
    assert result.stop_reason == "completed"
    assert any(p.is_file() for p in tmp_path.iterdir())


def test_config_rejects_bad_graces() -> None:
    with pytest.raises(ValueError, match="dispose_grace_ms"):
        Config(command="x", dispose_grace_ms=0)
    with pytest.raises(ValueError, match="dispose_eof_grace_ms"):
        Config(command="x", dispose_eof_grace_ms=float("inf"))
    with pytest.raises(ValueError, match="extra"):
        Config(command="x", colour="blue")  # type: ignore[call-arg]


def test_environment_of_this_process_is_untouched() -> None:
    assert "SUBAGENT_SUPERVISOR_RUN" not in os.environ


async def test_the_capabilities_sent_at_initialize_are_built_once_and_stay_the_sdk_s_default(
    tmp_path: Path,
) -> None:
    """Every run offers the same (empty) client capabilities; the one model built for all
    runs serialises as a fresh one would, and no run changes it."""
    import acp
    from acp.utils import serialize_params

    from supervisor.providers.acp._run import _client_capabilities

    for _ in range(2):
        result, _run = await run_once(child(), tmp_path)
        assert result.stop_reason == "completed"
    shared = _client_capabilities(acp)
    assert shared is _client_capabilities(acp)
    fresh = acp.schema.ClientCapabilities()
    assert shared == fresh
    sent = acp.schema.InitializeRequest(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=shared)
    expected = acp.schema.InitializeRequest(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=fresh)
    assert serialize_params(sent) == serialize_params(expected)


async def test_disposing_a_settled_run_cancels_no_scope_its_ended_driver_left(tmp_path: Path) -> None:
    """The turn's driver ended before dispose: its scope is left alone (anyio's ``cancel``
    would format the calling task for nothing); the run ends quiescent and completed."""
    result, run = await run_once(child(), tmp_path)
    assert result.stop_reason == "completed"
    state = run._engine.state
    assert state.turn_done.is_set()
    assert not state.drive_scope.cancel_called


async def test_a_run_whose_tasks_all_ended_closes_its_group_without_a_cancel(tmp_path: Path) -> None:
    """A one-shot run's tasks (the exit watch, the turn's driver) have ended by its close:
    its own group is left as it is; nothing is counted unfinished."""
    result, run = await run_once(child(), tmp_path)
    assert result.stop_reason == "completed"
    group = run._engine.state.task_group
    assert group.unfinished == 0
    assert not group.cancel_scope.cancel_called


async def test_the_guarded_group_counts_a_task_until_its_code_has_finished() -> None:
    """Counted from creation to the end of its code, ``start`` and ``start_soon`` alike, a task
    ended by a cancellation too."""
    from anyio.abc import TaskStatus

    from supervisor.run._guard import GuardedTaskGroup

    errors: list[BaseException] = []
    release = anyio.Event()

    async def waits() -> None:
        await release.wait()

    async def starts(*, task_status: TaskStatus[None]) -> None:
        task_status.started()
        await release.wait()

    async with anyio.create_task_group() as tg:
        guarded = GuardedTaskGroup(tg, errors.append)
        guarded.start_soon(waits)
        await guarded.start(starts)
        assert guarded.unfinished == 2
        release.set()
    assert guarded.unfinished == 0
    async with anyio.create_task_group() as tg:
        guarded = GuardedTaskGroup(tg, errors.append)
        guarded.start_soon(waits)
        assert guarded.unfinished == 1
        tg.cancel_scope.cancel()
    assert guarded.unfinished == 0
    assert errors == []
