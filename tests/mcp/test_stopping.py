"""How ``subagents mcp`` ends: stopped by signals the way real clients stop it, a client that
dies mid-call, and a server killed outright.

Raw MCP frames over real pipes to a real server process; the runs are the scripted ACP child
with a grandchild in its group and a ``setsid`` daemon.  Every wait is on an event (a frame,
a process exit, a pidfd) with a generous bound for "eventually"; nothing measures time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from supervisor.process import detect_containment, host_group_name
from supervisor.process._keeper_main import KEEPER_NAME
from tests.conftest import CHILDREN, PYTHON, tagged
from tests.support.raw_mcp import facts
from tests.test_hostdeath import pidfds, wait_gone

SERVER = [PYTHON, "-m", "supervisor.cli", "mcp"]
GONE_WITHIN = 120.0  # a bound for "eventually", never a claim about speed
CGROUP_BASE = detect_containment().cgroup_base
# The Claude Code CLI stops an MCP server with SIGINT, then SIGTERM 100 ms later (then SIGKILL
# 400 ms after that): research in the bundled cli.js, "Sending SIGINT to MCP server process".
CLIENT_PAUSE_SECONDS = 0.1


def write_config(path: Path, *, graces_ms: int, **env: str) -> Path:
    pairs = ", ".join(f"ACP_CHILD_{k} = {json.dumps(v)}" for k, v in env.items())
    path.write_text(
        '[[provider]]\nkind = "acp"\nname = "agent"\n'
        f"command = {json.dumps(PYTHON)}\n"
        f'args = ["-I", {json.dumps(str(CHILDREN / "acp_child.py"))}]\n'
        f"dispose_eof_grace_ms = {graces_ms}\ndispose_grace_ms = {graces_ms}\n"
        f"env = {{ {pairs} }}\n"
    )
    return path


class Server:
    """A ``subagents mcp`` process spoken to in raw frames."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._next_id = 1

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the server closed stdout"
        frame: dict[str, Any] = json.loads(line)
        return frame

    def request(self, method: str, params: dict[str, Any]) -> int:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def initialize(self) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        assert self.receive()["id"] == 1
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def run_until_prompt(self) -> None:
        """Call ``run_subagent`` with a progress token and return once the run is in its prompt."""
        self.request(
            "tools/call",
            {"name": "run_subagent", "arguments": {"task": "t"}, "_meta": {"progressToken": "p"}},
        )
        while True:
            frame = self.receive()
            if frame.get("method") == "notifications/progress" and frame["params"].get(
                "message", ""
            ).startswith("prompt · "):
                return

    def host_group(self) -> Path | None:
        if CGROUP_BASE is None:
            return None
        start = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        return CGROUP_BASE / host_group_name(self.proc.pid, int(start))

    def keeper(self) -> int:
        (keeper,) = [
            int(pid)
            for pid in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            if Path(f"/proc/{pid}/comm").read_text().strip() == KEEPER_NAME
        ]
        return keeper


