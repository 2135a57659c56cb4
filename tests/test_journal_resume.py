"""Cold resume from the journal (a conversation continued by a later process): ``Registry.resume``,
``subagents chat --resume`` and its refusals, with the built-in example agent keeping its sessions
on disk (real processes)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor import (
    ConfigurationError,
    ConversationOver,
    InvalidRequest,
    Registry,
    SubagentRequest,
)
from supervisor.journal._read import INTERRUPTED, list_runs, read_run
from supervisor.providers.acp import Provider, example_agent_config
from tests.test_journal import CLI, GONE_WITHIN, wait_children_gone, wait_for_turn


def registry(journal: Path, sessions: Path, **keys: Any) -> Registry:
    reg = Registry(journal=journal)
    env = {"SUBAGENT_EXAMPLE_SESSIONS": str(sessions), **keys.pop("env", {})}
    reg.register(Provider(example_agent_config(env=env, **keys)))
    return reg


def test_a_closed_conversation_is_resumed_in_a_new_child_under_its_run_id(tmp_path: Path) -> None:
    journal, sessions = tmp_path / "j.db", tmp_path / "sessions"
    sessions.mkdir()

    async def first() -> str:
        reg = registry(journal, sessions)
        request = SubagentRequest(task="the blue door", parent_cwd=tmp_path)
        async with reg, reg.run("acp", request, conversation=True) as run:
            await run.result()
        return run.id

    async def second(run_id: str) -> tuple[int, str, int, str]:
        reg = registry(journal, sessions)
        async with reg, reg.resume(run_id) as run:
            assert run.id == run_id
            before, state = run.turn, run.state
            result = await run.send("@recall")
        return before, state, run.turn, result.output

    run_id = anyio.run(first, backend="asyncio")
    before, state, after, output = anyio.run(second, run_id, backend="asyncio")
    assert (before, state, after) == (1, "idle", 2)
    assert output == "Earlier in this session you asked: the blue door"
    record = read_run(journal, run_id)
    assert record is not None
    assert (record.state, record.turns, record.resumes) == ("ended", 2, 1)
    assert [(t.number, t.state, t.stop_reason) for t in record.turn_records] == [
        (1, "settled", "completed"),
        (2, "settled", "completed"),
    ]
    wait_children_gone()


def run_async(function: Any, *args: Any) -> Any:
    return anyio.run(function, *args, backend="asyncio")


def journaled_conversation(tmp_path: Path, *, conversation: bool = True) -> tuple[Path, Path, str]:
    journal, sessions = tmp_path / "j.db", tmp_path / "sessions"
    sessions.mkdir(exist_ok=True)

    async def first() -> str:
        reg = registry(journal, sessions)
        request = SubagentRequest(task="the blue door", parent_cwd=tmp_path)
        async with reg, reg.run("acp", request, conversation=conversation) as run:
            await run.result()
        return run.id

    return journal, sessions, run_async(first)


def test_a_changed_config_is_refused_naming_the_provider(tmp_path: Path) -> None:
    journal, sessions, run_id = journaled_conversation(tmp_path)

    async def again() -> None:
        reg = registry(journal, sessions, env={"ANOTHER": "x"})
        async with reg.resume(run_id):
            raise AssertionError("resumed")

    with pytest.raises(ConfigurationError) as caught:
        run_async(again)
    assert str(caught.value) == (
        f'subagent provider "acp" is configured differently than when run {run_id} ran '
        "(its config digest changed): resume it with the same configuration"
    )


def test_a_one_shot_run_is_not_resumable(tmp_path: Path) -> None:
    journal, sessions, run_id = journaled_conversation(tmp_path, conversation=False)

    async def again() -> None:
        async with registry(journal, sessions).resume(run_id):
            raise AssertionError("resumed")

    with pytest.raises(ConversationOver) as caught:
        run_async(again)
    assert caught.value.reason == "not resumable"
    assert (
        str(caught.value) == "subagent conversation is over (provider: ACP; turn: 1; reason: not resumable)"
    )


def test_an_agent_that_lost_the_session_is_not_resumable_and_the_id_is_kept(tmp_path: Path) -> None:
    journal, sessions, run_id = journaled_conversation(tmp_path)
    for file in sessions.iterdir():
        file.unlink()  # the agent no longer has the session

    async def again() -> None:
        reg = registry(journal, sessions)
        async with reg, reg.resume(run_id):
            raise AssertionError("resumed")

    with pytest.raises(ConversationOver) as caught:
        run_async(again)
    assert caught.value.reason == "not resumable"
    record = read_run(journal, run_id)
    assert record is not None
    assert record.agent_session is not None  # kept: another try is possible
    assert (record.state, record.turns, record.end_reason) == ("ended", 1, "not resumable")
    wait_children_gone()


def test_unknown_ids_and_a_registry_without_a_journal_are_refused(tmp_path: Path) -> None:
    journal, sessions, _ = journaled_conversation(tmp_path)

    async def resume(reg: Registry, run_id: str) -> None:
        async with reg.resume(run_id):
            raise AssertionError("resumed")

    with pytest.raises(InvalidRequest) as caught:
        run_async(resume, registry(journal, sessions), "no-such-run")
    assert str(caught.value) == f"no run no-such-run in the journal {journal}"
    with pytest.raises(InvalidRequest) as caught:
        run_async(resume, Registry(), "x")
    assert str(caught.value) == "resuming a run needs a journal: Registry(journal=...)"


def test_a_run_whose_cwd_is_gone_is_refused(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    journal, _sessions, run_id = journaled_conversation(work)
    work_journal = journal
    (work / "sessions").rename(tmp_path / "sessions")
    moved = tmp_path / "moved.db"
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(str(work_journal) + suffix).rename(str(moved) + suffix)
    for child in work.iterdir():
        child.unlink()
    work.rmdir()

    async def again() -> None:
        async with registry(moved, tmp_path / "sessions").resume(run_id):
            raise AssertionError("resumed")

    with pytest.raises(InvalidRequest) as caught:
        run_async(again)
    assert str(caught.value) == f"the run's cwd is not an accessible directory: {work}"


# -- subagents chat --resume, after the first chat was SIGKILLed -------------------------------


def chat_env(journal: Path) -> dict[str, str]:
    return {**os.environ, "SUBAGENTS_JOURNAL": str(journal)}


def chat(tmp_path: Path, journal: Path, line: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One ``subagents chat`` in ``tmp_path``, journaled to ``journal``, saying ``line``."""
    return subprocess.run(
        [*CLI, "chat", *args],
        cwd=tmp_path,
        input=line,
        capture_output=True,
        text=True,
        timeout=180,
        env=chat_env(journal),
    )


