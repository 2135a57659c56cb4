"""Conversations over ``subagents mcp`` (one turn at a time, the child kept between them):
``keep_alive``, ``send_subagent``, ``close_subagent``, the ``idle`` state, the slot rule and every
bad input, driven by the official MCP SDK's client over real stdio (raw frames where the client must
vanish).

The agent is the built-in example agent (it remembers its session: ``@recall``; it reports
usage: ``@usage``; it can stall a turn: ``@slow``; it can die in a turn: ``@exit``).  The
leak guard proves every tree is gone after each test; ``tagged`` proves it mid-test.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession

from supervisor.mcp._answers import conversation_line, result_facts
from tests.conftest import tagged
from tests.mcp.test_server import EXAMPLE_ANSWER_START, call, client, write_config
from tests.support.raw_mcp import RawMcp, facts

pytestmark = pytest.mark.anyio

SLOW = "stall\n@slow 600000"  # streams its first chunk, then waits until the turn is cancelled
EVENTUALLY = 60.0  # a bound for "eventually", never a claim about speed


async def states(session: ClientSession) -> dict[str, tuple[str, str, int]]:
    _, listed, _ = await call(session, "list_subagents", {})
    return {r["run_id"]: (r["state"], r["stage"], r["turn"]) for r in listed["runs"]}


async def until_state(session: ClientSession, run_id: str, *wanted: tuple[str, str]) -> tuple[str, str, int]:
    """Poll ``list_subagents`` until the run is in one of ``wanted`` (state, stage) pairs."""
    with anyio.fail_after(EVENTUALLY):
        while True:
            state, stage, turn = (await states(session))[run_id]
            if (state, stage) in wanted or (state, "*") in wanted:
                return state, stage, turn
            await anyio.sleep(0.05)


async def until_running(session: ClientSession) -> dict[str, tuple[str, str, int]]:
    """Poll ``list_subagents`` until its one run is in its prompt."""
    with anyio.fail_after(EVENTUALLY):
        while True:
            runs = await states(session)
            if runs and next(iter(runs.values()))[:2] == ("running", "prompt"):
                return runs
            await anyio.sleep(0.05)


def still_open(answer: str, run_id: str) -> str:
    """What the model reads of a conversation's turn: the answer, then the fixed line that
    tells it how to go on (a client that shows text alone must let its model send again)."""
    return f"{answer}\n\n{conversation_line(run_id)}"


async def test_a_kept_run_answers_each_turn_remembers_its_session_and_closes(tmp_path: Path) -> None:
    stages: list[str | None] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        stages.append(message)

    async with client(cwd=tmp_path) as session:
        text, first, is_error = await call(
            session, "run_subagent", {"task": "what is 2+2?", "keep_alive": True}
        )
        assert not is_error
        run_id = first["run_id"]
        assert text == still_open("Hello! You asked: what is 2+2?", run_id)
        assert run_id in text.splitlines()[-1]
        assert (first["turn"], first["state"], first["ended"], first["resources"]) == (1, "idle", None, None)
        assert tagged(run_id)  # the child waits for the next turn
        assert (await states(session))[run_id] == ("idle", "prompt", 1)

        result = await session.call_tool(
            "send_subagent", {"run_id": run_id, "task": "and 3+3?\n@usage"}, progress_callback=progress
        )
        assert not result.is_error
        second = result_facts(result)
        assert second is not None
        assert second["output"] == "Hello! You asked: and 3+3?"
        assert (second["turn"], second["state"], second["stop_reason"]) == (2, "idle", "completed")
        assert second["usage"] == {
            "input_tokens": 2,
            "output_tokens": 5,
            "cached_input_tokens": None,
            "cost_usd": 0.0007,
        }
        assert stages[0] is not None
        assert " · turn " in stages[0], stages  # the run's progress line, sent at once

        text, third, _ = await call(session, "send_subagent", {"run_id": run_id, "task": "@recall"})
        assert text == still_open("Earlier in this session you asked: what is 2+2?; and 3+3?", run_id)
        assert third["turn"] == 3

        text, closed, is_error = await call(session, "close_subagent", {"run_id": run_id})
        assert not is_error
        assert text == "subagent conversation is over (provider: ACP; turn: 3; reason: closed)"
        assert closed["state"] == "settled"
        assert closed["ended"] == text
        assert (closed["turn"], closed["stop_reason"], closed["output"]) == (3, "completed", third["output"])
        assert not tagged(run_id)  # the tree is gone before close_subagent answers

        text, _, is_error = await call(session, "send_subagent", {"run_id": run_id, "task": "still there?"})
        assert is_error
        assert text == "subagent conversation is over (provider: ACP; turn: 3; reason: closed)"
        _, again, is_error = await call(session, "close_subagent", {"run_id": run_id})  # idempotent
        assert not is_error
        assert again == closed
        assert (await states(session))[run_id] == ("settled", "teardown", 3)


async def test_a_send_during_a_turn_is_refused_and_cancel_keeps_the_conversation(tmp_path: Path) -> None:
    async with client(cwd=tmp_path) as session:
        _, started, _ = await call(session, "start_subagent", {"task": SLOW, "keep_alive": True})
        run_id = started["run_id"]
        await until_state(session, run_id, ("running", "prompt"))
        text, structured, is_error = await call(session, "send_subagent", {"run_id": run_id, "task": "next"})
        assert (text, structured, is_error) == ("a turn is already running", None, True)

        text, cancelled, is_error = await call(session, "cancel_subagent", {"run_id": run_id})
        assert is_error
        assert text.startswith("subagent run was cancelled")
        assert text.endswith(f"\n\n{conversation_line(run_id)}")
        assert (cancelled["stop_reason"], cancelled["state"], cancelled["turn"]) == ("aborted", "idle", 1)
        assert cancelled["diagnostic"] is None

        text, second, is_error = await call(session, "send_subagent", {"run_id": run_id, "task": "next"})
        assert not is_error
        assert text == still_open("Hello! You asked: next", run_id)
        assert second["turn"] == 2

        # A cancelled send_subagent request cancels its turn; the conversation stays open.
        with anyio.fail_after(EVENTUALLY):
            async with anyio.create_task_group() as tg:

                async def send_slow() -> None:
                    await session.call_tool("send_subagent", {"run_id": run_id, "task": SLOW})

                tg.start_soon(send_slow)
                await until_state(session, run_id, ("running", "prompt"))
                tg.cancel_scope.cancel()
        _, waited, _ = await call(session, "wait_subagent", {"run_id": run_id, "timeout_s": EVENTUALLY})
        assert (waited["state"], waited["stop_reason"], waited["turn"]) == ("idle", "aborted", 3)
        text, fourth, _ = await call(session, "send_subagent", {"run_id": run_id, "task": "@recall"})
        assert fourth["turn"] == 4
        assert text == still_open("Earlier in this session you asked: stall; next; stall", run_id)
        await call(session, "close_subagent", {"run_id": run_id})
        assert not tagged(run_id)


async def test_close_during_a_turn_cancels_it_and_takes_the_tree_down(tmp_path: Path) -> None:
    async with client(cwd=tmp_path) as session:
        _, started, _ = await call(session, "start_subagent", {"task": SLOW, "keep_alive": True})
        run_id = started["run_id"]
        await until_state(session, run_id, ("running", "prompt"))
        text, closed, is_error = await call(session, "close_subagent", {"run_id": run_id})
        assert not is_error
        assert text == "subagent conversation is over (provider: ACP; turn: 1; reason: closed)"
        assert (closed["stop_reason"], closed["state"]) == ("aborted", "settled")
        assert not tagged(run_id)
        _, waited, _ = await call(session, "wait_subagent", {"run_id": run_id})
        assert waited == closed


async def test_a_child_that_dies_in_a_turn_ends_the_conversation_with_its_exit_facts(tmp_path: Path) -> None:
    async with client(cwd=tmp_path) as session:
        _, first, _ = await call(session, "run_subagent", {"task": "hello", "keep_alive": True})
        run_id = first["run_id"]
        text, final, is_error = await call(session, "send_subagent", {"run_id": run_id, "task": "x\n@exit 3"})
        assert is_error
        assert final["state"] == "settled"
        assert final["stop_reason"] == "error"
        assert final["diagnostic"] == (
            "Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 3)"
        )
        assert (
            final["ended"]
            == "subagent conversation is over (provider: ACP; turn: 2; reason: child exited; exit code: 3)"
        )
        assert text.startswith("subagent run failed\nDiagnostic: Subagent failure")
        assert not tagged(run_id)  # gone before the answer
        text, _, is_error = await call(session, "send_subagent", {"run_id": run_id, "task": "again"})
        assert is_error
        assert text == final["ended"]


async def test_a_child_killed_between_turns_ends_the_conversation(tmp_path: Path) -> None:
    async with client(cwd=tmp_path) as session:
        _, first, _ = await call(session, "run_subagent", {"task": "hello", "keep_alive": True})
        run_id = first["run_id"]
        for process in tagged(run_id):
            process.send_signal(signal.SIGKILL)
        await until_state(session, run_id, ("settled", "*"))
        assert not tagged(run_id)
        text, _, is_error = await call(session, "send_subagent", {"run_id": run_id, "task": "again"})
        assert is_error
        assert (
            text
            == "subagent conversation is over (provider: ACP; turn: 1; reason: child exited; signal: SIGKILL)"
        )
        text, closed, is_error = await call(session, "close_subagent", {"run_id": run_id})
        assert (text, closed["state"], is_error) == (closed["ended"], "settled", False)


async def test_an_idle_conversation_holds_no_slot_and_a_send_waits_for_one(tmp_path: Path) -> None:
    async with client("--max-concurrent", "1", cwd=tmp_path) as session:
        _, kept, _ = await call(session, "run_subagent", {"task": "hello", "keep_alive": True})
        run_id = kept["run_id"]
        # Idle, it does not count: a one-shot run gets the one slot at once.
        text, _, is_error = await call(session, "run_subagent", {"task": "say hello"})
        assert not is_error
        assert text.startswith(EXAMPLE_ANSWER_START)

        _, busy, _ = await call(session, "start_subagent", {"task": SLOW})
        await until_state(session, busy["run_id"], ("running", "prompt"))
        answers: list[tuple[str, Any, bool]] = []
        with anyio.fail_after(EVENTUALLY):
            async with anyio.create_task_group() as tg:

                async def send() -> None:
                    answers.append(await call(session, "send_subagent", {"run_id": run_id, "task": "next"}))

                tg.start_soon(send)
                await until_state(session, run_id, ("queued", "prompt"))  # its turn waits for the slot
                text, _structured, is_error = await call(
                    session, "send_subagent", {"run_id": run_id, "task": "x"}
                )
                assert (text, is_error) == ("a turn is already running", True)
                await call(session, "cancel_subagent", {"run_id": busy["run_id"]})
        ((text, second, is_error),) = answers
        assert (text, second["turn"], is_error) == (still_open("Hello! You asked: next", run_id), 2, False)

        # A turn in a conversation takes the slot: a one-shot run then waits, queued.
        _, slow_turn, _ = await call(session, "start_subagent", {"task": "hi"})
        await call(session, "wait_subagent", {"run_id": slow_turn["run_id"]})
        async with anyio.create_task_group() as tg:

            async def slow_send() -> None:
                await call(session, "send_subagent", {"run_id": run_id, "task": SLOW})

            tg.start_soon(slow_send)
            await until_state(session, run_id, ("running", "prompt"))
            _, queued, _ = await call(session, "start_subagent", {"task": "say hello"})
            assert (await states(session))[queued["run_id"]][0] == "queued"
            _, cancelled, _ = await call(session, "cancel_subagent", {"run_id": run_id})
            assert (cancelled["stop_reason"], cancelled["turn"]) == ("aborted", 3)
        _, done, _ = await call(
            session, "wait_subagent", {"run_id": queued["run_id"], "timeout_s": EVENTUALLY}
        )
        assert done["stop_reason"] == "completed"
        await call(session, "close_subagent", {"run_id": run_id})


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("send_subagent", {"run_id": "nope", "task": "t"}, "no subagent run with id 'nope'"),
        ("close_subagent", {"run_id": "nope"}, "no subagent run with id 'nope'"),
        ("send_subagent", {"task": "t"}, "run_id must be a string"),
        ("close_subagent", {}, "run_id must be a string"),
        ("send_subagent", {"run_id": "nope", "task": "t", "x": 1}, "unknown argument(s): x"),
        ("run_subagent", {"task": "t", "keep_alive": "yes"}, "keep_alive must be a boolean"),
        ("start_subagent", {"task": "t", "keep_alive": 1}, "keep_alive must be a boolean"),
    ],
)
async def test_bad_conversation_arguments_are_one_line_error_results(
    tmp_path: Path, tool: str, arguments: dict[str, Any], message: str
) -> None:
    async with client(cwd=tmp_path) as session:
        text, structured, is_error = await call(session, tool, arguments)
        _, listed, _ = await call(session, "list_subagents", {})
    assert (text, structured, is_error) == (message, None, True)
    assert listed["runs"] == []  # nothing spawned


async def test_conversation_tools_on_a_one_shot_run_or_with_a_blank_task_are_refused(tmp_path: Path) -> None:
    async with client(cwd=tmp_path) as session:
        _, kept, _ = await call(session, "run_subagent", {"task": "hello", "keep_alive": True})
        _, once, _ = await call(session, "run_subagent", {"task": "hello"})
        refusals = [
            await call(session, "send_subagent", {"run_id": once["run_id"], "task": "t"}),
            await call(session, "close_subagent", {"run_id": once["run_id"]}),
            await call(session, "send_subagent", {"run_id": kept["run_id"], "task": "  "}),
            await call(session, "send_subagent", {"run_id": kept["run_id"]}),
        ]
        assert refusals == [
            (f"subagent run {once['run_id']} was not started with keep_alive", None, True),
            (
                f"subagent run {once['run_id']} was not started with keep_alive (cancel_subagent cancels it)",
                None,
                True,
            ),
            ("task must be a non-empty string", None, True),
            ("task must be a non-empty string", None, True),
        ]
        assert (await states(session))[kept["run_id"]] == ("idle", "prompt", 1)  # nothing changed
        await call(session, "close_subagent", {"run_id": kept["run_id"]})


def test_a_client_that_goes_away_ends_every_conversation(tmp_path: Path) -> None:
    """Raw frames: one idle conversation and one mid-turn, then stdin closes; exit 0, no tree left."""
    server = RawMcp(cwd=tmp_path, stderr=tmp_path / "stderr")
    try:
        idle = server.call("run_subagent", '{"task": "hello", "keep_alive": true}')
        idle_id = facts(idle)["run_id"]
        busy = server.call("start_subagent", '{"task": "stall\\n@slow 600000", "keep_alive": true}')
        busy_id = facts(busy)["run_id"]
        deadline = time.monotonic() + EVENTUALLY  # a bound for "eventually"
        while True:
            listed = facts(server.call("list_subagents", "{}"))["runs"]
            if {r["run_id"]: (r["state"], r["stage"]) for r in listed}[busy_id] == ("running", "prompt"):
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert tagged(idle_id)
        assert tagged(busy_id)
    finally:
        status = server.close()
    assert status == 0
    assert not tagged(idle_id)
    assert not tagged(busy_id)


async def test_an_idle_timeout_ends_the_conversation_and_its_tree(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", agent={})
    config.write_text(config.read_text() + "idle_timeout_ms = 200\n")
    async with client("--config", str(config), cwd=tmp_path) as session:
        _, first, _ = await call(session, "run_subagent", {"task": "hello", "keep_alive": True})
        run_id = first["run_id"]
        assert first["state"] == "idle"
        await until_state(session, run_id, ("settled", "*"))  # no turn for idle_timeout_ms
        assert not tagged(run_id)
        text, _, is_error = await call(session, "send_subagent", {"run_id": run_id, "task": "again"})
        assert (text, is_error) == (
            "subagent conversation is over (provider: ACP; turn: 1; reason: idle timeout)",
            True,
        )


async def test_a_cancelled_keep_alive_call_closes_the_conversation_it_never_named(tmp_path: Path) -> None:
    """The caller of a cancelled run_subagent never learnt the run id: nothing may stay alive."""
    async with client(cwd=tmp_path) as session:
        with anyio.fail_after(EVENTUALLY):
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    await session.call_tool("run_subagent", {"task": SLOW, "keep_alive": True})

                tg.start_soon(run)
                runs = await until_running(session)
                tg.cancel_scope.cancel()
        (run_id,) = runs
        _, final, _ = await call(session, "wait_subagent", {"run_id": run_id, "timeout_s": EVENTUALLY})
        assert (final["state"], final["stop_reason"]) == ("settled", "aborted")
        assert final["ended"] == "subagent conversation is over (provider: ACP; turn: 1; reason: closed)"
        assert not tagged(run_id)


async def test_close_during_the_start_rolls_it_back_at_once(tmp_path: Path) -> None:
    config = write_config(tmp_path / "c.toml", agent={"HANG": "initialize"})
    config.write_text(config.read_text() + "start_timeout_ms = 600000\n")
    async with client("--config", str(config), cwd=tmp_path) as session:
        _, started, _ = await call(session, "start_subagent", {"task": "t", "keep_alive": True})
        run_id = started["run_id"]
        await until_state(session, run_id, ("running", "initialize"))
        with anyio.fail_after(EVENTUALLY):  # not the ten-minute start timeout
            text, closed, is_error = await call(session, "close_subagent", {"run_id": run_id})
        assert (closed["state"], closed["stop_reason"], closed["ended"]) == ("settled", "aborted", None)
        assert text.startswith("subagent run was cancelled")
        assert not is_error
        assert not tagged(run_id)


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_signal_ends_every_conversation(tmp_path: Path, stop: str) -> None:
    """An idle conversation and a second one mid-turn; then a stop signal, stdin still open:
    exit 0, no tree left (the same end as a closed stdin or stdout: ``test_stopping``)."""
    server = RawMcp(cwd=tmp_path, stderr=tmp_path / "stderr")
    try:
        idle = facts(server.call("run_subagent", '{"task": "hello", "keep_alive": true}'))
        busy = server.call("start_subagent", '{"task": "stall\\n@slow 600000", "keep_alive": true}')
        busy_id = facts(busy)["run_id"]
        deadline = time.monotonic() + EVENTUALLY  # a bound for "eventually"
        while facts(server.call("list_subagents", "{}"))["runs"][1]["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert tagged(idle["run_id"])
        server.process.send_signal(signal.Signals[stop])
        assert server.process.wait(timeout=120) == 0
    finally:
        status = server.close()
    assert status == 0
    assert not tagged(idle["run_id"])
    assert not tagged(busy_id)
