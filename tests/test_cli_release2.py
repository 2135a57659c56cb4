"""The CLI's second release, as a user meets it: a real process, real children, exact texts."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import machines
import supervisor
from supervisor.cli import _diagrams
from tests.conftest import CHILDREN, PYTHON
from tests.test_cli import ACP_CHILD, as_json, subagents, timed_out_after_publication

PACKAGE_ROOTS = [Path(supervisor.__file__).resolve().parent, Path(machines.__file__).resolve().parent]


def failure(stage: str, category: str, provider: str = "ACP") -> str:
    return f"Subagent failure (provider: {provider}; stage: {stage}; category: {category})"


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agents.toml"
    path.write_text(text, encoding="utf-8")
    return path


def toml_list(items: list[str]) -> str:
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


# -- --version and --help -----------------------------------------------------------------


def test_version(tmp_path: Path) -> None:
    proc = subagents("--version", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0,
        f"subagents {version('subagent-supervisor')}\n",
        "",
    )


def test_run_help_shows_the_command_and_the_exit_statuses(tmp_path: Path) -> None:
    proc = subagents("run", "--help", cwd=tmp_path)
    assert proc.returncode == 0
    assert "TASK [-- COMMAND ARGS...]\n" in proc.stdout
    assert "--start-timeout SECONDS" in proc.stdout
    assert proc.stdout.endswith(
        "exit status:\n"
        "  0    the run completed\n"
        "  1    any other result, or the start failed\n"
        "  2    a usage or configuration error (nothing was started)\n"
        "  130  local cancellation (Ctrl-C or --timeout)\n"
        "  143  SIGTERM\n"
    )


# -- the start deadline -------------------------------------------------------------------


HUNG_AT = {"initialize": "initialize", "new-session": "session/new"}
"""The child's hang (``ACP_CHILD_HANG``) -> the request it never answers."""
STAGES_UP_TO = {"initialize": ["initialize"], "new-session": ["initialize", "new-session"]}


@pytest.mark.parametrize("hang", ["initialize", "new-session"])
def test_start_timeout_flag_fails_a_hung_start_as_transport(tmp_path: Path, hang: str) -> None:
    """A start hung at ``hang`` fails as ``transport`` at that stage when its deadline passes.

    The deadline covers the whole start (the supervisor's import of the SDK, the child's own
    start, the requests before the hung one): on a loaded machine it may pass before the
    child has even read the request it hangs at.  The child logs every request it reads;
    until that log holds the hung request the start is tried again with twice the deadline
    (each try still a hung start that timed out, at a stage up to the hung one)."""
    deadline = 5
    while True:
        frames = tmp_path / f"frames-{deadline}.jsonl"
        proc = subagents(
            "run",
            "--json",
            "--start-timeout",
            str(deadline),
            "t",
            "--",
            *ACP_CHILD,
            cwd=tmp_path,
            env={"ACP_CHILD_HANG": hang, "ACP_CHILD_LOG_FILE": str(frames)},
        )
        assert proc.returncode == 1
        doc = as_json(proc)
        assert (doc["started"], doc["quiescent"]) == (False, True)
        read = (
            [json.loads(line).get("method") for line in frames.read_text().splitlines()]
            if frames.exists()
            else []
        )
        if HUNG_AT[hang] in read:  # it was sent before the deadline passed: the start hung there
            assert doc["diagnostic"] == failure(hang, "transport")
            return
        assert doc["diagnostic"] in [failure(stage, "transport") for stage in STAGES_UP_TO[hang]]
        deadline *= 2


