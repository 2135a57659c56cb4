"""The journal's cold resume against the real Codex app-server and the mock model server:
``subagents chat`` runs turn 1 (journaled, so its thread is kept on disk), is SIGKILLed, and
``subagents chat --resume RUN_ID`` continues; turn 2's model request carries turn 1's exchange."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from supervisor.journal._read import INTERRUPTED, list_runs, read_run
from tests.mockmodel import MockModelServer, Text
from tests.support.codex import FAST
from tests.support.peers import PeerLaunch
from tests.test_journal import CLI, GONE_WITHIN, wait_children_gone

pytestmark = [pytest.mark.real_peer]

TURN_1 = "Remember the word cobalt."
ANSWER_1 = "Noted: cobalt."
TURN_2 = "Which word did I ask you to remember?"
ANSWER_2 = "You asked me to remember cobalt."


def config_for(launch: PeerLaunch, path: Path) -> Path:
    lines = [
        "[[provider]]",
        'kind = "codex"',
        'name = "codex"',
        f"codex_path = {json.dumps(launch.argv[0])}",
        'stderr = "discard"',
        *(f"{key} = {value}" for key, value in FAST.items()),
        "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in launch.env.items()) + " }",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_journaled_codex_chat_killed_after_turn_1_is_resumed_by_chat_resume(
    mock: MockModelServer, launch: PeerLaunch, tmp_path: Path
) -> None:
    mock.script(Text(ANSWER_1), Text(ANSWER_2))
    journal = tmp_path / "journal.db"
    config = config_for(launch, tmp_path / "codex.toml")
    env = {**os.environ, "SUBAGENTS_JOURNAL": str(journal)}
    first = subprocess.Popen(
        [*CLI, "chat", "--config", str(config), "--json"],
        cwd=launch.cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert first.stdin is not None
        assert first.stdout is not None
        first.stdin.write(TURN_1 + "\n")
        first.stdin.flush()
        turn_1 = json.loads(first.stdout.readline())
        assert (turn_1["turn"], turn_1["stop_reason"], turn_1["output"]) == (1, "completed", ANSWER_1)
        run_id = turn_1["run_id"]
        first.send_signal(signal.SIGKILL)  # idle after turn 1: the host dies, its tree with it
        first.wait(timeout=GONE_WITHIN)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=GONE_WITHIN)
        for stream in (first.stdin, first.stdout):
            assert stream is not None
            stream.close()
    wait_children_gone()
    [record] = list_runs(journal)
    assert (record.id, record.kind, record.state, record.turns) == (run_id, "codex", INTERRUPTED, 1)

    second = subprocess.run(
        [*CLI, "chat", "--config", str(config), "--resume", run_id, "--json"],
        cwd=launch.cwd,
        input=TURN_2 + "\n",
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert second.returncode == 0, second.stderr
    turn_2 = json.loads(second.stdout.splitlines()[0])
    assert (turn_2["run_id"], turn_2["turn"], turn_2["stop_reason"]) == (run_id, 2, "completed")
    assert turn_2["output"] == ANSWER_2
    request_2 = mock.model_requests[-1]
    assert TURN_2 in request_2.user_texts()
    assert TURN_1 in request_2.user_texts()  # turn 1's question
    assert ANSWER_1 in request_2.json()  # and turn 1's answer
    resumed = read_run(journal, run_id)
    assert resumed is not None
    assert (resumed.state, resumed.turns, resumed.resumes) == ("ended", 2, 1)
    wait_children_gone()
