"""``subagents batch`` with hostile input and a hostile output (one clear error, never a traceback):
real CLI processes.

* A line that is not UTF-8 is one error record; the batch goes on.
* JSONL is split on ``\\n`` only: U+2028, U+2029 and U+0085 are legal inside JSON strings.
* A lone surrogate in an id or a task (a ``\\ud800`` escape) is U+FFFD in the record.
* ``--out`` on a full filesystem (a real tmpfs mounted for the test): the first write error
  stops new runs, tears the running ones down through the ladder, keeps every record
  already written whole, and exits with one clear line; ``--resume`` finishes the rest.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from tests.conftest import CGROUP_AVAILABLE, run_cgroups
from tests.test_batch import entry, subagents_batch, supervised_children, wait_for, write_config
from tests.test_hostile_text import FUZZ, HOSTILE, TEXT, Hostile, clean, frames_env

EXAMPLE_ANSWER = "Hello! You asked: "


def write_lines(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def item(**fields: Any) -> bytes:
    """One JSONL line: raw UTF-8 (U+2028 and friends stay unescaped); a lone surrogate
    becomes its ``\\udXXX`` escape, the way a JavaScript producer writes it."""
    text = json.dumps(fields, ensure_ascii=False)
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")


def records(text: str) -> list[dict[str, Any]]:
    """The records of an output: one per ``\\n``-terminated line (``str.splitlines`` would also
    cut at the U+2028 a record may hold unescaped)."""
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def by_id(text: str) -> dict[str, dict[str, Any]]:
    found = records(text)
    assert len(found) == len({r["id"] for r in found}), found
    return {r["id"]: r for r in found}


def no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr


# -- input -----------------------------------------------------------------------------------


def test_a_line_that_is_not_utf8_is_one_error_record(tmp_path: Path) -> None:
    """Before: the whole batch was refused (exit 2, ``not UTF-8 text``)."""
    source = write_lines(
        tmp_path / "in.jsonl",
        item(id="a", task="say hello"),
        b'{"id": "broken", "task": "caf\xe9 \xff"}',
        b'{"task": "\xfe no id"}',
        item(id="c", task="say hello"),
    )
    proc = subagents_batch(str(source), cwd=tmp_path)
    no_traceback(proc.stderr)
    assert proc.returncode == 1
    found = by_id(proc.stdout)
    assert set(found) == {"a", "broken", "line 3", "c"}
    assert found["broken"] == {"id": "broken", "error": "not valid UTF-8"}
    assert found["line 3"] == {"id": "line 3", "error": "not valid UTF-8"}
    assert found["a"]["stop_reason"] == found["c"]["stop_reason"] == "completed"


def test_jsonl_is_split_on_newline_only(tmp_path: Path) -> None:
    """Before: each task below was cut at its separator and reported ``not valid JSON``."""
    tasks = {"ls": "one\u2028two", "ps": "one\u2029two", "nel": "one\u0085two", "cr": "one\rtwo"}
    source = write_lines(tmp_path / "in.jsonl", *(item(id=key, task=task) for key, task in tasks.items()))
    assert b"\xe2\x80\xa8" in source.read_bytes()  # raw U+2028 in the file, not an escape
    echo = write_config(
        tmp_path / "c.toml", entry("echo", {"ACP_CHILD_ECHO_PROMPT": "1", "ACP_CHILD_TEXT": ""})
    )
    proc = subagents_batch(str(source), "--config", str(echo), cwd=tmp_path)
    no_traceback(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    found = by_id(proc.stdout)
    assert {key: record["output"] for key, record in found.items()} == {
        key: f"prompt={task}\n" for key, task in tasks.items()
    }


def test_a_lone_surrogate_in_an_id_or_a_task_is_u_fffd_in_the_record(tmp_path: Path) -> None:
    """Before: ``UnicodeEncodeError`` writing the record (the id is echoed verbatim)."""
    source = write_lines(
        tmp_path / "in.jsonl",
        item(id="half \ud83d", task="say \udc00 hello"),
        item(id="duplicate \ud800", task="x", provider="nobody"),
    )
    proc = subagents_batch(str(source), cwd=tmp_path)
    no_traceback(proc.stderr)
    out = proc.stdout.encode("utf-8")  # the records are valid UTF-8 as a whole
    assert b"\\ud8" not in out
    assert b"\\udc" not in out
    found = by_id(proc.stdout)
    assert found["half \ufffd"]["output"] == EXAMPLE_ANSWER + "say \ufffd hello"
    assert found["duplicate \ufffd"]["error"].startswith("provider: no provider named 'nobody'")


@FUZZ
@given(hostile=HOSTILE, ident=TEXT, task=TEXT)
def test_fuzz_the_batch_records(tmp_path: Path, hostile: Hostile, ident: str, task: str) -> None:
    """Hostile chunks from the child, a hostile id and task from the input line."""
    knobs = {**frames_env(tmp_path, hostile.frames), "ACP_CHILD_ECHO_PROMPT": "1"}
    config = write_config(tmp_path / "c.toml", entry("hostile", knobs))
    line = item(id="x" + ident, task="t" + task)
    source = write_lines(tmp_path / "in.jsonl", line)
    proc = subagents_batch(str(source), "--config", str(config), cwd=tmp_path)
    no_traceback(proc.stderr)
    (record,) = records(proc.stdout)
    sent = json.loads(line)  # escapes of a high and a low surrogate side by side make one character
    assert record["id"] == clean(sent["id"])
    assert record["output"] == "prompt=" + clean(sent["task"]) + "\n" + hostile.expected


# -- output: a full filesystem ---------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs of our own (root only): a filesystem that really fills up."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> None:
    """Take every byte left on the filesystem (a real ``ENOSPC`` for the next writer)."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)


