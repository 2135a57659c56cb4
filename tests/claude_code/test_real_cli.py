"""The claude-code provider against the real Claude Code CLI bundled in claude-agent-sdk.

The model is the mock Messages API (SSE) in ``tests/mockmodel`` on 127.0.0.1; HOME and
CLAUDE_CONFIG_DIR are per test.  A tool that must be "running" signals it through a
FIFO the test waits on (event-driven, no sleeps), and reports its own pid so the test
can prove it gone afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import psutil
import pytest

import supervisor
from supervisor import AbortSignal, Registry, Run, StopReason, SubagentRequest, SubagentResult
from supervisor.providers.claude_code import Provider
from tests.claude_code.conftest import ClaudeHome, claude_provider
from tests.conftest import internals
from tests.mockmodel import HttpError, MockModelServer, Shell, Text, Usage, WriteFile

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]

LIMIT_LINE = "Subagent failure (provider: Claude Code; stage: query-run; category: limit)"
INVALID_LINE = "Subagent failure (provider: Claude Code; stage: query-run; category: invalid-result)"
DENIED_LINE = "Claude Code unattended decision (mode: {mode}; request: tool permission; decision: denied)"
TOOL_DEADLINE = 60.0


def bare(result: SubagentResult) -> SubagentResult:
    """The result without its usage (the tests of usage are in test_conversation.py)."""
    return result.model_copy(update={"usage": None})


def request(home: ClaudeHome, task: str = "Do the task.") -> SubagentRequest:
    return SubagentRequest(task=task, parent_cwd=home.work)


def registry_of(*providers: Provider) -> Registry:
    registry = Registry()
    for provider in providers:
        registry.register(provider)
    return registry


async def run_once(provider: Provider, home: ClaudeHome, task: str = "Do the task.") -> SubagentResult:
    async with registry_of(provider).run(provider.name, request(home, task)) as run:
        result = await run.result()
    assert run.quiescent is True
    return result


# -- a tool that tells the test it is running --------------------------------------------


class ToolSignal:
    """A FIFO the tool writes its pid to once it runs; the test awaits it."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "tool.fifo"
        os.mkfifo(self.path)

    def command(self) -> str:
        script = (
            "import os,time;"
            f"fd=os.open({str(self.path)!r},os.O_WRONLY);"
            "os.write(fd,str(os.getpid()).encode());os.close(fd);time.sleep(120)"
        )
        return f'python3 -c "{script}"'

    async def running(self) -> int:
        """The tool's pid, once it has started (the writer closing marks the end)."""
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        data = b""
        try:
            with anyio.fail_after(TOOL_DEADLINE):
                while True:
                    await anyio.wait_readable(fd)
                    chunk = os.read(fd, 64)
                    if not chunk:
                        return int(data)
                    data += chunk
        finally:
            os.close(fd)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@contextlib.asynccontextmanager
async def started(
    provider: Provider, home: ClaudeHome, abort: AbortSignal | None = None
) -> AsyncIterator[Run]:
    async with registry_of(provider).run(provider.name, request(home), abort=abort) as run:
        yield run


# -- outcomes ------------------------------------------------------------------------------