def test_start_timeout_ms_config_key(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f'[[provider]]\nkind = "acp"\ncommand = {json.dumps(PYTHON)}\nargs = {toml_list(ACP_CHILD[1:])}\n'
        'start_timeout_ms = 500\nenv = { ACP_CHILD_HANG = "initialize" }\n',
    )
    proc = subagents("run", "--config", str(config), "t", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.endswith(f"subagents: {failure('initialize', 'transport')}\n")


@pytest.mark.parametrize(
    ("kind", "keys", "expected"),
    [
        (
            "dsh-sdk",
            f"command = {json.dumps(PYTHON)}\nargs = {toml_list([str(CHILDREN / 'fake_dsh_runtime.py')])}\n"
            'env = { FAKE_DSH_HANG_INIT = "1" }\n',
            failure("initialize", "transport", "DSH SDK"),
        ),
        (
            "codex",
            'codex_path = "codex-standin"\nenv = { CODEX_STANDIN_STARTUP = "hang" }\n',
            failure("initialize", "unknown", "Codex"),
        ),
    ],
    ids=["dsh-sdk", "codex"],
)
def test_start_timeout_on_the_other_kinds(tmp_path: Path, kind: str, keys: str, expected: str) -> None:
    from tests.support.codex import standin_binary

    standin_binary(tmp_path)
    config = write_config(tmp_path, f'[[provider]]\nkind = "{kind}"\n{keys}start_timeout_ms = 500\n')
    proc = subagents("run", "--json", "--config", str(config), "t", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    doc = as_json(proc)
    assert (doc["started"], doc["diagnostic"], doc["quiescent"]) == (False, expected, True)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "abc"])
def test_a_bad_start_timeout_is_a_usage_error(tmp_path: Path, value: str) -> None:
    proc = subagents("run", f"--start-timeout={value}", "t", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("subagents: ")
    assert proc.stderr.count("\n") == 1


# -- a stdout line that is not JSON-RPC ----------------------------------------------------


@pytest.mark.parametrize(
    ("at", "frame", "hang", "stage"),
    [
        ("start", "Loading the agent...", "initialize", "initialize"),
        ("initialize", '{"not": "json-rpc"}', "initialize", "initialize"),
        ("new-session", "[1, 2]", "new-session", "new-session"),
    ],
)
def test_a_line_that_is_not_json_rpc_fails_at_once(
    tmp_path: Path, at: str, frame: str, hang: str, stage: str
) -> None:
    # The child keeps running and never answers: only the bad line can end the start
    # (the start deadline is ten minutes, the test's own timeout two).
    env = {"ACP_CHILD_FRAMES_AT": at, "ACP_CHILD_FRAMES": json.dumps([frame]), "ACP_CHILD_HANG": hang}
    proc = subagents("run", "--json", "--start-timeout", "600", "t", "--", *ACP_CHILD, cwd=tmp_path, env=env)
    assert proc.returncode == 1
    doc = as_json(proc)
    assert (doc["started"], doc["diagnostic"], doc["quiescent"]) == (False, failure(stage, "protocol"), True)


def test_a_line_that_is_not_json_rpc_fails_the_prompt(tmp_path: Path) -> None:
    env = {
        "ACP_CHILD_FRAMES_AT": "prompt",
        "ACP_CHILD_FRAMES": json.dumps(["oops"]),
        "ACP_CHILD_HANG": "prompt",
    }
    proc = subagents("run", "--json", "t", "--", *ACP_CHILD, cwd=tmp_path, env=env)
    doc = as_json(proc)
    assert (proc.returncode, doc["stop_reason"], doc["diagnostic"]) == (
        1,
        "error",
        failure("prompt", "protocol"),
    )
    assert doc["output"] == "hello from acp_child"


# -- a child that cannot be started ---------------------------------------------------------


def _program(tmp_path: Path, reason: str) -> Path:
    if reason == "not found":
        return tmp_path / "no-such-agent"
    path = tmp_path / ("agent-dir" if reason == "a directory" else "agent")
    if reason == "a directory":
        path.mkdir()
    elif reason == "permission denied":
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    else:  # executable bits, but no format the kernel can run
        path.write_bytes(b"\x00\x01 not a program\n")
        path.chmod(stat.S_IRWXU)
    return path


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("not found", "not found"),
        ("permission denied", "permission denied"),
        ("no format", "not an executable file"),
        ("a directory", "not an executable file"),
    ],
)
def test_a_spawn_failure_says_which_command_and_why(tmp_path: Path, reason: str, said: str) -> None:
    program = _program(tmp_path, reason)
    proc = subagents("run", "t", "--", str(program), "--flag", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        "subagents: initialize\n"
        "subagents: process\n"
        "subagents: teardown\n"
        f"subagents: could not start '{program}': {said}\n"
        f"subagents: {failure('process', 'process-start')}\n"
    )


