"""The real Claude Code CLI (2.1.332, bundled in claude-agent-sdk) as the MCP client of
``subagents mcp``, its model the mock Messages API on 127.0.0.1: what the model reads is
asserted on the model's next request.

* ``-p`` mode (it never uses tasks and simply waits): the model reads the answer text; a
  conversation goes on through the fixed line alone; a long silent turn outlives a short
  silence limit (``CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT``) because progress keeps coming.
* interactive mode on a pseudo-terminal (it declares the tasks extension on every request
  and moves a task to the background at once): the task is handed off, polled, and its
  answer reaches the model; a task stopped from the client (its ``TaskStop`` tool) ends
  the subagent's tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CHILDREN, PYTHON
from tests.mcp.test_server import EXAMPLE_ANSWER_START
from tests.mockmodel import MockModelServer, Text, ToolCall
from tests.mockmodel.turns import RecordedRequest, Turn
from tests.support import require_module
from tests.support.peers import seed_claude_config
from tests.support.pidfd import pidfds, wait_gone

require_module("claude_agent_sdk")

import claude_agent_sdk  # noqa: E402  (after the check)

pytestmark = [pytest.mark.real_peer]

CLI = Path(claude_agent_sdk.__file__).resolve().parent / "_bundled" / "claude"
EVENTUALLY = 180.0  # a bound for "eventually", never a claim about speed
TOOL = "mcp__subagents__{}"


@pytest.fixture
def mock_model() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


class Home:
    """An isolated HOME for the CLI and a workspace (the MCP server's root)."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.config_dir = self.home / ".claude"
        self.work = (root / "work").resolve() if (root / "work").exists() else root / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.work = self.work.resolve()
        seed_claude_config(self.config_dir)
        # What the interactive mode would otherwise ask on a terminal: onboarding, trusting
        # the folder, using the API key from the environment.
        (self.config_dir / ".claude.json").write_text(
            json.dumps(
                {
                    "hasCompletedOnboarding": True,
                    "theme": "dark",
                    "customApiKeyResponses": {"approved": ["dummy"], "rejected": []},
                    "projects": {str(self.work): {"hasTrustDialogAccepted": True, "allowedTools": []}},
                }
            )
        )

    def env(self, server: MockModelServer, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("ANTHROPIC_", "CLAUDE"))}
        env.update(
            HOME=str(self.home),
            CLAUDE_CONFIG_DIR=str(self.config_dir),
            ANTHROPIC_BASE_URL=server.anthropic_base_url,
            ANTHROPIC_API_KEY="dummy",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            CLAUDE_CODE_MAX_RETRIES="0",
            DISABLE_AUTOUPDATER="1",
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            DISABLE_BUG_COMMAND="1",
            CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY="1",
            NO_COLOR="1",
            IS_SANDBOX="1",  # the CLI refuses some modes under root without it
            TERM="xterm-256color",
        )
        env.update(extra)
        return env

    def mcp_config(self, *args: str) -> str:
        server = {"command": PYTHON, "args": ["-m", "supervisor.cli", "mcp", "--root", str(self.work), *args]}
        return json.dumps({"mcpServers": {"subagents": server}})


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "claude")


def acp_config(path: Path, **env: str) -> Path:
    pairs = ", ".join(f"ACP_CHILD_{k} = {json.dumps(v)}" for k, v in env.items())
    path.write_text(
        '[[provider]]\nkind = "acp"\nname = "agent"\n'
        f"command = {json.dumps(PYTHON)}\n"
        f'args = ["-I", {json.dumps(str(CHILDREN / "acp_child.py"))}]\n'
        "dispose_eof_grace_ms = 300\ndispose_grace_ms = 300\n"
        f"env = {{ {pairs} }}\n"
    )
    return path