def host_groups_of(pid: int) -> list[Path]:
    """The cgroup host groups a process with this pid left (none once it exited cleanly)."""
    if not CGROUP_AVAILABLE:
        return []
    leaves = run_cgroups()
    from supervisor.process import ContainmentMode, containment_for

    containment = containment_for(ContainmentMode.CGROUP)
    base = getattr(containment, "base", None)
    assert base is not None or leaves == []
    return sorted(Path(base).glob(f"subagents-{pid}-*")) if base is not None else []


def test_a_full_output_filesystem_stops_the_batch_cleanly_and_resume_finishes_it(
    tmp_path: Path, small_tmpfs: Path
) -> None:
    """Before: tracebacks (``No space left on device``, cancel-scope errors), the in-flight
    runs left to the keeper once the CLI died, the host group left behind.

    Four fast runs write their records; then four runs hold every slot (three hanging, one
    held at a gate the test opens) and three more wait queued.  The test fills the disk and
    opens the gate: the gated run's record is the first write that fails.
    """
    hanging = ("hang1", "hang2", "hang3")
    ready = {name: tmp_path / f"{name}.ready" for name in (*hanging, "gated")}
    gate = tmp_path / "gate.fifo"
    os.mkfifo(gate)
    frames = tmp_path / "frames.log"
    hang = {"ACP_CHILD_HANG": "1", "ACP_CHILD_LOG_FILE": str(frames)}
    gated = {
        "ACP_CHILD_GATE_FIFO": str(gate),
        "ACP_CHILD_READY_FILE": str(ready["gated"]),
        "ACP_CHILD_TEXT": "x" * 8192,  # a record over a page: it needs space the full tmpfs has not
    }
    first = write_config(
        tmp_path / "first.toml",
        entry("fast", {}),
        *(entry(name, {**hang, "ACP_CHILD_READY_FILE": str(ready[name])}) for name in hanging),
        entry("gated", gated),
    )
    second = write_config(
        tmp_path / "second.toml", *(entry(name, {}) for name in ("fast", *hanging, "gated"))
    )
    fast = [f"f{i}" for i in range(4)]
    held = ["h1", "h2", "h3", "g"]
    queued = [f"q{i}" for i in range(3)]
    source = write_lines(
        tmp_path / "in.jsonl",
        *(item(id=name, task="say hello", provider="fast") for name in fast),
        *(item(id=f"h{i + 1}", task="x", provider=name) for i, name in enumerate(hanging)),
        item(id="g", task="x", provider="gated"),
        *(item(id=name, task="say hello", provider="fast") for name in queued),
    )
    out = small_tmpfs / "out.jsonl"
    argv = [sys.executable, "-m", "supervisor.cli", "batch", str(source), "--out", str(out)]
    cli = subprocess.Popen(
        [*argv, "--concurrency", "4", "--config", str(first)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for path in ready.values():
            wait_for(path.exists, path.name)
        assert set(by_id(out.read_text())) == set(fast)  # every slot is held now
        written = out.read_bytes()
        fill(small_tmpfs)
        with gate.open("wb"):
            pass  # the gated run finishes; its record is the first write that fails
        stdout, stderr = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:  # a failed assertion above: do not wait for ever
            cli.kill()
            cli.communicate()
    no_traceback(stderr)
    assert cli.returncode == 1, stderr
    assert stdout == ""
    *_, summary, last = stderr.splitlines()
    assert last == (
        f"subagents: {out}: writing a record failed (No space left on device); "
        "the batch stopped (--resume runs the rest)"
    )
    # Nothing starts after the failure: the held four are "cancelled" (not recorded), and of the
    # queued ones at most the first, taken by the gated run's slot as it handed its record over
    # (before the write was tried), was started and cancelled.
    completed, failed, cancelled = (int(part.split()[0]) for part in summary.split(", "))
    assert (completed, failed) == (len(fast), 0)
    assert cancelled in (len(held), len(held) + 1)
    assert out.read_bytes() == written  # every record written before is intact, nothing torn after
    # the hanging runs were cancelled by the CLI (the ladder), not killed by the keeper
    assert frames.read_text().count('"session/cancel"') == len(hanging)
    assert supervised_children() == []
    assert host_groups_of(cli.pid) == []

    (small_tmpfs / "filler").unlink()
    resumed = subagents_batch(
        str(source), "--out", str(out), "--resume", "--config", str(second), cwd=tmp_path
    )
    no_traceback(resumed.stderr)
    assert resumed.returncode == 0, resumed.stderr
    found = by_id(out.read_text())
    assert set(found) == {*fast, *held, *queued}
    assert all(record["stop_reason"] == "completed" for record in found.values())
