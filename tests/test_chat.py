"""``subagents chat`` as a user runs it: a real CLI process, the real example ACP agent, real
stdio, and a real pseudo-terminal for the prompt and Ctrl-C.

The example agent remembers its session, so ``@recall`` proves every line reached the same
child; ``@slow MS`` keeps a turn running until it is cancelled; ``@exit N`` kills the
child mid-turn.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import CHILDREN, PYTHON
from tests.test_batch import supervised_children

ACP_CHILD = [PYTHON, "-I", str(CHILDREN / "acp_child.py")]
CHAT = [sys.executable, "-m", "supervisor.cli", "chat"]
END_KEYS = {
    "type",
    "run_id",
    "provider",
    "kind",
    "started",
    "turns",
    "stop_reason",
    "output",
    "diagnostic",
    "usage",
    "stages",
    "exit_code",
    "signal",
    "quiescent",
    "containment",
    "resources",
    "audit",
}
TURN_KEYS = {"type", "run_id", "turn", "stop_reason", "output", "diagnostic", "usage"}


def chat(*args: str, stdin: str | bytes, cwd: Path) -> subprocess.CompletedProcess[str]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run([*CHAT, *args], cwd=cwd, input=data, capture_output=True, timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def objects(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


# -- over pipes -----------------------------------------------------------------------------


def test_each_line_is_a_turn_of_the_same_child_and_eof_ends_it(tmp_path: Path) -> None:
    proc = chat(stdin="what is 2+2?\n\n   \nand 3+3?\r\n@recall\n", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "Hello! You asked: what is 2+2?\n"
        "Hello! You asked: and 3+3?\n"
        "Earlier in this session you asked: what is 2+2?; and 3+3?\n"
    )
    assert "> " not in proc.stderr  # no prompt off a terminal
    assert proc.stderr.startswith("subagents: initialize\n")
    assert supervised_children() == []


def test_json_is_one_object_per_turn_then_the_conversation(tmp_path: Path) -> None:
    proc = chat("--json", stdin="one\ntwo\n@usage\n@recall\n", cwd=tmp_path)  # a directive alone is a turn
    assert proc.returncode == 0, proc.stderr
    *turns, end = objects(proc.stdout)
    assert all(set(t) == TURN_KEYS and t["type"] == "turn" for t in turns)
    assert [(t["turn"], t["stop_reason"], t["output"], t["diagnostic"]) for t in turns] == [
        (1, "completed", "Hello! You asked: one", None),
        (2, "completed", "Hello! You asked: two", None),
        (3, "completed", "Hello! You sent me directives but no task.", None),
        (4, "completed", "Earlier in this session you asked: one; two", None),
    ]
    # 0 words asked, 8 answered: 8 tokens at 0.0001 USD
    assert turns[2]["usage"] == {
        "input_tokens": 0,
        "output_tokens": 8,
        "cached_input_tokens": None,
        "cost_usd": 0.0008,
    }
    assert set(end) == END_KEYS
    assert end["type"] == "conversation"
    assert {t["run_id"] for t in turns} == {end["run_id"]}
    assert (end["turns"], end["started"], end["stop_reason"], end["output"]) == (
        4,
        True,
        "completed",
        "Earlier in this session you asked: one; two",
    )
    assert (end["exit_code"], end["signal"], end["quiescent"]) == (0, None, True)
    assert end["stages"] == ["initialize", "new-session", "prompt", "teardown"]
    assert {a["turn"] for a in end["audit"]} == {1, 2, 3, 4}


def test_a_failed_turn_is_said_and_the_conversation_goes_on(tmp_path: Path) -> None:
    proc = chat(stdin="one\n@fail\n@recall\n", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "Hello! You asked: one",
        "Hello! You sent me directives but no task.",
        "Earlier in this session you asked: one",
    ]
    assert (
        "subagents: turn 2: subagent run failed\nDiagnostic: Subagent failure (provider: ACP; stage: prompt;"
        in (proc.stderr)
    )


def test_a_line_after_the_child_died_is_a_clear_line_and_nothing_is_left(tmp_path: Path) -> None:
    proc = chat(stdin="one\n@exit 4\nstill there?\nand this?\n", cwd=tmp_path)
    assert proc.returncode == 1
    assert (
        "subagents: turn 2: subagent run failed\n"
        "Diagnostic: Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 4)\n"
    ) in proc.stderr
    assert proc.stderr.endswith(  # the first line it could not take; the rest are not read
        "subagents: subagent conversation is over (provider: ACP; turn: 2; reason: child exited; exit code: 4)\n"
    )
    assert proc.stdout.splitlines() == ["Hello! You asked: one", "Hello! You sent me directives but no task."]
    assert supervised_children() == []


def test_a_child_that_dies_between_turns(tmp_path: Path) -> None:
    cli = subprocess.Popen(
        [*CHAT, "--json", "--trace"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert cli.stdin is not None
    assert cli.stdout is not None
    assert cli.stderr is not None
    cli.stdin.write(b"one\n")
    cli.stdin.flush()
    first = json.loads(cli.stdout.readline())  # turn 1 answered: the child is idle
    assert first["stop_reason"] == "completed"
    [agent] = supervised_children()
    agent.kill()
    for line in cli.stderr:  # the supervisor saw the idle child go (event-driven, its own trace)
        if json.loads(line)["event"] == "child_lost":
            break
    out, err = cli.communicate(b"two\n", timeout=120)
    assert cli.returncode == 1, err
    over, end = objects(out.decode())
    assert over["turn"] == 2
    assert over["stop_reason"] == "error"
    assert over["diagnostic"] == (
        "subagent conversation is over (provider: ACP; turn: 1; reason: child exited; signal: SIGKILL)"
    )
    assert (end["turns"], end["stop_reason"], end["diagnostic"]) == (2, "error", over["diagnostic"])
    assert (end["signal"], end["quiescent"]) == ("SIGKILL", True)
    assert supervised_children() == []


def test_no_line_at_all_starts_nothing(tmp_path: Path) -> None:
    proc = chat("--json", stdin="\n  \n", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_a_line_that_is_not_utf8_is_not_sent_and_fails_the_chat(tmp_path: Path) -> None:
    proc = chat(stdin=b"one\n\xff\xfe\n@recall\n", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == ["Hello! You asked: one", "Earlier in this session you asked: one"]
    assert "subagents: line 2 is not valid UTF-8; not sent\n" in proc.stderr


def test_a_failed_start_ends_the_chat(tmp_path: Path) -> None:
    proc = chat(
        "--json",
        "--env",
        "ACP_CHILD_MISSING_SESSION_ID=1",
        "--",
        *ACP_CHILD,
        stdin="one\ntwo\n",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    [end] = objects(proc.stdout)
    assert (end["started"], end["turns"], end["stop_reason"], end["quiescent"]) == (False, 0, None, True)
    assert end["diagnostic"] == "Subagent failure (provider: ACP; stage: new-session; category: protocol)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a task"], "subagents: unrecognized arguments: a task\n"),
        (["--timeout", "0"], "subagents: --timeout must be a positive number of seconds\n"),
        (
            ["--cwd", "/nonexistent/dir"],
            "subagents: --cwd is not an accessible directory: /nonexistent/dir\n",
        ),
    ],
)
def test_usage_errors_exit_2_before_anything_reads_or_spawns(
    tmp_path: Path, args: list[str], message: str
) -> None:
    proc = chat(*args, stdin="one\n", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", message)


def test_timeout_cancels_the_turn_and_the_conversation_goes_on(tmp_path: Path) -> None:
    """``--timeout`` bounds each turn; turn 1's includes the start, so on a loaded machine a
    short bound may end the start instead (a local cancellation, 130): then the next attempt
    gets twice the time.  Nothing waits on a guess; every attempt's outcome is checked."""
    seconds = 2.0
    while True:
        proc = chat("--json", "--timeout", f"{seconds:g}", stdin="one\n@slow 600000\n@recall\n", cwd=tmp_path)
        if proc.returncode != 130:
            break
        assert "stopping the child" in proc.stderr
        seconds *= 2
        assert seconds <= 64, "no start was done within a minute"
    assert proc.returncode == 1, proc.stderr
    *turns, end = objects(proc.stdout)
    assert [(t["turn"], t["stop_reason"]) for t in turns] == [
        (1, "completed"),
        (2, "aborted"),
        (3, "completed"),
    ]
    assert turns[1]["output"].startswith("Hello!")  # the partial answer is kept
    assert turns[2]["output"] == "Earlier in this session you asked: one"
    assert f"subagents: timed out after {seconds:g} s; turn 2 cancelled\n" in proc.stderr
    assert end["quiescent"] is True


