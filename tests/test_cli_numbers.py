"""Every numeric option and key reads ASCII digits only, and says so in one line (exit 2).

``"²".isdigit()`` is true and ``int("²")`` raises: ``batch --max-pids ²`` printed a
traceback, ``run --pids-max ²`` Python's raw ``invalid literal for int()``.  And
``int("٣") == 3``: a flag read Arabic-Indic or fullwidth digits as numbers while TOML,
JSON and pydantic do not.  One rule now (``supervisor/cli/_numbers.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

VALUES = ("²", "٣")  # superscript two (not a decimal digit), Arabic-Indic three (fullwidth: the keys)

FLAGS = [
    ("run", "--timeout"),
    ("run", "--start-timeout"),
    ("run", "--memory-max"),
    ("run", "--pids-max"),
    ("run", "--cpu-max"),
    ("run", "--stall-timeout"),
    ("chat", "--pids-max"),
    ("batch", "--concurrency"),
    ("batch", "--ray-num-cpus"),
    ("batch", "--max-memory"),
    ("batch", "--max-pids"),
    ("mcp", "--max-concurrent"),
    ("mcp", "--max-memory"),
    ("mcp", "--max-pids"),
    ("runs", "--limit"),
]


def subagents(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def command_line(command: str, flag: str, value: str, tmp_path: Path) -> list[str]:
    if command == "batch":
        items = tmp_path / "items.jsonl"
        items.write_text('{"id": "a", "task": "t"}\n')
        return [command, f"{flag}={value}", str(items)]
    if command == "runs":
        return [command, "--journal", str(tmp_path / "j.db"), f"{flag}={value}"]
    if command == "mcp":
        return [command, f"{flag}={value}"]
    return [command, f"{flag}={value}", "t"] if command == "run" else [command, f"{flag}={value}"]


@pytest.mark.parametrize("value", VALUES, ids=["superscript", "arabic-indic"])
@pytest.mark.parametrize(("command", "flag"), FLAGS, ids=[f"{c}{f}" for c, f in FLAGS])
def test_a_number_in_other_digits_is_one_usage_line(
    tmp_path: Path, command: str, flag: str, value: str
) -> None:
    proc = subagents(*command_line(command, flag, value, tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("subagents")
    assert flag in proc.stderr
    assert "must be" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "invalid literal" not in proc.stderr


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("memory_max", '"３M"'),
        ("memory_max", '"٣G"'),
        ("pids_max", '"²"'),
        ("cpu_max", '"٣"'),
        ("timeout_ms", '"３"'),
    ],
)
def test_a_config_key_in_other_digits_is_one_line_naming_it(tmp_path: Path, key: str, value: str) -> None:
    config = tmp_path / "agents.toml"
    config.write_text(f'[[provider]]\nkind = "acp"\nname = "a"\ncommand = "true"\n{key} = {value}\n')
    proc = subagents("run", "--config", str(config), "t", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert key in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ascii_numbers_still_read() -> None:
    from supervisor.cli._numbers import ascii_integer, ascii_number
    from supervisor.process import parse_memory

    assert ascii_integer(" 64 ") == 64
    assert ascii_number("0.5") == 0.5
    assert ascii_number("1e3") == 1000.0
    assert parse_memory("512M") == 512 * 1024 * 1024
    for bad in ("٣", "３", "²", "", "1_000", "0x10"):
        with pytest.raises(ValueError, match="must be a positive integer"):
            ascii_integer(bad)
    with pytest.raises(ValueError, match="must be a number of bytes"):
        parse_memory("３M")
