"""The ``subagents`` CLI as a user runs it: a real process, real children, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor import installed_kinds
from tests.conftest import CGROUP_AVAILABLE, CHILDREN, PYTHON

ACP_CHILD = [PYTHON, "-I", str(CHILDREN / "acp_child.py")]


def subagents(
    *args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def as_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(proc.stdout)
    return document


def test_the_first_command_a_new_user_types(tmp_path: Path) -> None:
    proc = subagents("run", "say hello", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Hello!")
    assert "subagents: initialize\n" in proc.stderr


def test_json_document_of_a_completed_run(tmp_path: Path) -> None:
    proc = subagents("run", "--json", "say hello", cwd=tmp_path)
    assert proc.returncode == 0
    doc = as_json(proc)
    assert set(doc) == {
        "run_id",
        "provider",
        "kind",
        "started",
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
    assert doc["containment"] == ("cgroup" if CGROUP_AVAILABLE else "process-tree")
    if CGROUP_AVAILABLE:
        assert set(doc["resources"]) == {"cpu_s", "memory_peak_bytes", "pids_peak"}
        assert doc["resources"]["cpu_s"] > 0
    else:
        assert doc["resources"] is None
    assert doc["provider"] == doc["kind"] == "acp"
    assert doc["started"] is True
    assert doc["stop_reason"] == "completed"
    assert doc["diagnostic"] is None
    assert doc["usage"] is None  # the example agent reports none unless told to
    assert doc["stages"] == ["initialize", "new-session", "prompt", "teardown"]
    assert (doc["exit_code"], doc["signal"], doc["quiescent"]) == (0, None, True)
    assert doc["audit"][0] == {**doc["audit"][0], "event": "initialize_answered", "source": "initialize"}
    assert all(set(t) == {"event", "source", "target", "t", "machine", "turn"} for t in doc["audit"])
    assert {t["turn"] for t in doc["audit"]} == {1}
    assert {t["machine"] for t in doc["audit"]} == {"lifecycle", "ladder"}


def test_json_carries_the_usage_the_agent_reported(tmp_path: Path) -> None:
    proc = subagents("run", "--json", "--env", "SUBAGENT_EXAMPLE_USAGE=1", "count these words", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # 3 words asked, "Hello! You asked: count these words" is 6: 9 tokens at 0.0001 USD
    assert as_json(proc)["usage"] == {
        "input_tokens": 3,
        "output_tokens": 6,
        "cached_input_tokens": None,
        "cost_usd": 0.0009,
    }


def test_failing_child_after_publication(tmp_path: Path) -> None:
    proc = subagents(
        "run",
        "--json",
        "--env",
        "ACP_CHILD_EXIT_AT=prompt",
        "--env",
        "ACP_CHILD_EXIT_CODE=4",
        "t",
        "--",
        *ACP_CHILD,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    doc = as_json(proc)
    assert doc["stop_reason"] == "error"
    assert doc["output"] == "hello from acp_child"
    assert (
        doc["diagnostic"]
        == "Subagent failure (provider: ACP; stage: process; category: process-exit; exit code: 4)"
    )
    assert (doc["exit_code"], doc["signal"]) == (4, None)


def test_failed_start_still_prints_the_document(tmp_path: Path) -> None:
    proc = subagents(
        "run", "--json", "--env", "ACP_CHILD_MISSING_SESSION_ID=1", "t", "--", *ACP_CHILD, cwd=tmp_path
    )
    assert proc.returncode == 1
    doc = as_json(proc)
    assert doc["started"] is False
    assert doc["stop_reason"] is None
    assert doc["output"] == ""
    assert doc["diagnostic"] == "Subagent failure (provider: ACP; stage: new-session; category: protocol)"
    assert doc["quiescent"] is True


def test_human_output_puts_the_diagnostic_on_stderr(tmp_path: Path) -> None:
    proc = subagents("run", "--env", "ACP_CHILD_STOP=max_turn_requests", "t", "--", *ACP_CHILD, cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == "hello from acp_child\n"
    assert proc.stderr.endswith(
        "subagents: subagent run failed\nDiagnostic: Subagent failure (provider: ACP; stage: prompt; "
        "category: remote-limit; stop reason: max_turn_requests)\n"
    )


def test_task_from_stdin(tmp_path: Path) -> None:
    proc = subagents("run", "--json", "-", cwd=tmp_path, stdin="from stdin\n")
    assert as_json(proc)["output"] == "Hello! You asked: from stdin"


def test_trace_streams_transitions_as_json_lines(tmp_path: Path) -> None:
    proc = subagents("run", "--trace", "say hello", cwd=tmp_path)
    records = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [r["event"] for r in records][:2] == ["initialize_answered", "session_created"]
    assert records[-1]["target"] == "quiescent"


def test_cwd_flag_sets_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    proc = subagents(
        "run",
        "--json",
        "--cwd",
        "ws",
        "--env",
        "ACP_CHILD_ECHO_CWD=1",
        "--env",
        "ACP_CHILD_TEXT=",
        "t",
        "--",
        *ACP_CHILD,
        cwd=tmp_path,
    )
    ws = tmp_path / "ws"
    assert as_json(proc)["output"] == f"cwd={ws}\nsession_cwd={ws}\n"


@pytest.mark.parametrize("cwd", ["missing", "file"])
def test_bad_cwd_is_a_usage_error(tmp_path: Path, cwd: str) -> None:
    (tmp_path / "file").write_text("")
    proc = subagents("run", "--json", "--cwd", cwd, "t", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "--cwd is not an accessible directory" in proc.stderr


def test_permission_flag_overrides_the_policy(tmp_path: Path) -> None:
    proc = subagents("run", "--json", "--permission", "allow", "make it\n@permission edit", cwd=tmp_path)
    doc = as_json(proc)
    assert doc["stop_reason"] == "completed"
    assert (tmp_path / "subagent-example.txt").exists()


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(text)
    return path


def test_config_entry_picked_by_name(tmp_path: Path) -> None:
    child = ", ".join(json.dumps(a) for a in ACP_CHILD[1:])
    write_config(
        tmp_path,
        f"""