def test_chat_sigkilled_mid_turn_is_resumed_by_chat_resume(tmp_path: Path) -> None:
    journal, sessions = tmp_path / "j.db", tmp_path / "sessions"
    sessions.mkdir()
    keep = ["--env", f"SUBAGENT_EXAMPLE_SESSIONS={sessions}"]
    first = subprocess.Popen(
        [*CLI, "chat", *keep],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=chat_env(journal),
    )
    try:
        assert first.stdin is not None
        assert first.stdout is not None
        first.stdin.write("the blue door\n")
        first.stdin.flush()
        assert first.stdout.readline() == "Hello! You asked: the blue door\n"
        first.stdin.write("@slow 60000\na turn the kill interrupts\n")
        first.stdin.flush()
        run_id = wait_for_turn(journal, 2, "running")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=GONE_WITHIN)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=GONE_WITHIN)
        for stream in (first.stdin, first.stdout):
            with contextlib.suppress(OSError):
                assert stream is not None
                stream.close()
    wait_children_gone()
    [record] = list_runs(journal)
    assert (record.id, record.state, record.turns) == (run_id, INTERRUPTED, 2)

    second = chat(tmp_path, journal, "@recall\n", *keep, "--resume", run_id, "--json")
    assert second.returncode == 0, second.stderr
    turn, end = (json.loads(line) for line in second.stdout.splitlines())
    # turn 2 was interrupted and is never sent again: the next one is turn 3, and it sees turn 1
    assert (turn["run_id"], turn["turn"], turn["stop_reason"]) == (run_id, 3, "completed")
    assert turn["output"].startswith("Earlier in this session you asked: the blue door")
    assert (end["run_id"], end["turns"], end["quiescent"]) == (run_id, 1, True)
    resumed = read_run(journal, run_id)
    assert resumed is not None
    assert (resumed.state, resumed.turns, resumed.resumes) == ("ended", 3, 1)
    assert [(t.number, t.state) for t in resumed.turn_records] == [
        (1, "settled"),
        (2, INTERRUPTED),
        (3, "settled"),
    ]
    wait_children_gone()


