"""The README's promises that can drift: the test line CI runs and the diagram it shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from supervisor._version import DISTRIBUTION
from supervisor.cli import _diagrams

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_ci_runs_exactly_the_readme_test_line() -> None:
    ci_line = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"```sh\n{ci_line}\n```" in README


def test_readme_shows_every_current_lifecycle_diagram() -> None:
    for name, text in _diagrams.render(DISTRIBUTION).items():
        if name == "ladder.md":
            continue
        current = re.search(r"```mermaid\n.*?```", text, re.S)
        assert current is not None
        assert current.group(0) in README, f"README lacks the current {name} diagram"


def _embedding_example() -> str:
    section = README.split("## Embedding", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    return block.group(1)


def _run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def test_the_embedding_example_runs_verbatim(tmp_path: Path) -> None:
    proc = _run_python(_embedding_example(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Hello!")
    assert proc.stderr == ""


def test_the_embedding_example_handles_a_failed_start(tmp_path: Path) -> None:
    code = _embedding_example()
    agent = "example_agent_config()"
    assert code.count(agent) == 1
    failing = code.replace(agent, "example_agent_config(start_timeout_ms=0.001)")  # cannot be ready in time
    proc = _run_python(failing, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "could not start the subagent: "
        "Subagent failure (provider: ACP; stage: initialize; category: transport)\n"
    )


def test_readme_shows_the_complete_third_party_provider() -> None:
    module = (ROOT / "tests" / "plugin_provider" / "echo_provider" / "__init__.py").read_text()
    assert f"```python\n{module.rstrip()}\n```" in README


def _conversation_section() -> str:
    return README.split("## Conversations: speaking to a subagent again", 1)[1].split("\n## ", 1)[0]


def test_the_conversation_example_runs_verbatim_and_prints_what_the_readme_shows(tmp_path: Path) -> None:
    section = _conversation_section()
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shown = re.search(r"prints .*?\n\n```\n(.*?)```", section, re.S)
    assert code is not None
    assert shown is not None
    proc = _run_python(code.group(1), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown.group(1)
    assert proc.stderr == ""


def _section_blocks(heading: str) -> list[str]:
    """The fenced blocks of the README section under ``heading`` (up to the next heading)."""
    section = re.split(r"\n#{2,3} ", README.split(heading, 1)[1], maxsplit=1)[0]
    return re.findall(r"```[a-z]*\n(.*?)```", section, re.S)


def _run_sh(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": path},
    )


def test_the_chat_example_prints_what_the_readme_shows(tmp_path: Path) -> None:
    script, shown = _section_blocks("### `subagents chat`")[:2]
    proc = _run_sh(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown


def test_the_batch_turns_example_writes_the_turns_the_readme_shows(tmp_path: Path) -> None:
    import json

    script, shown = _section_blocks("### Conversation items: `turns`")[:2]
    proc = _run_sh(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    [record] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [json.loads(line) for line in shown.splitlines()] == record["turns"]