def test_sigterm_quits_and_leaves_nothing(tmp_path: Path) -> None:
    cli = subprocess.Popen(
        [*CHAT, "--json", "--trace"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert cli.stdin is not None
    assert cli.stderr is not None
    cli.stdin.write(b"one\n@slow 600000\ntwo\n")
    cli.stdin.flush()
    for line in cli.stderr:  # wait, event-driven, for turn 2 to be sent
        if json.loads(line)["event"] == "turn_sent":
            break
    cli.send_signal(signal.SIGTERM)
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 143, err
    *turns, end = objects(out.decode())
    assert [(t["turn"], t["stop_reason"]) for t in turns] == [(1, "completed"), (2, "aborted")]
    assert (end["turns"], end["quiescent"]) == (2, True)
    assert b"subagents: cancelled; stopping the child (Ctrl-C again to kill it now)\n" in err
    assert supervised_children() == []


# -- on a terminal --------------------------------------------------------------------------


class Terminal:
    """The chat on a real pseudo-terminal: its controlling terminal, so ``^C`` typed here is
    the line discipline's SIGINT to its foreground process group, as at a real keyboard."""

    def __init__(
        self, cwd: Path, *args: str, command: list[str] = CHAT, env: dict[str, str] | None = None
    ) -> None:
        self.master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # what is typed is not echoed back: the screen is the chat's own
        termios.tcsetattr(slave, termios.TCSANOW, attrs)

        def controlling_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            [*command, *args],
            cwd=cwd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=controlling_terminal,
            env=None if env is None else {**os.environ, **env},
        )
        os.close(slave)
        self.screen = ""
        self.seen = 0

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait_for(self, pattern: str, bound: float = 120) -> str:
        """Read the screen until ``pattern`` (a regex) shows after the last match; the text
        up to the match."""
        end = time.monotonic() + bound  # a bound against a hang, not a wait for something
        start = self.seen
        while (found := re.search(pattern, self.screen[start:])) is None:
            ready, _, _ = select.select([self.master], [], [], max(0.0, end - time.monotonic()))
            assert ready, f"{pattern!r} never showed; screen: {self.screen[start:]!r}"
            try:
                self.screen += os.read(self.master, 65536).decode("utf-8", "replace").replace("\r\n", "\n")
            except OSError:  # EIO: the chat has ended and the terminal is gone
                raise AssertionError(f"{pattern!r} never showed; screen: {self.screen[start:]!r}") from None
        self.seen = start + found.end()
        return self.screen[start : self.seen]

    def close(self) -> int:
        status = self.proc.wait(timeout=120)
        os.close(self.master)
        return status


def test_on_a_terminal_a_prompt_asks_and_ctrl_c_cancels_a_turn_then_a_second_quits(tmp_path: Path) -> None:
    term = Terminal(tmp_path)
    try:
        term.wait_for(r"^> $")
        term.type("what is 2+2?\n")
        assert "Hello! You asked: what is 2+2?\n" in term.wait_for(r"> $")
        term.type("@slow 600000\n")
        term.wait_for(r"subagents: prompt")  # turn 2 was sent (its live stage line)
        term.type("\x03")  # Ctrl-C: the turn is cancelled, the conversation stays
        shown = term.wait_for(r"> $")
        assert "subagents: turn 2 cancelled (Ctrl-C again to quit)\n" in shown
        term.type("@recall\n")
        shown = term.wait_for(r"> $")
        assert "Earlier in this session you asked: what is 2+2?\n" in shown
        term.type("\x03")  # at the prompt: only how to quit, and the prompt again
        assert term.wait_for(r"> $") == "\nsubagents: Ctrl-C again to quit (or end the input)\n> "
        term.type("\x03")  # the second: quit
        term.wait_for(r"^\nsubagents: cancelled; stopping the child \(Ctrl-C again to kill it now\)\n")
    finally:
        status = term.close()
    assert status == 130
    assert supervised_children() == []


def test_on_a_terminal_ctrl_d_ends_the_chat(tmp_path: Path) -> None:
    term = Terminal(tmp_path)
    try:
        term.wait_for(r"> $")
        term.type("hello\n")
        assert "Hello!" in term.wait_for(r"> $")
        term.type("\x04")  # Ctrl-D at the start of a line: end of input
    finally:
        status = term.close()
    assert status == 0
    assert supervised_children() == []


def test_a_second_ctrl_c_during_the_teardown_kills_at_once(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'[[provider]]\nkind = "acp"\ncommand = {json.dumps(PYTHON)}\n'
        f"args = {json.dumps(ACP_CHILD[1:])}\n"
        'env = { ACP_CHILD_HANG = "prompt", ACP_CHILD_TRAP_TERM = "1", ACP_CHILD_IGNORE_EOF = "1" }\n'
        "dispose_eof_grace_ms = 600000\ndispose_grace_ms = 600000\n"
    )
    term = Terminal(tmp_path, "--json", "--config", str(config))
    try:
        term.wait_for(r"> $")
        term.type("hang\n")
        term.wait_for(r"subagents: prompt")
        term.type("\x03")  # cancels the turn (the child ignores the protocol's cancel)
        term.wait_for(r"turn 1 cancelled \(Ctrl-C again to quit\)\n")
        term.type("\x03")  # quits: the child ignores EOF and SIGTERM, the graces are ten minutes
        term.wait_for(r"stopping the child \(Ctrl-C again to kill it now\)\n")
        term.type("\x03")  # no more graces
        shown = term.wait_for(r'\{"type": "conversation".*\}\n')
        end = json.loads(shown[shown.index('{"type": "conversation"') :])
    finally:
        status = term.close()
    assert status == 130
    assert (end["signal"], end["quiescent"]) == ("SIGKILL", True)
    assert psutil.pid_exists(term.proc.pid) is False
    assert supervised_children() == []