async def test_success_runs_a_tool_and_returns_the_final_answer(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    mock_model.script(Shell("echo hello-from-tool", text="Let me check."), Text("All done."))
    provider = claude_provider(claude_home, mock_model)
    async with started(provider, claude_home) as run:
        assert run.stage == "query-run"
        result = await run.result()
    assert bare(result) == SubagentResult(output="All done.", stop_reason=StopReason.COMPLETED)
    assert result.usage is not None  # two model calls, one turn: the result message's totals
    assert (result.usage.input_tokens, result.usage.output_tokens) == (24, 14)
    assert run.quiescent is True
    assert run.exit_facts == supervisor.ExitFacts(exit_code=0, signal=None)
    requests = mock_model.model_requests
    assert requests[0].user_texts()[-1].endswith("Do the task.")
    assert requests[1].tool_results() == ["hello-from-tool"]
    assert "AskUserQuestion" not in requests[0].tool_names()
    assert [(e.event, e.target) for e in run.audit.entries][:2] == [
        ("initialized", "query-run"),
        ("result_succeeded", "settled"),
    ]
    assert not list(claude_home.config_dir.glob("projects/**/*.jsonl")), "no session persistence"


async def test_max_turns_is_a_limit_and_pins_the_consumer_texts(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    mock_model.default = Shell("echo again", text="Let me look.")
    result = await run_once(claude_provider(claude_home, mock_model, max_turns=1), claude_home)
    assert bare(result) == SubagentResult(
        output="Let me look.", stop_reason=StopReason.ERROR, diagnostic=LIMIT_LINE
    )
    assert supervisor.foreground_text(result) == (
        "subagent run failed\n"
        "Diagnostic: Subagent failure (provider: Claude Code; stage: query-run; category: limit)\n"
        "Partial output before the run ended:\n"
        "Let me look."
    )
    assert supervisor.job_outcome(result).detail == (
        "error; diagnostic: Subagent failure (provider: Claude Code; stage: query-run; category: limit)"
    )
    assert len(mock_model.model_requests) == 1


async def test_budget_is_a_limit(claude_home: ClaudeHome, mock_model: MockModelServer) -> None:
    # The provider has no budget key; a cli_path wrapper adds the CLI's own flag.
    wrapper = claude_home.root / "claude-with-budget"
    bundled = Provider(claude_provider(claude_home, mock_model).config).cli
    wrapper.write_text(f'#!/bin/sh\nexec "{bundled}" "$@" --max-budget-usd 0.01\n', encoding="utf-8")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    mock_model.default = Shell("echo costly", usage=Usage(input_tokens=5_000_000))
    result = await run_once(claude_provider(claude_home, mock_model, cli_path=wrapper), claude_home)
    assert result.stop_reason == StopReason.ERROR
    assert result.diagnostic == LIMIT_LINE


@pytest.mark.parametrize(
    ("mode", "ask"),
    [("dontAsk", "write"), ("acceptEdits", "touch")],
    ids=["dontAsk-write", "acceptEdits-bash"],
)
async def test_a_denied_request_joins_a_failure_diagnostic(
    claude_home: ClaudeHome, mock_model: MockModelServer, mode: str, ask: str
) -> None:
    # acceptEdits runs edits inside the workspace, so the denied touch aims outside it.
    target = (claude_home.work if ask == "write" else claude_home.root) / "denied.txt"
    turn = WriteFile(str(target), "nope") if ask == "write" else Shell(f"touch {target}")
    mock_model.script(turn, HttpError(500))
    result = await run_once(claude_provider(claude_home, mock_model, permission_mode=mode), claude_home)
    assert result.stop_reason == StopReason.ERROR
    assert result.diagnostic == f"{INVALID_LINE}\n{DENIED_LINE.format(mode=mode)}"
    assert not target.exists()


async def test_a_denied_write_leaves_no_diagnostic_on_success(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    target = claude_home.work / "denied.txt"
    mock_model.script(WriteFile(str(target), "nope"), Text("I could not write it."))
    result = await run_once(claude_provider(claude_home, mock_model), claude_home)
    assert bare(result) == SubagentResult(output="I could not write it.", stop_reason=StopReason.COMPLETED)
    assert not target.exists()


@pytest.mark.parametrize("status", [500, 529, 401])
async def test_http_errors_are_invalid_results(
    claude_home: ClaudeHome, mock_model: MockModelServer, status: int
) -> None:
    mock_model.default = HttpError(status)
    result = await run_once(claude_provider(claude_home, mock_model), claude_home)
    assert bare(result) == SubagentResult(output="", stop_reason=StopReason.ERROR, diagnostic=INVALID_LINE)


async def test_a_blank_final_answer_is_an_invalid_result(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    mock_model.default = Text("")
    result = await run_once(claude_provider(claude_home, mock_model), claude_home)
    assert bare(result) == SubagentResult(output="", stop_reason=StopReason.ERROR, diagnostic=INVALID_LINE)


# -- the process ---------------------------------------------------------------------------


async def test_the_cli_killed_mid_tool_is_a_process_failure_and_leaves_no_orphan(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    tool = ToolSignal(claude_home.root)
    claude_home.allow("Bash")
    mock_model.script(Shell(tool.command(), text="Running it."), Text("unreachable"))
    provider = claude_provider(claude_home, mock_model)
    async with started(provider, claude_home) as run:
        tool_pid = await tool.running()
        child = internals(run).process
        assert child is not None
        os.kill(child.pid, signal.SIGKILL)
        result = await run.result()
        assert bare(result) == SubagentResult(
            output="Running it.",
            stop_reason=StopReason.ERROR,
            diagnostic="Subagent failure (provider: Claude Code; stage: process; category: process; "
            "signal: SIGKILL)",
        )
        assert run.stage == "process"
    assert run.quiescent is True
    assert gone(tool_pid)


async def test_cancellation_mid_tool_aborts_at_once_and_quiesces_the_tree(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    tool = ToolSignal(claude_home.root)
    claude_home.allow("Bash")
    mock_model.script(Shell(tool.command(), text="Running it."), Text("unreachable"))
    provider = claude_provider(claude_home, mock_model)
    abort = AbortSignal()
    async with started(provider, claude_home, abort=abort) as run:
        tool_pid = await tool.running()
        abort.abort()
        # Settled by the abort itself: nothing waits on the SDK or the CLI.
        assert run.state == "settled"
        result = await run.result()
        assert bare(result) == SubagentResult(output="Running it.", stop_reason=StopReason.ABORTED)
    assert run.quiescent is True
    assert gone(tool_pid)
    assert [e.event for e in run.audit.entries if e.event == "cancelled"] == ["cancelled"]


async def test_two_concurrent_runs_are_isolated(claude_home: ClaudeHome, mock_model: MockModelServer) -> None:
    with MockModelServer() as other_model:
        mock_model.default = Text("answer from A")
        other_model.default = Text("answer from B")
        a = claude_provider(claude_home, mock_model, name="a")
        b = claude_provider(claude_home, other_model, name="b")
        registry = registry_of(a, b)
        results: dict[str, SubagentResult] = {}
        runs: dict[str, Run] = {}

        async def one(name: str, task: str) -> None:
            async with registry.run(name, request(claude_home, task)) as run:
                runs[name] = run
                if name == "a":
                    registry.unregister("a")  # a run already handed out stays valid
                results[name] = await run.result()

        async with anyio.create_task_group() as group:
            group.start_soon(one, "a", "task for A")
            group.start_soon(one, "b", "task for B")
    assert {name: bare(result) for name, result in results.items()} == {
        "a": SubagentResult(output="answer from A", stop_reason=StopReason.COMPLETED),
        "b": SubagentResult(output="answer from B", stop_reason=StopReason.COMPLETED),
    }
    assert runs["a"].id != runs["b"].id
    child_runsa = internals(runs["a"]).process
    assert child_runsa is not None
    child_runsb = internals(runs["b"]).process
    assert child_runsb is not None
    assert child_runsa.pid != child_runsb.pid
    assert mock_model.model_requests[0].user_texts()[-1].endswith("task for A")
    assert other_model.model_requests[0].user_texts()[-1].endswith("task for B")
    assert all(run.quiescent for run in runs.values())


# -- bypassPermissions -----------------------------------------------------------------------


async def test_bypass_mode_runs_a_writing_tool_without_asking(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    target = claude_home.work / "written.txt"
    mock_model.script(Shell(f"touch {target}"), Text("Written."))
    # The CLI refuses bypassPermissions as root unless told it runs in a sandbox.
    sandbox: dict[str, str | None] = {"IS_SANDBOX": "1"} if os.geteuid() == 0 else {}
    provider = claude_provider(claude_home, mock_model, permission_mode="bypassPermissions", env=sandbox)
    result = await run_once(provider, claude_home)
    assert bare(result) == SubagentResult(output="Written.", stop_reason=StopReason.COMPLETED)
    assert target.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the CLI refuses bypassPermissions only as root")
async def test_a_cli_that_refuses_to_start_fails_the_start_with_its_exit_code(
    claude_home: ClaudeHome, mock_model: MockModelServer
) -> None:
    provider = claude_provider(
        claude_home, mock_model, permission_mode="bypassPermissions", env={"IS_SANDBOX": None}
    )
    with pytest.raises(supervisor.StartFailed) as info:
        await run_once(provider, claude_home)
    assert (
        str(info.value)
        == "Subagent failure (provider: Claude Code; stage: process; category: process; exit code: 1)"
    )
    assert info.value.quiescent is True
    assert mock_model.model_requests == []