@contextmanager
def server(tmp_path: Path, config: Path) -> Iterator[Server]:
    proc = subprocess.Popen(
        [*SERVER, "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        yield Server(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=GONE_WITHIN)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                with contextlib.suppress(OSError):
                    pipe.close()


def descendants(path: Path) -> dict[int, int]:
    found = pidfds(int(pid) for pid in path.read_text().split())
    assert len(found) == 2  # the grandchild in the child's group, the setsid daemon
    return found


@pytest.mark.parametrize(
    "signals",
    [("SIGINT", "SIGTERM"), ("SIGINT",), ("SIGTERM",), ("SIGHUP",)],
    ids=["claude-code", "sigint", "sigterm", "sighup"],
)
def test_a_stop_signal_ends_every_run_and_the_server_exits_0(
    tmp_path: Path, signals: tuple[str, ...]
) -> None:
    """Each stop signal alone ends the session like a closed stdin (the runs' ladders with their
    graces); SIGINT then SIGTERM, as the Claude Code CLI sends them without closing stdin, ends it
    even for a tree that ignores EOF and SIGTERM under ten-minute graces: the second signal skips
    them."""
    pids = tmp_path / "pids"
    stubborn = len(signals) > 1
    env = {"HANG": "1", "GRANDCHILD": "1", "DAEMON": "1", "GRANDCHILD_PID_FILE": str(pids)}
    if stubborn:
        env.update(
            IGNORE_EOF="1", IGNORE_CANCEL="1", TRAP_TERM="1", GRANDCHILD="trap-term", DAEMON="trap-term"
        )
    config = write_config(tmp_path / "c.toml", graces_ms=600_000 if stubborn else 300, **env)
    with server(tmp_path, config) as mcp:
        mcp.initialize()
        mcp.run_until_prompt()
        group = mcp.host_group()
        left = descendants(pids)
        for index, name in enumerate(signals):
            if index:
                time.sleep(CLIENT_PAUSE_SECONDS)  # the client's own pause, part of the stimulus
            mcp.proc.send_signal(signal.Signals[name])  # (to a zombie, if it already exited)
        assert mcp.proc.wait(timeout=GONE_WITHIN) == 0  # stdin still open: the signals alone did it
        assert mcp.proc.stderr is not None
        errors = mcp.proc.stderr.read()
        assert b"Traceback" not in errors, errors.decode(errors="replace")[-3000:]
    assert wait_gone(left) == []
    assert not tagged_any()
    if group is not None:
        assert not group.exists()


def tagged_any() -> list[Any]:
    import psutil

    from tests.conftest import SESSION_TAG, SESSION_VARIABLE

    found = []
    for proc in psutil.process_iter():
        try:
            environ = proc.environ()
            if (
                environ.get(SESSION_VARIABLE) == SESSION_TAG
                and "SUBAGENT_SUPERVISOR_RUN" in environ
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def test_a_client_that_dies_mid_call_ends_the_server_with_exit_0(tmp_path: Path) -> None:
    """stdin and stdout both closed while ``run_subagent`` hangs: every run is torn down and the
    server exits 0 without a traceback (a write to the closed stdout is not an error)."""
    pids = tmp_path / "pids"
    env = {"HANG": "1", "GRANDCHILD": "1", "DAEMON": "1", "GRANDCHILD_PID_FILE": str(pids)}
    config = write_config(tmp_path / "c.toml", graces_ms=300, **env)
    with server(tmp_path, config) as mcp:
        mcp.initialize()
        mcp.run_until_prompt()
        left = descendants(pids)
        assert mcp.proc.stdin is not None
        assert mcp.proc.stdout is not None
        mcp.proc.stdout.close()
        mcp.proc.stdin.close()
        assert mcp.proc.wait(timeout=GONE_WITHIN) == 0
        assert mcp.proc.stderr is not None
        errors = mcp.proc.stderr.read()
        assert b"Traceback" not in errors, errors.decode(errors="replace")[-3000:]
    assert wait_gone(left) == []
    assert not tagged_any()


@pytest.mark.skipif(CGROUP_BASE is None, reason="no cgroup mode here")
def test_a_server_killed_between_runs_leaves_no_group(tmp_path: Path) -> None:
    """SIGKILL after a finished run (nothing in flight): the keeper removes the host's group."""
    config = write_config(tmp_path / "c.toml", graces_ms=300)
    with server(tmp_path, config) as mcp:
        mcp.initialize()
        call = mcp.request("tools/call", {"name": "run_subagent", "arguments": {"task": "t"}})
        while (answer := mcp.receive()).get("id") != call:
            pass
        assert facts(answer["result"])["stop_reason"] == "completed"
        group = mcp.host_group()
        assert group is not None
        assert group.exists()
        keeper = pidfds([mcp.keeper()])
        mcp.proc.kill()
        mcp.proc.wait(timeout=GONE_WITHIN)
        assert wait_gone(keeper) == []
        assert not group.exists()
    assert not tagged(facts(answer["result"])["run_id"])
    assert os.getpid()


@pytest.mark.parametrize("stdout", ["pipe", "devnull"])
def test_a_server_whose_stdin_is_dev_null_ends_at_once_with_exit_0(tmp_path: Path, stdout: str) -> None:
    """``subagents mcp < /dev/null``: epoll refuses ``/dev/null`` (asyncio takes it for a
    pipe and only logs the refusal), so the wire is read as a file: end of file, exit 0."""
    config = write_config(tmp_path / "c.toml", graces_ms=300)
    proc = subprocess.run(
        [*SERVER, "--config", str(config)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if stdout == "pipe" else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=GONE_WITHIN,
    )
    assert proc.returncode == 0
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")[-3000:]
    assert proc.stdout in (b"", None)


def completed_run(mcp: Server) -> None:
    """One run to its end (the stimulus is "after a run": how the run ended does not matter
    here; on a loaded machine a start very rarely fails as initialize/transport, still open)."""
    call = mcp.request("tools/call", {"name": "run_subagent", "arguments": {"task": "t"}})
    while (answer := mcp.receive()).get("id") != call:
        pass
    assert facts(answer["result"])["stop_reason"] in ("completed", "error")


def test_a_client_that_keeps_signalling_after_a_run_still_gets_exit_0(tmp_path: Path) -> None:
    """After a run: SIGINT, then SIGTERM again and again until the server is gone.  Before: once
    the runs were down the server restored the signals' default action for the rest of its exit
    (the event loop's shutdown, telemetry's flush), and a SIGTERM there ended it with -15 (the
    Claude Code CLI's SIGTERM 100 ms after SIGINT did, 2 times in 6).  Each signal is sent after
    the previous one, whatever the timing: the exit status is the only thing asserted."""
    config = write_config(tmp_path / "c.toml", graces_ms=300)
    with server(tmp_path, config) as mcp:
        mcp.initialize()
        completed_run(mcp)
        mcp.proc.send_signal(signal.SIGINT)
        while mcp.proc.poll() is None:
            mcp.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                mcp.proc.wait(timeout=0.005)
        assert mcp.proc.returncode == 0
        assert mcp.proc.stderr is not None
        errors = mcp.proc.stderr.read()
        assert b"Traceback" not in errors, errors.decode(errors="replace")[-3000:]
    assert not tagged_any()


@pytest.mark.parametrize("attempt", range(3))
def test_sigint_then_sigterm_100_ms_later_after_a_run_is_exit_0(tmp_path: Path, attempt: int) -> None:
    """What the Claude Code CLI sends, after a finished run; repeated."""
    config = write_config(tmp_path / "c.toml", graces_ms=300)
    with server(tmp_path, config) as mcp:
        mcp.initialize()
        completed_run(mcp)
        mcp.proc.send_signal(signal.SIGINT)
        time.sleep(CLIENT_PAUSE_SECONDS)  # the client's own pause, part of the stimulus
        mcp.proc.send_signal(signal.SIGTERM)  # (to a zombie, if it already exited)
        assert mcp.proc.wait(timeout=GONE_WITHIN) == 0