[[provider]]
kind = "acp"
name = "first"
command = {json.dumps(PYTHON)}
args = [{child}]

[[provider]]
kind = "acp"
name = "second"
command = {json.dumps(PYTHON)}
args = [{child}]
env = {{ ACP_CHILD_TEXT = "${{GREETING}}", ACP_CHILD_ECHO_ENV = "AMBIENT_TOKEN" }}
dispose_grace_ms = 500
""",
    )
    proc = subagents(
        "run",
        "--json",
        "--config",
        "agents.toml",
        "--provider",
        "second",
        "t",
        cwd=tmp_path,
        env={"GREETING": "hi-there", "AMBIENT_TOKEN": "must-not-pass"},
    )
    doc = as_json(proc)
    assert doc["provider"] == "second"
    assert doc["output"] == "AMBIENT_TOKEN unset\nhi-there"


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ('kind = "acp"\ncommand = "x"\ncolour = "blue"', 'provider[0] "acp": colour: unknown key'),
        (
            'kind = "acp"\ncommand = "x"\nargs = "not-a-list"',
            'provider[0] "acp": args: Input should be a valid list',
        ),
        (
            'kind = "acp"\ncommand = "x"\ndispose_grace_ms = 0',
            'provider[0] "acp": dispose_grace_ms: must be a positive',
        ),
        (
            'kind = "acp"\ncommand = "x"\ncwd = "no/such/dir"',
            'provider[0] "acp": cwd: cwd is not an accessible directory',
        ),
        ('kind = "acp"', 'provider[0] "acp": command: required key is missing'),
        ('kind = "rocket"', f"provider[0]: kind: must be one of {', '.join(installed_kinds())}"),
        (
            'kind = "acp"\ncommand = "x"\nenv = { K = "${SURELY_UNSET_VAR}" }',
            'provider[0] "acp": env.K: environment variable SURELY_UNSET_VAR is not set',
        ),
    ],
)
def test_configuration_errors_name_file_entry_and_key(tmp_path: Path, entry: str, fragment: str) -> None:
    path = write_config(tmp_path, f"[[provider]]\n{entry}\n")
    proc = subagents("run", "--json", "--config", str(path), "t", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert f"{path}: {fragment}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_provider_name_is_a_usage_error(tmp_path: Path) -> None:
    write_config(tmp_path, '[[provider]]\nkind = "acp"\ncommand = "x"\n')
    proc = subagents("run", "--config", "agents.toml", "--provider", "nope", "t", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no provider named 'nope' (have: acp)" in proc.stderr


def test_missing_command_is_a_start_failure(tmp_path: Path) -> None:
    proc = subagents("run", "--json", "t", "--", str(tmp_path / "no-such-agent"), cwd=tmp_path)
    assert proc.returncode == 1
    assert (
        as_json(proc)["diagnostic"]
        == "Subagent failure (provider: ACP; stage: process; category: process-start)"
    )


def test_blank_task_is_a_usage_error(tmp_path: Path) -> None:
    proc = subagents("run", "  ", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, "subagents: the task is blank\n")


BEFORE_PUBLICATION = {"started": False, "stop_reason": None, "diagnostic": None, "quiescent": True}
AFTER_PUBLICATION = {"started": True, "stop_reason": "aborted", "diagnostic": None, "quiescent": True}


def published(proc: subprocess.CompletedProcess[str]) -> bool:
    """Whether the ``--trace`` lines on stderr show the run's publication (the session)."""
    events = [json.loads(line)["event"] for line in proc.stderr.splitlines() if line.startswith("{")]
    return "session_created" in events