def test_a_spawn_failure_under_json_keeps_the_diagnostic_closed(tmp_path: Path) -> None:
    program = tmp_path / "no-such-agent"
    proc = subagents("run", "--json", "t", "--", str(program), cwd=tmp_path)
    assert proc.returncode == 1
    assert as_json(proc)["diagnostic"] == failure("process", "process-start")
    assert proc.stderr.endswith(f"subagents: could not start '{program}': not found\n")
    assert str(program) not in proc.stdout


def test_a_spawn_failure_with_verbose_shows_one_traceback(tmp_path: Path) -> None:
    proc = subagents("run", "--verbose", "t", "--", str(tmp_path / "no-such-agent"), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.count("the raw start failure") == 1  # one chained report
    assert proc.stderr.count("FileNotFoundError: [Errno 2]") == 1


# -- local cancellation says what happened --------------------------------------------------


@pytest.mark.parametrize("hang", ["initialize", "prompt"])
def test_timeout_says_what_happened(tmp_path: Path, hang: str) -> None:
    if hang == "prompt":  # after publication, whatever the machine's load (see the helper)
        proc, seconds = timed_out_after_publication(tmp_path)
    else:  # the start never finishes: the timer cannot lose
        seconds = 1.0
        proc = subagents(
            "run", "--timeout", "1", "t", "--", *ACP_CHILD, cwd=tmp_path, env={"ACP_CHILD_HANG": hang}
        )
    assert proc.returncode == 130
    lines = proc.stderr.splitlines()
    assert f"subagents: timed out after {seconds:g} s; stopping the child (Ctrl-C to kill it now)" in lines
    assert lines[-1] == "subagents: subagent run was cancelled"
    assert "aborted before" not in proc.stderr


def test_timeout_line_keeps_the_seconds_given(tmp_path: Path) -> None:
    proc = subagents(
        "run", "--timeout", "0.5", "t", "--", *ACP_CHILD, cwd=tmp_path, env={"ACP_CHILD_HANG": "1"}
    )
    assert proc.returncode == 130
    assert "subagents: timed out after 0.5 s; stopping the child (Ctrl-C to kill it now)\n" in proc.stderr


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_says_what_happened(tmp_path: Path, sig: signal.Signals, status: int) -> None:
    cli = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "run", "t", "--", *ACP_CHILD],
        cwd=tmp_path,
        env={**os.environ, "ACP_CHILD_HANG": "prompt"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cli.stderr is not None
    for line in cli.stderr:  # published once the prompt stage is shown
        if line == "subagents: prompt\n":
            break
    cli.send_signal(sig)
    _, err = cli.communicate(timeout=60)
    assert cli.returncode == status
    assert err.startswith("subagents: cancelled; stopping the child (Ctrl-C again to kill it now)\n")
    assert err.endswith("subagents: subagent run was cancelled\n")


# -- strict configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('dispose_grace_ms = "3000"', "dispose_grace_ms: must be a number"),
        ("dispose_grace_ms = true", "dispose_grace_ms: must be a number"),
        ('dispose_eof_grace_ms = "6000"', "dispose_eof_grace_ms: must be a number"),
        ('start_timeout_ms = "60000"', "start_timeout_ms: must be a number"),
        (
            "start_timeout_ms = 0",
            "start_timeout_ms: must be a positive finite number no greater than 2147483647",
        ),
        ('max_inflight_requests = "64"', "max_inflight_requests: must be an integer"),
        ("max_inflight_requests = 0", "max_inflight_requests: Input should be greater than 0"),
        ('max_frame_bytes = "100"', "max_frame_bytes: must be an integer"),
        ('subreaper = "yes"', "subreaper: must be true or false"),
        ("subreaper = 1", "subreaper: must be true or false"),
    ],
)
def test_config_values_are_strict(tmp_path: Path, line: str, message: str) -> None:
    config = write_config(tmp_path, f'[[provider]]\nkind = "acp"\nname = "a"\ncommand = "x"\n{line}\n')
    proc = subagents("run", "--config", str(config), "t", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f'subagents: {config}: provider[0] "a": {message}\n'


# -- diagrams ------------------------------------------------------------------------------


def _package_files() -> dict[Path, float]:
    return {
        p: p.stat().st_mtime
        for root in PACKAGE_ROOTS
        for p in root.rglob("*")
        if "__pycache__" not in p.parts
    }


def test_diagrams_print_mermaid_and_write_nothing(tmp_path: Path) -> None:
    before = _package_files()
    proc = subagents("diagrams", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout == "\n".join(_diagrams.render().values())
    assert "```mermaid\nstateDiagram-v2" in proc.stdout
    assert list(tmp_path.iterdir()) == []
    assert _package_files() == before


def test_diagrams_out_writes_there_only(tmp_path: Path) -> None:
    before = _package_files()
    out = tmp_path / "out"
    proc = subagents("diagrams", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(_diagrams.render())
    assert proc.stdout == "".join(f"{out / name}\n" for name in _diagrams.render())
    assert _package_files() == before


def test_svg_without_graphviz_writes_nothing(tmp_path: Path) -> None:
    before = _package_files()
    empty = tmp_path / "bin"
    empty.mkdir()
    svg = tmp_path / "svg"
    out = tmp_path / "out"
    proc = subagents("diagrams", "--out", str(out), "--svg", str(svg), cwd=tmp_path, env={"PATH": str(empty)})
    assert proc.returncode == 1
    assert proc.stderr == (
        "subagents: SVG needs graphviz's `dot` on PATH (e.g. `apt-get install graphviz`); nothing was written\n"
    )
    assert (svg.exists(), out.exists()) == (False, False)
    assert _package_files() == before


def test_diagrams_check_needs_a_directory(tmp_path: Path) -> None:
    proc = subagents("diagrams", "--check", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "subagents: argument --check: expected one argument\n"


# -- trace and audit -------------------------------------------------------------------------


def test_trace_lines_carry_t_and_machine_like_the_audit(tmp_path: Path) -> None:
    proc = subagents("run", "--json", "--trace", "say hello", cwd=tmp_path)
    assert proc.returncode == 0
    doc = as_json(proc)
    traced = [json.loads(line) for line in proc.stderr.splitlines()]
    assert {line["run_id"] for line in traced} == {doc["run_id"]}
    assert [{k: v for k, v in line.items() if k != "run_id"} for line in traced] == doc["audit"]
    assert all(set(entry) == {"event", "source", "target", "t", "machine", "turn"} for entry in doc["audit"])
    machines = [entry["machine"] for entry in doc["audit"]]
    assert machines[0] == "lifecycle"
    assert set(machines) == {"lifecycle", "ladder"}
    ladder_targets = [e["target"] for e in doc["audit"] if e["machine"] == "ladder"]
    assert set(ladder_targets) <= {"eof-wait", "term-wait", "kill-wait", "gone", "survived"}
    times = [entry["t"] for entry in doc["audit"]]
    assert times == sorted(times)
    assert times[0] >= 0


# -- the inbound request bound ------------------------------------------------------------------


def test_a_request_flood_fails_as_protocol(tmp_path: Path) -> None:
    env = {"ACP_CHILD_FLOOD_AT": "prompt", "ACP_CHILD_FLOOD": "100000"}
    proc = subagents("run", "--json", "t", "--", *ACP_CHILD, cwd=tmp_path, env=env)
    assert proc.returncode == 1
    doc = as_json(proc)
    assert (doc["stop_reason"], doc["diagnostic"], doc["quiescent"]) == (
        "error",
        failure("prompt", "protocol"),
        True,
    )


def test_a_request_flood_at_startup_fails_as_protocol(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f'[[provider]]\nkind = "acp"\ncommand = {json.dumps(PYTHON)}\nargs = {toml_list(ACP_CHILD[1:])}\n'
        'max_inflight_requests = 3\nenv = { ACP_CHILD_FLOOD_AT = "initialize", ACP_CHILD_FLOOD = "4" }\n',
    )
    proc = subagents("run", "--json", "--config", str(config), "t", cwd=tmp_path)
    assert proc.returncode == 1
    assert as_json(proc)["diagnostic"] == failure("initialize", "protocol")


def test_a_dsh_runtime_request_flood_fails_as_protocol(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        f'[[provider]]\nkind = "dsh-sdk"\ncommand = {json.dumps(PYTHON)}\n'
        f"args = {toml_list([str(CHILDREN / 'fake_dsh_runtime.py')])}\n"
        'env = { FAKE_DSH_FLOOD_AT = "prompt" }\n',
    )
    proc = subagents("run", "--json", "--config", str(config), "t", cwd=tmp_path)
    assert proc.returncode == 1
    doc = as_json(proc)
    assert (doc["diagnostic"], doc["quiescent"]) == (failure("session-run", "protocol", "DSH SDK"), True)


# -- flags that apply by what the entry's kind declares ------------------------------------------


@pytest.mark.parametrize(
    ("entry", "flags", "message"),
    [
        (
            'kind = "codex"\n',
            ("--", PYTHON),
            "-- COMMAND applies to entries that run a command, not codex",
        ),
        (
            'kind = "claude-code"\n',
            ("--", PYTHON),
            "-- COMMAND applies to entries that run a command, not claude-code",
        ),
        (
            'kind = "dsh-sdk"\ncommand = "dsh-runtime"\n',
            ("--permission", "allow"),
            "--permission applies to entries with a permission key, not dsh-sdk",
        ),
        (
            'kind = "codex"\n',
            ("--permission", "reject"),
            "--permission applies to entries with a permission key, not codex",
        ),
    ],
    ids=["command-codex", "command-claude-code", "permission-dsh-sdk", "permission-codex"],
)
def test_a_flag_the_kind_has_no_key_for_is_a_usage_error(
    tmp_path: Path, entry: str, flags: tuple[str, ...], message: str
) -> None:
    config = write_config(tmp_path, f"[[provider]]\n{entry}")
    permission, command = (list(flags), []) if flags[0] == "--permission" else ([], list(flags))
    proc = subagents("run", "--config", str(config), *permission, "t", *command, cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"subagents: {message}\n")


def test_a_command_replaces_a_dsh_sdk_entrys_command(tmp_path: Path) -> None:
    """``-- COMMAND`` applies to every kind whose config extends CommandConfig."""
    config = write_config(tmp_path, '[[provider]]\nkind = "dsh-sdk"\ncommand = "no-such-dsh-runtime"\n')
    runtime = [PYTHON, str(CHILDREN / "fake_dsh_runtime.py")]
    proc = subagents("run", "--json", "--config", str(config), "t", "--", *runtime, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert as_json(proc)["stop_reason"] == "completed"


def test_without_a_config_the_provider_is_the_example_kind(tmp_path: Path) -> None:
    proc = subagents("run", "--provider", "codex", "t", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        "subagents: --provider needs --config (without it the provider is acp)\n",
    )