def test_chat_resume_with_a_changed_config_exits_2_naming_the_provider(tmp_path: Path) -> None:
    journal, sessions = tmp_path / "j.db", tmp_path / "sessions"
    sessions.mkdir()
    keep = ["--env", f"SUBAGENT_EXAMPLE_SESSIONS={sessions}"]
    done = chat(tmp_path, journal, "one\n", *keep, "--json")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout.splitlines()[0])["run_id"]
    changed = chat(tmp_path, journal, "two\n", *keep, "--env", "OTHER=1", "--resume", run_id)
    assert changed.returncode == 2
    assert changed.stderr == (
        f'subagents: subagent provider "acp" is configured differently than when run {run_id} ran '
        "(its config digest changed): resume it with the same configuration\n"
    )
    unknown = chat(tmp_path, journal, "two\n", *keep, "--resume", "no-such-run")
    assert (unknown.returncode, unknown.stderr) == (
        2,
        f"subagents: no run no-such-run in the journal {journal}\n",
    )


# -- MCP: send_subagent on a run id the server does not hold but the journal does --------------


def test_mcp_send_subagent_resumes_a_journaled_conversation(tmp_path: Path) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from supervisor.mcp._answers import result_facts
    from supervisor.providers.acp import EXAMPLE_AGENT

    journal, sessions = tmp_path / "j.db", tmp_path / "sessions"
    sessions.mkdir()
    config = tmp_path / "agents.toml"
    config.write_text(
        f'[[provider]]\nkind = "acp"\nname = "example"\ncommand = {json.dumps(sys.executable)}\n'
        f'args = ["-I", {json.dumps(str(EXAMPLE_AGENT))}]\n'
        f"env = {{ SUBAGENT_EXAMPLE_SESSIONS = {json.dumps(str(sessions))} }}\n"
    )
    env = {**os.environ, "SUBAGENTS_JOURNAL": str(journal)}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor.cli", "mcp", "--config", str(config)],
        cwd=str(tmp_path),
        env=env,
    )

    async def call(tool: str, arguments: dict[str, Any]) -> tuple[str, Any, bool]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(tool, arguments)
            (content,) = result.content
            assert content.type == "text"
            return content.text, result_facts(result), bool(result.is_error)

    async def main() -> None:
        # one server: turn 1, then the server goes away (the conversation is closed with it)
        _, first, is_error = await call("run_subagent", {"task": "the blue door", "keep_alive": True})
        assert not is_error
        run_id = first["run_id"]
        # another server, which never held the run: the journal has it
        text, second, is_error = await call("send_subagent", {"run_id": run_id, "task": "@recall"})
        assert not is_error, text
        assert (second["run_id"], second["turn"], second["stop_reason"]) == (run_id, 2, "completed")
        assert second["output"] == "Earlier in this session you asked: the blue door"
        text, _, is_error = await call("send_subagent", {"run_id": "no-such-run", "task": "hi"})
        assert is_error
        assert text == "no subagent run with id 'no-such-run'"

    anyio.run(main, backend="asyncio")
    [record] = list_runs(journal)
    assert (record.state, record.turns, record.resumes) == ("ended", 2, 1)
    wait_children_gone()


def test_chat_resume_of_a_session_the_agent_lost_is_one_line_exit_1(tmp_path: Path) -> None:
    journal, sessions = tmp_path / "j.db", tmp_path / "sessions"
    sessions.mkdir()
    keep = ["--env", f"SUBAGENT_EXAMPLE_SESSIONS={sessions}"]
    done = chat(tmp_path, journal, "one\n", *keep, "--json")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout.splitlines()[0])["run_id"]
    for file in sessions.iterdir():
        file.unlink()
    again = chat(tmp_path, journal, "two\n", *keep, "--resume", run_id)
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr.endswith(
        "subagents: subagent conversation is over (provider: ACP; turn: 1; reason: not resumable)\n"
    )
    assert "Traceback" not in again.stderr
    wait_children_gone()
