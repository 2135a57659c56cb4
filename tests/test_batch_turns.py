"""Batch items that converse (one turn at a time, on one child): ``turns`` after the ``task``, every
turn in the record.

Real CLI processes and the real example ACP agent (it remembers its session, so ``@recall``
proves the turns reached the same child); the Python API with the scripted provider for
the kind that cannot converse.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor import AbortSignal, BatchError, BatchRecord, Capabilities, Registry, batch
from supervisor.batching._jobs import BatchEvents
from tests.support.scripted import ScriptedProvider
from tests.test_batch import RECORD_KEYS, by_id, subagents_batch, supervised_children, write_input

TURN_KEYS = {"turn", "stop_reason", "output", "diagnostic", "usage"}


def turns_of(record: dict[str, Any]) -> list[tuple[int, str, str, str | None]]:
    assert all(set(turn) == TURN_KEYS for turn in record["turns"])
    return [(t["turn"], t["stop_reason"], t["output"], t["diagnostic"]) for t in record["turns"]]


def test_every_turn_goes_to_the_same_child_and_the_record_carries_each(tmp_path: Path) -> None:
    source = write_input(
        tmp_path / "in.jsonl",
        {"id": "talk", "task": "what is 2+2?", "turns": ["and 3+3?\n@usage", "@recall"]},
        {"id": "once", "task": "say hello"},
        {"id": "empty", "task": "alone", "turns": []},
    )
    proc = subagents_batch(str(source), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = by_id(proc.stdout)
    talk = found["talk"]
    assert set(talk) == RECORD_KEYS | {"turns"}
    assert turns_of(talk) == [
        (1, "completed", "Hello! You asked: what is 2+2?", None),
        (2, "completed", "Hello! You asked: and 3+3?", None),
        (3, "completed", "Earlier in this session you asked: what is 2+2?; and 3+3?", None),
    ]
    # usage where the agent reported it: 2 words in, 5 out, at 0.0001 USD a token
    assert [t["usage"] for t in talk["turns"]] == [
        None,
        {"input_tokens": 2, "output_tokens": 5, "cached_input_tokens": None, "cost_usd": 0.0007},
        None,
    ]
    # the top level is the last turn's; the run's facts are the whole conversation's
    assert (talk["stop_reason"], talk["output"], talk["diagnostic"], talk["usage"]) == (
        "completed",
        "Earlier in this session you asked: what is 2+2?; and 3+3?",
        None,
        None,
    )
    assert (talk["started"], talk["quiescent"], talk["exit_code"], talk["signal"]) == (True, True, 0, None)
    assert set(found["once"]) == RECORD_KEYS  # a one-shot record has no turns
    assert found["once"]["usage"] is None
    assert turns_of(found["empty"]) == [(1, "completed", "Hello! You asked: alone", None)]
    assert proc.stderr.splitlines()[-1].startswith("3 completed, 0 failed, 0 cancelled in ")
    assert supervised_children() == []


def test_a_failed_turn_leaves_the_conversation_open_and_fails_the_item(tmp_path: Path) -> None:
    source = write_input(tmp_path / "in.jsonl", {"id": "f", "task": "one", "turns": ["@fail", "@recall"]})
    proc = subagents_batch(str(source), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    record = by_id(proc.stdout)["f"]
    assert turns_of(record) == [
        (1, "completed", "Hello! You asked: one", None),
        (2, "error", "Hello! You sent me directives but no task.", record["turns"][1]["diagnostic"]),
        (3, "completed", "Earlier in this session you asked: one", None),
    ]
    assert record["turns"][1]["diagnostic"].startswith("Subagent failure (provider: ACP; stage: prompt; ")
    assert record["stop_reason"] == "completed"  # the last turn's, as the contract says
    assert proc.stderr.splitlines()[-1].startswith(
        "0 completed, 1 failed, 0 cancelled in "
    )  # not every turn did


def test_a_turn_after_the_child_died_is_an_error_entry_and_nothing_is_left(tmp_path: Path) -> None:
    source = write_input(
        tmp_path / "in.jsonl", {"id": "d", "task": "one", "turns": ["@exit 3", "never sent", "nor this"]}
    )
    proc = subagents_batch(str(source), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    record = by_id(proc.stdout)["d"]
    over = "subagent conversation is over (provider: ACP; turn: 2; reason: child exited; exit code: 3)"
    assert turns_of(record) == [
        (1, "completed", "Hello! You asked: one", None),
        (
            2,
            "error",
            "Hello! You sent me directives but no task.",
            "Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 3)",
        ),
        (3, "error", "", over),  # the turn that could not be sent; the ones after it are not tried
    ]
    assert (record["stop_reason"], record["output"], record["diagnostic"]) == ("error", "", over)
    assert (record["exit_code"], record["quiescent"]) == (3, True)
    assert supervised_children() == []


def test_bad_turns_are_error_records_and_the_batch_goes_on(tmp_path: Path) -> None:
    source = write_input(
        tmp_path / "in.jsonl",
        {"id": "a", "task": "x", "turns": "not a list"},
        {"id": "b", "task": "x", "turns": ["fine", 7]},
        {"id": "c", "task": "x", "turns": ["fine", "  "]},
        {"id": "d", "task": "x", "turns": None},
        {"id": "e", "task": "x", "turn": ["misspelt"]},
        {"id": "ok", "task": "x", "turns": ["y"]},
    )
    proc = subagents_batch(str(source), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    found = by_id(proc.stdout)
    errors = {key: value["error"] for key, value in found.items() if "error" in value}
    assert errors == {
        "a": "turns: must be a list of strings",
        "b": "turns.1: must be a string",
        "c": "turns.1: the task is blank",
        "e": "turn: unknown key",
    }
    assert found["ok"]["stop_reason"] == "completed"
    assert "turns" not in found["d"]  # null is an absent key, as for the other optional keys


@pytest.mark.anyio
async def test_a_kind_that_cannot_converse_is_an_error_record_before_anything_spawns(tmp_path: Path) -> None:
    registry = Registry()
    registry.register(ScriptedProvider(capabilities=Capabilities()))
    started: list[str] = []
    items: list[dict[str, Any]] = [{"id": "t", "task": "x", "turns": ["y"]}, {"id": "one", "task": "x"}]
    found = [
        o
        async for o in batch(
            items, registry=registry, cwd=tmp_path, events=BatchEvents(started=started.append)
        )
    ]
    by = {o.id: o for o in found}
    assert by["t"] == BatchError(
        id="t", error='turns: subagent provider "scripted" does not support the "conversation" capability'
    )
    assert isinstance(by["one"], BatchRecord)
    assert by["one"].completed
    assert started == ["one"]


@pytest.mark.anyio
async def test_the_python_api_returns_turns_as_models(tmp_path: Path) -> None:
    found = [o async for o in batch([{"id": "p", "task": "a", "turns": ["b"]}], cwd=tmp_path)]
    [record] = found
    assert isinstance(record, BatchRecord)
    assert record.turns is not None
    assert [(t.turn, t.output) for t in record.turns] == [
        (1, "Hello! You asked: a"),
        (2, "Hello! You asked: b"),
    ]
    assert record.completed
    assert json.loads(json.dumps(record.as_dict()))["turns"][1]["turn"] == 2


@pytest.mark.anyio
async def test_aborting_mid_conversation_writes_no_record_and_leaves_nothing(tmp_path: Path) -> None:
    """The abort arrives while turn 2 runs (the agent streams slowly): the item did not finish."""
    abort = AbortSignal()
    seen: list[str] = []
    cancelled: list[str] = []
    items = [{"id": "slow", "task": "a", "turns": ["@slow 600000\nb", "c"]}]

    events = BatchEvents(started=seen.append, cancelled=cancelled.append)
    found: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def consume() -> None:
            found.extend([o async for o in batch(items, cwd=tmp_path, abort=abort, events=events)])

        tg.start_soon(consume)
        while not events.live:  # noqa: ASYNC110 - the engine exposes no event for a run's start
            await anyio.sleep(0.01)
        [run] = list(events.live)
        while run.turn < 2:  # noqa: ASYNC110 - no event for a send; the turn number is the fact
            await anyio.sleep(0.01)
        await run.output_arrived()
        abort.abort()
    assert found == []
    assert cancelled == ["slow"]
    assert run.quiescent is True
    assert supervised_children() == []


def test_ctrl_c_mid_conversation_keeps_finished_records_only(tmp_path: Path) -> None:
    source = write_input(
        tmp_path / "in.jsonl",
        {"id": "quick", "task": "a", "turns": ["b"]},
        {"id": "slow", "task": "a", "turns": ["@slow 600000\nb"]},
    )
    cli = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "batch", str(source), "--concurrency", "1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cli.stdout is not None
    first = json.loads(cli.stdout.readline())  # quick ran first (concurrency 1): slow runs now
    assert first["id"] == "quick"
    cli.send_signal(signal.SIGINT)
    rest, _ = cli.communicate(timeout=120)
    assert cli.returncode == 130
    assert rest == ""
    assert supervised_children() == []
