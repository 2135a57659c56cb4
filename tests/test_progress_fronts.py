"""The fronts show progress: ``run`` and ``chat`` on a real pseudo-terminal draw the live
progress line (rich) and erase it before the answer; through pipes nothing changes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.test_batch import supervised_children, write_input
from tests.test_chat import Terminal

RUN = [sys.executable, "-m", "supervisor.cli", "run"]
BATCH = [sys.executable, "-m", "supervisor.cli", "batch"]
ERASE = "\x1b[2K"
TASK = "fix it\n@tools read,edit*2,execute\n@slow 300"


def test_run_on_a_terminal_shows_the_live_line_and_erases_it_before_the_answer(tmp_path: Path) -> None:
    term = Terminal(tmp_path, TASK, command=RUN)
    try:
        shown = term.wait_for(r"Hello! You asked: fix it\n")
    finally:
        status = term.close()
    assert status == 0
    assert "subagents: prompt · turn 1 · " in shown
    assert re.search(r"4 tool calls \(edit 2, execute 1, read 1\)", shown)
    last_line = shown.rindex("subagents: ")
    answer = shown.index("Hello! You asked: fix it")
    assert ERASE in shown[last_line:answer]  # the live line is erased before the answer
    assert supervised_children() == []


def test_run_through_pipes_prints_the_stage_lines_as_before(tmp_path: Path) -> None:
    proc = subprocess.run([*RUN, TASK], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Hello! You asked: fix it\n"
    stages = ("initialize", "new-session", "prompt", "teardown")
    assert proc.stderr == "".join(f"subagents: {stage}\n" for stage in stages)  # no progress line


def test_chat_on_a_terminal_shows_each_turn_s_line_and_never_at_the_prompt(tmp_path: Path) -> None:
    slow = {"SUBAGENT_EXAMPLE_TOOLS": "search*2", "SUBAGENT_EXAMPLE_SLOW_MS": "300"}
    term = Terminal(tmp_path, env=slow)
    try:
        term.wait_for(r"^> $")
        term.type("first\n")
        first = term.wait_for(r"> $")
        term.type("second\n")
        second = term.wait_for(r"> $")
        term.type("\x04")  # end of input: the chat ends
    finally:
        status = term.close()
    assert status == 0
    for turn, shown in ((1, first), (2, second)):
        assert f"subagents: prompt · turn {turn} · " in shown
        assert "2 tool calls (search 2" in shown
        answer = shown.index("Hello! You asked: ")
        assert ERASE in shown[shown.rindex("subagents: ", 0, answer) : answer]
        assert "subagents: " not in shown[answer:]  # nothing drawn at the prompt
    assert supervised_children() == []


def test_batch_on_a_terminal_counts_the_running_runs_by_stage(tmp_path: Path) -> None:
    source = write_input(
        tmp_path / "in.jsonl",
        *({"id": f"r{i}", "task": f"job {i}\n@tools execute*8\n@slow 250"} for i in range(3)),
    )
    term = Terminal(tmp_path, str(source), "--concurrency", "3", command=BATCH)
    try:
        shown = term.wait_for(r"3 running \(prompt 3\)")
        term.wait_for(r"3 completed, 0 failed, 0 cancelled in ")
    finally:
        status = term.close()
    assert status == 0
    assert "subagents batch" not in shown  # off the plain per-run lines: the bar only
    assert supervised_children() == []


def test_batch_through_pipes_prints_one_line_per_run_as_before(tmp_path: Path) -> None:
    source = write_input(tmp_path / "in.jsonl", {"id": "a", "task": "one\n@tools edit"})
    proc = subprocess.run([*BATCH, str(source)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first, summary = proc.stderr.splitlines()
    assert re.fullmatch(r"subagents batch: a: completed in \d+\.\d s", first)
    assert re.fullmatch(r"1 completed, 0 failed, 0 cancelled in \d+\.\d s", summary)
