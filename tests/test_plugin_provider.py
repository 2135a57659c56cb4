"""A provider from another distribution works through the real CLI with no change here.

``tests/plugin_provider`` is a tiny distribution (one module: chart, vocabulary,
config, run, provider) that registers the kind ``echo`` under the entry-point group.
It is built and installed into a temporary ``--target`` directory that only the CLI
subprocesses see (``PYTHONPATH``), so the test environment itself is not changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor import installed_kinds

DISTRIBUTION = Path(__file__).resolve().parent / "plugin_provider"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    target = tmp_path_factory.mktemp("plugin-target")
    source = tmp_path_factory.mktemp("plugin-source") / "plugin_provider"
    shutil.copytree(DISTRIBUTION, source)  # the build writes beside its sources
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(source)]
    subprocess.run(pip, check=True, capture_output=True, timeout=300)
    return str(target)


def subagents(plugin_path: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (plugin_path, os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "echo.toml"
    config.write_text('[[provider]]\nkind = "echo"\nname = "my-echo"\n')
    return config


def test_the_kind_is_listed(plugin_path: str, tmp_path: Path) -> None:
    proc = subagents(plugin_path, "providers", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    kinds = [line.split()[0] for line in proc.stdout.splitlines() if not line.startswith(" ")]
    assert kinds == ["acp", "dsh-sdk", "claude-code", "codex", "echo"]
    assert "echo         Echo child\n" in proc.stdout


def test_a_run_completes_through_the_cli(plugin_path: str, tmp_path: Path) -> None:
    proc = subagents(plugin_path, "run", "--config", str(write_config(tmp_path)), "hello there", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello there\n"


def test_invalid_utf8_from_the_child_is_replaced_never_a_crash(plugin_path: str, tmp_path: Path) -> None:
    proc = subagents(plugin_path, "run", "--config", str(write_config(tmp_path)), "latin-1", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "caf\ufffd\n"), proc.stderr


def test_a_failure_carries_the_kinds_own_label(plugin_path: str, tmp_path: Path) -> None:
    proc = subagents(plugin_path, "run", "--config", str(write_config(tmp_path)), "fail", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.endswith(
        "subagents: subagent run failed\n"
        "Diagnostic: Subagent failure (provider: Echo; stage: echo; category: child-exit; exit code: 3)\n"
    )


def test_cli_flags_follow_what_the_kind_declares(plugin_path: str, tmp_path: Path) -> None:
    """The echo kind's config has neither ``command`` nor ``permission``: the CLI says so
    by the kind's name, with no table of kinds in the CLI."""
    config = str(write_config(tmp_path))
    proc = subagents(plugin_path, "run", "--config", config, "t", "--", sys.executable, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (
        2,
        "subagents: -- COMMAND applies to entries that run a command, not echo\n",
    )
    proc = subagents(plugin_path, "run", "--config", config, "--permission", "allow", "t", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (
        2,
        "subagents: --permission applies to entries with a permission key, not echo\n",
    )


def test_without_the_distribution_the_kind_is_unknown(tmp_path: Path) -> None:
    if "echo" in installed_kinds():
        pytest.skip("the echo distribution is installed in this environment itself")
    proc = subagents("", "run", "--config", str(write_config(tmp_path)), "hello", cwd=tmp_path)
    assert proc.returncode == 2
    assert f"kind: must be one of {', '.join(installed_kinds())}\n" in proc.stderr


def test_doctor_asks_the_kind_itself(plugin_path: str, tmp_path: Path) -> None:
    proc = subagents(plugin_path, "doctor", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    child = Path(plugin_path) / "echo_provider" / "child.py"
    assert f"\nprovider echo: found (echo child {child})\n" in proc.stdout


def test_diagrams_draw_the_kinds_chart(plugin_path: str, tmp_path: Path) -> None:
    proc = subagents(plugin_path, "diagrams", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "# `echo_provider`\n" in proc.stdout
    assert "## EchoLifecycle\n\nThe echo provider's lifecycle.\n\n```mermaid\nstateDiagram-v2" in proc.stdout
    out = tmp_path / "out"
    assert subagents(plugin_path, "diagrams", "--out", str(out), cwd=tmp_path).returncode == 0
    assert "echo_provider.md" in {p.name for p in out.iterdir()}
    assert subagents(plugin_path, "diagrams", "--check", str(out), cwd=tmp_path).returncode == 0


# The tests that read which kinds are installed, run again with the echo distribution installed.
KIND_INDEPENDENT = (
    "tests/test_public_api.py",
    "tests/test_machines.py",
    "tests/test_readme.py::test_the_docs_show_every_current_lifecycle_diagram",
    "tests/test_cli.py::test_providers_lists_the_kinds",
    "tests/test_cli.py::test_configuration_errors_name_file_entry_and_key",
    "tests/test_cli.py::test_diagrams_written_are_current",
    "tests/test_hostdeath.py::test_doctor_reports_each_fact_and_succeeds",
)


@pytest.mark.timeout(900)
def test_no_test_assumes_which_other_kinds_are_installed(plugin_path: str) -> None:
    root = Path(__file__).resolve().parent.parent
    path = os.pathsep.join(p for p in (plugin_path, os.environ.get("PYTHONPATH")) if p)
    probe = [sys.executable, "-c", "import supervisor; print('echo' in supervisor.installed_kinds())"]
    env = {**os.environ, "PYTHONPATH": path}
    assert subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout == "True\n"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *KIND_INDEPENDENT],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=850,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]


CONVERSE = """
import anyio
from pathlib import Path
from supervisor import Registry, SubagentRequest, UnsupportedCapability, create_provider, installed_kinds


async def main() -> None:
    kind = installed_kinds()["echo"].load()
    registry = Registry()
    registry.register(create_provider("echo", kind.config()))
    request = SubagentRequest(task="hi", parent_cwd=Path.cwd())
    try:
        async with registry.run("echo", request, conversation=True):
            print("started")
    except UnsupportedCapability as exc:
        print(exc)
    async with registry.run("echo", request) as run:
        print((await run.result()).output, run.conversation, run.turn)


anyio.run(main, backend="asyncio")
"""


def test_a_kind_that_declares_no_conversation_is_refused_one_and_runs_as_before(
    plugin_path: str, tmp_path: Path
) -> None:
    """The unchanged third-party kind: a conversation is refused before anything spawns."""
    path = os.pathsep.join(p for p in (plugin_path, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", CONVERSE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        'subagent provider "echo" does not support the "conversation" capability\nhi False 1\n'
    )


def test_chat_and_batch_turns_refuse_a_kind_that_cannot_converse(plugin_path: str, tmp_path: Path) -> None:
    """Before anything spawns: ``chat`` is a usage error, a batch item with ``turns`` an error
    record (the batch goes on: the one-shot item runs)."""
    config = write_config(tmp_path)
    path = os.pathsep.join(p for p in (plugin_path, os.environ.get("PYTHONPATH")) if p)
    chat = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "chat", "--config", str(config)],
        cwd=tmp_path,
        input="hi\n",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert (chat.returncode, chat.stdout) == (2, "")
    assert (
        chat.stderr
        == 'subagents: subagent provider "my-echo" does not support the "conversation" capability\n'
    )
    items = tmp_path / "in.jsonl"
    items.write_text('{"id": "t", "task": "hi", "turns": ["again"]}\n{"id": "one", "task": "hi"}\n')
    proc = subagents(plugin_path, "batch", str(items), "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"id": "t"')]
    assert lines == [
        '{"id": "t", "error": "turns: subagent provider \\"my-echo\\" does not support the \\"conversation\\" capability"}'
    ]
    assert '"id": "one"' in proc.stdout


def test_the_pages_trying_it_commands_do_what_their_comments_say(plugin_path: str, tmp_path: Path) -> None:
    """The shell block of "Trying it" on the authors' page, run as it stands (its ``pip install``
    is the fixture's, into a folder only these commands see)."""
    import re

    page = (DISTRIBUTION.parent.parent / "docs" / "writing-a-provider.md").read_text(encoding="utf-8")
    section = page.split("### Trying it", 1)[1]
    [script] = re.findall(r"```sh\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    lines = script.splitlines()
    assert lines[0].startswith("pip install ./echo-provider")
    path = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    pythonpath = os.pathsep.join(p for p in (plugin_path, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        ["bash", "-e", "-c", "\n".join(lines[1:])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": path, "PYTHONPATH": pythonpath},
    )
    assert proc.returncode == 0, proc.stderr
    assert "echo         Echo child\n" in proc.stdout
    assert "\nhi\n" in proc.stdout
    assert re.search(r"^provider echo: found \(echo child .*/echo_provider/child\.py\)$", proc.stdout, re.M)


def test_the_page_shows_the_distributions_child_and_pyproject() -> None:
    page = (DISTRIBUTION.parent.parent / "docs" / "writing-a-provider.md").read_text(encoding="utf-8")
    child = (DISTRIBUTION / "echo_provider" / "child.py").read_text(encoding="utf-8").rstrip()
    pyproject = (DISTRIBUTION / "pyproject.toml").read_text(encoding="utf-8").rstrip()
    assert f"```python\n{child}\n```" in page
    assert f"```toml\n{pyproject}\n```" in page