def print_mode(home: Home, server: MockModelServer, *mcp_args: str, **env: str) -> str:
    """``claude -p`` with the subagents server; its printed answer."""
    proc = subprocess.run(
        [
            str(CLI),
            "-p",
            "delegate the task",
            "--mcp-config",
            home.mcp_config(*mcp_args),
            "--strict-mcp-config",
            "--allowedTools",
            ",".join(TOOL.format(name) for name in ("run_subagent", "send_subagent", "close_subagent")),
        ],
        env=home.env(server, **env),
        cwd=home.work,
        capture_output=True,
        text=True,
        timeout=EVENTUALLY,
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    return proc.stdout


def latest_tool_result(request: RecordedRequest) -> str:
    return request.tool_results()[-1]


def echo(prefix: str) -> Any:
    """The model's next turn: the text of the tool result it was given, as its answer."""

    def turn(request: RecordedRequest) -> Turn:
        return Text(prefix + latest_tool_result(request))

    return turn


def test_print_mode_the_model_reads_the_answer_text(home: Home, mock_model: MockModelServer) -> None:
    mock_model.script(ToolCall(TOOL.format("run_subagent"), {"task": "say hello"}), echo("subagent said: "))
    printed = print_mode(home, mock_model)
    given = latest_tool_result(mock_model.model_requests[-1])
    assert given.startswith(EXAMPLE_ANSWER_START)  # the answer itself, not a JSON object
    assert "run_id" not in given
    assert printed.startswith(f"subagent said: {EXAMPLE_ANSWER_START}")


def test_print_mode_a_conversation_goes_on_through_its_fixed_line(
    home: Home, mock_model: MockModelServer
) -> None:
    """A model that reads text alone continues and closes the conversation it started."""

    def with_run_id(name: str, **arguments: str) -> Any:
        def turn(request: RecordedRequest) -> Turn:
            (run_id,) = re.findall(r"\(run_id: ([0-9a-f-]{36})\)", latest_tool_result(request))
            return ToolCall(TOOL.format(name), {"run_id": run_id, **arguments})

        return turn

    mock_model.script(
        ToolCall(TOOL.format("run_subagent"), {"task": "what is 2+2?", "keep_alive": True}),
        with_run_id("send_subagent", task="@recall"),
        with_run_id("close_subagent"),
        echo("closed: "),
    )
    printed = print_mode(home, mock_model)
    first, recalled, closed = mock_model.model_requests[-1].tool_results()
    assert first.startswith("Hello! You asked: what is 2+2?\n\nThis subagent conversation stays open")
    assert recalled.startswith("Earlier in this session you asked: what is 2+2?\n\n")
    assert closed == "subagent conversation is over (provider: ACP; turn: 2; reason: closed)"
    assert printed.startswith("closed: subagent conversation is over")


def test_print_mode_a_long_silent_turn_outlives_the_clients_silence_limit(
    home: Home, mock_model: MockModelServer, tmp_path: Path
) -> None:
    """The child writes nothing for 40 s mid-turn; the CLI aborts a call silent for 5 s (its
    watchdog looks every 30 s or so); the status line sent once a second keeps the call
    alive, where one message per stage let the CLI abort it."""
    config = acp_config(tmp_path / "c.toml", TEXT="before after", SLOW_MS="40000")
    mock_model.script(ToolCall(TOOL.format("run_subagent"), {"task": "t"}), echo("subagent said: "))
    printed = print_mode(home, mock_model, "--config", str(config), CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT="5000")
    assert latest_tool_result(mock_model.model_requests[-1]) == "before after"
    assert printed.startswith("subagent said: before after")


# -- interactive mode, on a pseudo-terminal ------------------------------------------------


class Terminal:
    """The CLI in its interactive mode on a pseudo-terminal, its screen drained in a thread
    (a full pty would block it); ended with SIGTERM to its process group."""

    def __init__(self, home: Home, server: MockModelServer, *mcp_args: str) -> None:
        self.master, slave = os.openpty()
        self.screen = bytearray()
        self.process = subprocess.Popen(
            [
                str(CLI),
                "delegate the task",
                "--mcp-config",
                home.mcp_config(*mcp_args),
                "--strict-mcp-config",
                "--allowedTools",
                TOOL.format("run_subagent"),
            ],
            env=home.env(server),
            cwd=home.work,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the CLI is gone and the terminal with it
                return
            if not chunk:
                return
            self.screen += chunk

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=EVENTUALLY)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._reader.join(timeout=10)
        os.close(self.master)


@contextlib.contextmanager
def terminal(home: Home, server: MockModelServer, *mcp_args: str) -> Iterator[Terminal]:
    term = Terminal(home, server, *mcp_args)
    try:
        yield term
    finally:
        term.close()


def notification_of(request: RecordedRequest) -> str:
    return "\n".join(request.user_texts()[-1:])


def test_interactive_a_task_is_handed_off_polled_and_its_answer_reaches_the_model(
    home: Home, mock_model: MockModelServer
) -> None:
    mock_model.script(
        ToolCall(TOOL.format("run_subagent"), {"task": "say hello"}),
        Text("I will wait for the subagent."),
        Text("The subagent answered."),
    )
    with terminal(home, mock_model):
        requests = mock_model.wait_for_requests(3, timeout_s=EVENTUALLY)
    handed_off = latest_tool_result(requests[1])
    assert "started server-side task" in handed_off  # a task, backgrounded at once
    arrived = notification_of(requests[2])
    assert "<status>completed</status>" in arrived
    result = re.search(r"<result>\n?(.*?)\n?</result>", arrived, re.DOTALL)
    assert result is not None
    assert result.group(1).startswith(EXAMPLE_ANSWER_START)  # the answer, not a JSON object
    assert "run_id" not in result.group(1)


def test_interactive_a_task_stopped_from_the_client_ends_its_tree(
    home: Home, mock_model: MockModelServer, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    config = acp_config(tmp_path / "c.toml", HANG="1", GRANDCHILD="1", GRANDCHILD_PID_FILE=str(pids))

    def stop_it(request: RecordedRequest) -> Turn:
        """Once the subagent is in its turn (its grandchild wrote its pid), stop the task."""
        (task_id,) = re.findall(r'TaskStop with task_id "([^"]+)"', latest_tool_result(request))
        deadline = time.monotonic() + EVENTUALLY
        while not pids.exists() and time.monotonic() < deadline:  # a file appearing: an event
            time.sleep(0.05)
        return ToolCall("TaskStop", {"task_id": task_id})

    mock_model.script(
        ToolCall(TOOL.format("run_subagent"), {"task": "t"}),
        stop_it,
        Text("Stopped."),
        Text("Noted."),
    )
    with terminal(home, mock_model, "--config", str(config)):
        requests = mock_model.wait_for_requests(3, timeout_s=EVENTUALLY)
        stopped = latest_tool_result(requests[2])
        grandchild = pidfds(int(pid) for pid in pids.read_text().split())
        # The tree goes while the CLI still runs: tasks/cancel is cancel_subagent.
        assert wait_gone(grandchild, EVENTUALLY) == []
    assert "stop" in stopped.lower(), stopped