def timed_out_after_publication(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    """``subagents run --trace --timeout S ARGS t -- <child hanging in its prompt>``, cut by
    the timer after the run was published; returns the run and the S that did it.

    The timer counts from the start of the run, and how long a start takes depends on the
    machine's load: no fixed S is sure to outlast it on a loaded 2-core machine.  So an
    attempt whose start the timer beat (no publication in the trace) is checked for what it
    is, a cancelled start, and the next attempt gets twice the time.  Nothing waits on a
    guess; every attempt's outcome is checked.
    """
    seconds = 1.0
    while True:
        proc = subagents(
            "run",
            "--trace",
            "--timeout",
            f"{seconds:g}",
            *args,
            "t",
            "--",
            *ACP_CHILD,
            cwd=tmp_path,
            env={"ACP_CHILD_HANG": "prompt", **(env or {})},
        )
        assert proc.returncode == 130, proc.stderr
        if published(proc):
            return proc, seconds
        if "--json" in args:
            doc = as_json(proc)
            assert {key: doc[key] for key in BEFORE_PUBLICATION} == BEFORE_PUBLICATION
        seconds *= 2
        assert seconds <= 64, "no start was published within a minute"


def test_timeout_after_publication_is_a_local_cancellation(tmp_path: Path) -> None:
    """Before, this ran ``--timeout 1`` once and assumed the start would beat it; on a loaded
    machine it did not (``started: false``)."""
    proc, _ = timed_out_after_publication(tmp_path, "--json")
    doc = as_json(proc)
    assert {key: doc[key] for key in AFTER_PUBLICATION} == AFTER_PUBLICATION


def test_timeout_before_publication_is_a_local_cancellation(tmp_path: Path) -> None:
    """The child never answers ``initialize``: the start cannot beat the timer, whatever the load."""
    proc = subagents(
        "run",
        "--json",
        "--timeout",
        "1",
        "t",
        "--",
        *ACP_CHILD,
        cwd=tmp_path,
        env={"ACP_CHILD_HANG": "initialize"},
    )
    assert proc.returncode == 130
    doc = as_json(proc)
    assert {key: doc[key] for key in BEFORE_PUBLICATION} == BEFORE_PUBLICATION


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_cancel_locally_and_leave_nothing(tmp_path: Path, sig: signal.Signals, status: int) -> None:
    cli = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "run", "--json", "--trace", "t", "--", *ACP_CHILD],
        cwd=tmp_path,
        env={
            **os.environ,
            "ACP_CHILD_HANG": "prompt",
            "ACP_CHILD_TRAP_TERM": "1",
            "ACP_CHILD_IGNORE_EOF": "1",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cli.stderr is not None
    for line in cli.stderr:  # wait, event-driven, for the run to be published
        if json.loads(line)["event"] == "session_created":
            break
    cli.send_signal(sig)
    out, _ = cli.communicate(timeout=60)
    assert cli.returncode == status
    doc = json.loads(out)
    assert (doc["stop_reason"], doc["quiescent"]) == ("aborted", True)


def test_second_ctrl_c_skips_the_graces(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f'[[provider]]\nkind = "acp"\ncommand = {json.dumps(PYTHON)}\n'
        f"args = [{', '.join(json.dumps(a) for a in ACP_CHILD[1:])}]\n"
        "dispose_eof_grace_ms = 600000\ndispose_grace_ms = 600000\n",
    )
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "supervisor.cli",
            "run",
            "--json",
            "--trace",
            "--config",
            str(config),
            "t",
        ],
        cwd=tmp_path,
        env={
            **os.environ,
            "ACP_CHILD_HANG": "prompt",
            "ACP_CHILD_TRAP_TERM": "1",
            "ACP_CHILD_IGNORE_EOF": "1",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cli.stderr is not None
    for line in cli.stderr:
        if line.startswith("subagents: "):  # the cancellation line, between the trace lines
            assert line == "subagents: cancelled; stopping the child (Ctrl-C again to kill it now)\n"
            continue
        if json.loads(line)["event"] == "session_created":
            cli.send_signal(signal.SIGINT)
        if json.loads(line)["target"] == "eof-wait":  # now in a ten-minute grace
            cli.send_signal(signal.SIGINT)
            break
    out, _ = cli.communicate(timeout=60)
    assert cli.returncode == 130
    doc = json.loads(out)
    assert doc["signal"] == "SIGKILL"
    assert doc["quiescent"] is True


def test_diagrams_written_are_current(tmp_path: Path) -> None:
    """``--out`` then ``--check`` (the committed ones: ``test_machines``, whatever else is installed)."""
    assert subagents("diagrams", "--out", str(tmp_path), cwd=tmp_path).returncode == 0
    proc = subagents("diagrams", "--check", str(tmp_path), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, f"diagrams in {tmp_path} are current\n"), proc.stderr


def test_diagrams_check_catches_a_stale_file(tmp_path: Path) -> None:
    assert subagents("diagrams", "--out", str(tmp_path), cwd=tmp_path).returncode == 0
    (tmp_path / "acp.md").write_text("stale\n")
    proc = subagents("diagrams", "--check", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"subagents: stale diagrams in {tmp_path}: acp.md (run `subagents diagrams --out {tmp_path}`)\n"
    )


def test_providers_lists_the_kinds(tmp_path: Path) -> None:
    proc = subagents("providers", cwd=tmp_path)
    assert proc.returncode == 0
    listed = [line.split()[0] for line in proc.stdout.splitlines() if not line.startswith(" ")]
    assert listed[:4] == ["acp", "dsh-sdk", "claude-code", "codex"]  # this distribution's first
    assert listed == list(installed_kinds())  # and every other installed kind


def test_a_reader_that_stopped_reading_ends_the_command_quietly(tmp_path: Path) -> None:
    """`subagents providers | head -1`: no traceback, the status a shell gives a program the
    closed pipe ended (128 + SIGPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "supervisor.cli", "providers"],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")
