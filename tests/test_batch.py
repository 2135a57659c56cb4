"""``subagents batch`` and ``supervisor.batch`` run locally: real CLI processes, real children."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from supervisor import AbortSignal, BatchError, BatchRecord, StderrMode, batch
from supervisor.batching._jobs import BatchEvents
from supervisor.cli._batch_progress import BatchProgress
from tests.conftest import CHILDREN, PYTHON, SESSION_TAG, SESSION_VARIABLE

ACP_CHILD = str(CHILDREN / "acp_child.py")
TIMED = str(CHILDREN / "timed.py")
RECORD_KEYS = {
    "id",
    "run_id",
    "provider",
    "stop_reason",
    "output",
    "diagnostic",
    "exit_code",
    "signal",
    "quiescent",
    "containment",
    "started",
    "duration_s",
    "node",
    "usage",
    "resources",
}


def entry(name: str, env: dict[str, str], *, timed: bool = False, grace_ms: int = 2000) -> str:
    args = [TIMED, PYTHON, "-I", ACP_CHILD] if timed else ["-I", ACP_CHILD]
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    return (
        f'[[provider]]\nkind = "acp"\nname = "{name}"\ncommand = {json.dumps(PYTHON)}\n'
        f"args = {json.dumps(args)}\nenv = {{ {pairs} }}\n"
        f"dispose_eof_grace_ms = {grace_ms}\ndispose_grace_ms = {max(grace_ms, 3000)}\n"
    )


def write_config(path: Path, *entries: str) -> Path:
    path.write_text("\n".join(entries), encoding="utf-8")
    return path


def write_input(path: Path, *items: dict[str, Any] | str) -> Path:
    lines = [item if isinstance(item, str) else json.dumps(item) for item in items]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def subagents_batch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "batch", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
    )


def records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def by_id(text: str) -> dict[str, dict[str, Any]]:
    found = records(text)
    ids = [r["id"] for r in found]
    assert len(ids) == len(set(ids)), ids
    return {r["id"]: r for r in found}


def supervised_children() -> list[psutil.Process]:
    """Live processes of this test session that a supervisor started for some run."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            environ = proc.environ()
            if (
                environ.get(SESSION_VARIABLE) == SESSION_TAG
                and "SUBAGENT_SUPERVISOR_RUN" in environ
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(proc)
    return found


def test_a_batch_of_the_example_agent_with_a_bad_line_of_each_kind(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    source = write_input(
        tmp_path / "in.jsonl",
        {"id": "a", "task": "say hello"},
        "not json",
        "",
        "[1, 2]",
        {"id": "a", "task": "the same id again"},
        {"id": "c", "task": "x", "cwd": "missing"},
        {"id": "d", "task": "x", "colour": "red"},
        {"id": "e", "task": "   "},
        {"id": "f", "task": "x", "provider": "nobody"},
        {"task": "no id"},
        {"id": "g", "task": 7},
        {"id": "h", "task": "in a folder", "cwd": "work"},
    )
    proc = subagents_batch(str(source), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    found = records(proc.stdout)
    errors = {r["id"]: r["error"] for r in found if "error" in r}
    assert errors == {
        "line 2": "not valid JSON",
        "line 4": "not a JSON object",
        "a": "id: duplicate id",
        "c": f"cwd is not an accessible directory: {tmp_path / 'missing'}",
        "d": "colour: unknown key",
        "e": "task: the task is blank",
        "f": "provider: no provider named 'nobody' (have: acp)",
        "line 10": "id: required key is missing",
        "g": "task: must be a string",
    }
    runs = {r["id"]: r for r in found if "error" not in r}
    assert set(runs) == {"a", "h"}
    for run in runs.values():
        assert set(run) == RECORD_KEYS
        assert run["stop_reason"] == "completed"
        assert (run["started"], run["quiescent"], run["exit_code"], run["signal"]) == (True, True, 0, None)
        assert run["provider"] == "acp"
        assert run["containment"] in ("cgroup", "process-tree")
        if run["containment"] == "cgroup":  # what the tree used, from the kernel's counters
            assert run["resources"]["cpu_s"] > 0
        else:
            assert run["resources"] is None
        assert run["diagnostic"] is None
        assert run["duration_s"] >= 0
        assert run["node"] == os.uname().nodename
    assert runs["a"]["output"].startswith("Hello!")
    assert proc.stderr.splitlines()[-1].startswith("2 completed, 9 failed, 0 cancelled in ")
    assert "subagents batch: a: completed in " in proc.stderr
    assert "subagents batch: line 2: error: not valid JSON" in proc.stderr


def test_the_relative_cwd_of_an_item_is_the_input_files_folder(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    (inputs / "repo").mkdir(parents=True)
    config = write_config(
        tmp_path / "c.toml", entry("echo", {"ACP_CHILD_ECHO_CWD": "1", "ACP_CHILD_TEXT": ""})
    )
    source = write_input(
        inputs / "in.jsonl", {"id": "a", "task": "where", "cwd": "repo"}, {"id": "b", "task": "x"}
    )
    proc = subagents_batch(str(source), "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = by_id(proc.stdout)
    assert f"cwd={inputs / 'repo'}\n" in found["a"]["output"]
    assert f"cwd={tmp_path}\n" in found["b"]["output"]  # no cwd: the CLI's own directory


def test_at_most_concurrency_runs_at_once_by_the_childrens_own_clocks(tmp_path: Path) -> None:
    log = tmp_path / "times.log"
    env = {"TIMED_LOG": str(log), "TIMED_BARRIER": "2", "ACP_CHILD_SLOW_MS": "50", "ACP_CHILD_TEXT": "a b c"}
    config = write_config(tmp_path / "c.toml", entry("timed", env, timed=True))
    source = write_input(tmp_path / "in.jsonl", *({"id": f"t{i}", "task": "go"} for i in range(6)))
    # no warm children: each child's own clock then spans its run alone
    proc = subagents_batch(
        str(source), "--config", str(config), "--concurrency", "2", "--warm", "0", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert len(by_id(proc.stdout)) == 6
    events: list[tuple[float, int]] = []
    for line in log.read_text().splitlines():
        what, _pid, at = line.split()
        events.append((float(at), 1 if what == "start" else -1))
    assert len(events) == 12
    running = most = 0
    for _at, step in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at a tie
        running += step
        most = max(most, running)
    assert most == 2  # the barrier makes the first two overlap; the bound keeps it at two


def test_a_crashing_child_and_a_failed_start_among_good_ones(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "c.toml",
        entry("good", {}),
        entry("crash", {"ACP_CHILD_EXIT_AT": "prompt", "ACP_CHILD_EXIT_CODE": "3"}),
        entry("nostart", {"ACP_CHILD_EXIT_AT": "initialize", "ACP_CHILD_EXIT_CODE": "4"}),
    )
    source = write_input(
        tmp_path / "in.jsonl",
        {"id": "g1", "task": "x"},
        {"id": "boom", "task": "x", "provider": "crash"},
        {"id": "g2", "task": "x", "provider": "good"},
        {"id": "never", "task": "x", "provider": "nostart"},
        {"id": "g3", "task": "x"},
    )
    proc = subagents_batch(str(source), "--config", str(config), "--concurrency", "3", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    found = by_id(proc.stdout)
    assert set(found) == {"g1", "g2", "g3", "boom", "never"}
    for name in ("g1", "g2", "g3"):
        assert found[name]["stop_reason"] == "completed"
        assert found[name]["provider"] == "good"
    boom = found["boom"]
    assert (boom["stop_reason"], boom["started"], boom["exit_code"], boom["quiescent"]) == (
        "error",
        True,
        3,
        True,
    )
    assert boom["provider"] == "crash"
    assert boom["diagnostic"]
    never = found["never"]
    assert (never["stop_reason"], never["started"], never["output"]) == (None, False, "")
    assert never["diagnostic"] == (
        "Subagent failure (provider: ACP; stage: initialize; category: process-exit; exit code: 4)"
    )
    assert never["exit_code"] == 4
    assert proc.stderr.splitlines()[-1].startswith("3 completed, 2 failed, 0 cancelled in ")


def wait_for(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_keeps_finished_records_and_resume_runs_the_rest(
    tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    ready = tmp_path / "hanging.ready"
    hang = {"ACP_CHILD_HANG": "1", "ACP_CHILD_IGNORE_CANCEL": "1", "ACP_CHILD_READY_FILE": str(ready)}
    first = write_config(tmp_path / "first.toml", entry("fast", {}), entry("slow", hang))
    second = write_config(tmp_path / "second.toml", entry("fast", {}), entry("slow", {}))
    items = [{"id": "f1", "task": "x"}, {"id": "f2", "task": "x"}]
    items += [{"id": f"s{i}", "task": "x", "provider": "slow"} for i in range(4)]
    source = write_input(tmp_path / "in.jsonl", *items)
    out = tmp_path / "out.jsonl"
    argv = [
        sys.executable,
        "-m",
        "supervisor.cli",
        "batch",
        str(source),
        "--out",
        str(out),
        "--concurrency",
        "2",
    ]
    with subprocess.Popen(
        [*argv, "--config", str(first)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as cli:
        wait_for(ready.exists, "a hanging run")
        wait_for(lambda: len(records(out.read_text())) == 2, "the fast records")
        cli.send_signal(signum)
        stdout, stderr = cli.communicate(timeout=120)
    assert cli.returncode == status, stderr
    assert stdout == ""
    assert set(by_id(out.read_text())) == {"f1", "f2"}
    summary = stderr.splitlines()[-1]
    assert summary.startswith("2 completed, 0 failed, ")
    assert int(summary.split(", ")[2].split()[0]) >= 1  # at least the hanging run was cancelled
    assert supervised_children() == []

    resumed = subagents_batch(
        str(source), "--out", str(out), "--resume", "--config", str(second), cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr
    found = by_id(out.read_text())
    assert set(found) == {"f1", "f2", "s0", "s1", "s2", "s3"}
    assert all(r["stop_reason"] == "completed" for r in found.values())
    assert resumed.stderr.splitlines()[-1].startswith("4 completed, 0 failed, 0 cancelled in ")


def test_a_second_ctrl_c_skips_the_graces_and_still_reaps_every_tree(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    stubborn = {
        "ACP_CHILD_HANG": "1",
        "ACP_CHILD_IGNORE_CANCEL": "1",
        "ACP_CHILD_IGNORE_EOF": "1",
        "ACP_CHILD_TRAP_TERM": "1",
        "ACP_CHILD_READY_FILE": str(ready),
        "ACP_CHILD_LOG_FILE": str(tmp_path / "frames.log"),
    }
    config = write_config(tmp_path / "c.toml", entry("stubborn", stubborn, grace_ms=600_000))
    source = write_input(tmp_path / "in.jsonl", *({"id": f"s{i}", "task": "x"} for i in range(2)))
    argv = [sys.executable, "-m", "supervisor.cli", "batch", str(source), "--config", str(config)]
    with subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as cli:
        wait_for(ready.exists, "a stubborn run")
        cli.send_signal(signal.SIGINT)
        wait_for(lambda: "session/cancel" in (tmp_path / "frames.log").read_text(), "the first Ctrl-C")
        cli.send_signal(signal.SIGINT)  # without this, the graces alone would last 20 minutes
        stdout, stderr = cli.communicate(timeout=120)
    assert cli.returncode == 130, stderr
    assert stdout == ""
    assert supervised_children() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "subagents: --concurrency must be at least 1\n"),
        (["--resume"], "subagents: --resume needs --out (the records to resume from)\n"),
        (["--ray-num-cpus", "0"], "subagents: --ray-num-cpus must be a positive number\n"),
    ],
)
def test_usage_errors_exit_2_before_anything_runs(tmp_path: Path, args: list[str], message: str) -> None:
    source = write_input(tmp_path / "in.jsonl", {"id": "a", "task": "x"})
    proc = subagents_batch(str(source), *args, cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", message)


def test_a_missing_input_file_is_a_usage_error(tmp_path: Path) -> None:
    proc = subagents_batch("nothing.jsonl", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "subagents: nothing.jsonl: cannot read the input file (No such file or directory)\n"


@pytest.mark.anyio
async def test_the_python_api_yields_records_as_runs_finish(tmp_path: Path) -> None:
    items = [{"id": "a", "task": "one"}, {"id": "b", "task": "two"}, {"id": "bad"}]
    found = [outcome async for outcome in batch(items, concurrency=2, cwd=tmp_path)]
    by = {outcome.id: outcome for outcome in found}
    assert isinstance(by["bad"], BatchError)
    assert by["bad"].error == "task: required key is missing"
    for name in ("a", "b"):
        record = by[name]
        assert isinstance(record, BatchRecord)
        assert record.completed
        assert set(record.as_dict()) == RECORD_KEYS


@pytest.mark.anyio
async def test_aborting_the_python_api_cancels_the_running_runs(tmp_path: Path) -> None:
    from supervisor import Registry
    from supervisor.providers.acp import Config, Provider

    registry = Registry()
    hang: dict[str, str | None] = {"ACP_CHILD_HANG": "1", "ACP_CHILD_READY_FILE": str(tmp_path / "ready")}
    config = Config(command=PYTHON, args=["-I", ACP_CHILD], env=hang, stderr=StderrMode.LOG)
    registry.register(Provider(config, name="h"))
    abort = AbortSignal()
    items = [{"id": f"h{i}", "task": "x"} for i in range(4)]
    seen: list[str] = []
    cancelled: list[str] = []
    events = BatchEvents(started=seen.append, cancelled=cancelled.append)

    async def abort_when_ready() -> None:
        while not (tmp_path / "ready").exists():  # noqa: ASYNC110 - a child's file, no event to wait on
            await anyio.sleep(0.05)
        abort.abort()

    async with anyio.create_task_group() as tg:
        tg.start_soon(abort_when_ready)
        found = [
            o
            async for o in batch(
                items, registry=registry, concurrency=2, cwd=tmp_path, abort=abort, events=events
            )
        ]
    assert found == []
    assert len(seen) == 2
    assert sorted(cancelled) == sorted(seen)
    assert supervised_children() == []


def test_the_live_bar_ends_with_the_summary_line() -> None:
    stream = io.StringIO()
    progress = BatchProgress(stream, total=2, live=True)
    progress.started("a")
    progress.finished(BatchError(id="x", error="bad"))
    progress.close()
    assert stream.getvalue().splitlines()[-1].startswith("0 completed, 1 failed, 0 cancelled in ")


@pytest.mark.anyio
async def test_closing_the_python_api_early_tears_the_running_runs_down(tmp_path: Path) -> None:
    items = [{"id": f"t{i}", "task": "x"} for i in range(8)]
    records = batch(items, concurrency=3, cwd=tmp_path)
    async with contextlib.aclosing(records):  # type: ignore[type-var]
        async for outcome in records:
            assert isinstance(outcome, BatchRecord)
            break
    assert supervised_children() == []


def console_spans(stderr: str) -> list[dict[str, Any]]:
    """The spans OpenTelemetry's console exporter printed (indented JSON objects) among other lines."""
    spans, block = [], []
    for line in stderr.splitlines():
        if line == "{":
            block = [line]
        elif block:
            block.append(line)
            if line == "}":
                spans.append(json.loads("\n".join(block)))
                block = []
    return spans


def test_with_otel_the_batch_is_one_span_and_each_run_a_child_of_it(tmp_path: Path) -> None:
    source = write_input(tmp_path / "in.jsonl", {"id": "a", "task": "say hello"}, {"id": "b", "task": "hi"})
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "batch", str(source), "--otel"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OTEL_TRACES_EXPORTER": "console"},
    )
    assert proc.returncode == 0, proc.stderr
    spans = console_spans(proc.stderr)
    (parent,) = [s for s in spans if s["name"] == "subagents batch"]
    runs = [s for s in spans if s["name"] == "invoke_agent acp"]
    assert len(runs) == 2
    assert {s["parent_id"] for s in runs} == {parent["context"]["span_id"]}
    assert {s["context"]["trace_id"] for s in runs} == {parent["context"]["trace_id"]}
    assert {s["attributes"]["gen_ai.agent.id"] for s in runs} == {r["run_id"] for r in records(proc.stdout)}
