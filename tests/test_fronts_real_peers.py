"""``subagents chat`` and a batch item's ``turns`` against the real ACP agents (codex-acp,
claude-agent-acp), with the mock model server on 127.0.0.1 as the only fake: each line (each
turn) reaches the same agent session, whose second model request carries the first turn."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mockmodel import MockModelServer, Text
from tests.support import peers, skip_module_without_acp_peers
from tests.test_batch import supervised_children

pytestmark = [pytest.mark.real_peer]

skip_module_without_acp_peers()

PEERS: dict[str, Callable[..., peers.PeerLaunch]] = {
    "codex-acp": peers.codex_acp_launch,
    "claude-agent-acp": peers.claude_agent_acp_launch,
}


@pytest.fixture
def server() -> Iterator[MockModelServer]:
    with MockModelServer() as srv:
        yield srv


@pytest.fixture(params=sorted(PEERS))
def launch(
    request: pytest.FixtureRequest, server: MockModelServer, tmp_path: Path
) -> Iterator[peers.PeerLaunch]:
    with PEERS[request.param](server, root=tmp_path) as launched:
        yield launched


def write_config(launch: peers.PeerLaunch, path: Path) -> Path:
    env = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in launch.env.items())
    path.write_text(
        f'[[provider]]\nkind = "acp"\nname = "{launch.name}"\ncommand = {json.dumps(launch.argv[0])}\n'
        f"args = {json.dumps(launch.argv[1:])}\nenv = {{ {env} }}\n"
        "dispose_eof_grace_ms = 300\ndispose_grace_ms = 3000\n"  # neither agent exits on EOF
    )
    return path


def said(server: MockModelServer) -> list[str]:
    return ["\n".join(r.user_texts()) for r in server.model_requests]


def assert_one_session(server: MockModelServer) -> None:
    first, second = said(server)
    assert "turn one" in first
    assert "turn two" not in first
    assert "turn one" in second  # the agent kept its session: the second request carries the first turn
    assert "turn two" in second


def test_chat_talks_to_the_same_real_agent_session(
    launch: peers.PeerLaunch, server: MockModelServer, tmp_path: Path
) -> None:
    server.script(Text("The first answer."), Text("The second answer."))
    config = write_config(launch, tmp_path / "c.toml")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "supervisor.cli",
            "chat",
            "--json",
            "--config",
            str(config),
            "--cwd",
            str(launch.cwd),
        ],
        input="turn one\nturn two\n",
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    first, second, end = (json.loads(line) for line in proc.stdout.splitlines())
    assert (first["turn"], first["stop_reason"], second["turn"], second["stop_reason"]) == (
        1,
        "completed",
        2,
        "completed",
    )
    assert "The first answer." in first["output"]
    assert "The second answer." in second["output"]
    assert (end["turns"], end["quiescent"], end["provider"]) == (2, True, launch.name)
    assert_one_session(server)
    assert supervised_children() == []


def test_a_batch_items_turns_reach_the_same_real_agent_session(
    launch: peers.PeerLaunch, server: MockModelServer, tmp_path: Path
) -> None:
    server.script(Text("The first answer."), Text("The second answer."))
    config = write_config(launch, tmp_path / "c.toml")
    item: dict[str, Any] = {"id": "talk", "task": "turn one", "turns": ["turn two"], "cwd": str(launch.cwd)}
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(item) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "batch", str(source), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    [record] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(t["turn"], t["stop_reason"]) for t in record["turns"]] == [(1, "completed"), (2, "completed")]
    assert "The second answer." in record["output"]
    assert record["quiescent"] is True
    assert_one_session(server)
    assert supervised_children() == []
