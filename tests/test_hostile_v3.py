"""The fourth hostile probe (the README's promises tried as a hostile child, client or user), with
real processes: each test failed before its fix.

* A host ceiling over a ``process-tree`` entry was silently ignored (a 300 MiB run under
  ``--max-memory 64M`` completed, exit 0): it is a configuration error now, in ``batch``,
  ``mcp`` and the embedding API.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor.process import detect_containment, limit_support
from tests.test_batch import entry, subagents_batch, write_config, write_input

SUPPORT = limit_support(detect_containment().cgroup_base)
needs_memory_limit = pytest.mark.skipif(
    "memory" not in SUPPORT.where, reason=f"no memory limit here: {dict(SUPPORT.why_not)}"
)


def process_tree_entry(name: str, env: dict[str, str]) -> str:
    return entry(name, env) + 'containment = "process-tree"\n'


@needs_memory_limit
@pytest.mark.parametrize("flag", ["--max-memory=64M", "--max-pids=200"])
def test_batch_refuses_a_ceiling_it_cannot_enforce(tmp_path: Path, flag: str) -> None:
    config = write_config(tmp_path / "agents.toml", process_tree_entry("tree", {"ACP_CHILD_ALLOC_MB": "300"}))
    items = write_input(tmp_path / "in.jsonl", {"id": "a", "task": "t"})
    proc = subagents_batch(str(items), "--config", str(config), flag, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == (
        f'subagents: {flag.partition("=")[0]}: cannot be enforced for entry "tree": its containment is '
        "process-tree (the kernel keeps no group of its runs)\n"
    )


@needs_memory_limit
def test_mcp_refuses_a_ceiling_it_cannot_enforce(tmp_path: Path) -> None:
    config = write_config(tmp_path / "agents.toml", process_tree_entry("tree", {}))
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "mcp", "--config", str(config), "--max-memory", "64M"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == (
        'subagents: --max-memory: cannot be enforced for entry "tree": its containment is '
        "process-tree (the kernel keeps no group of its runs)\n"
    )


EMBEDDED = """
import anyio
from pathlib import Path
from typing import Any
from supervisor import ConfigurationError, Registry, SubagentRequest, create_provider, set_host_ceiling
from supervisor.providers import acp

async def main() -> None:
    set_host_ceiling(memory_max="64M")
    registry = Registry()
    config = acp.Config(command="true", containment="process-tree")
    registry.register(create_provider("acp", config, "tree"))
    try:
        async with registry.run("tree", SubagentRequest(task="t", parent_cwd=Path.cwd())):
            print("ran")
    except ConfigurationError as exc:
        print(exc)

anyio.run(main)
"""


@needs_memory_limit
def test_the_embedding_api_refuses_a_run_the_ceiling_cannot_bound(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", EMBEDDED], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        'subagent provider "tree": the host ceiling cannot be enforced for runs in process-tree containment\n'
    )


# -- a stdout that is gone -------------------------------------------------------------------

STDOUT_GONE = "subagents: stdout is closed: the answer was not written\n"


def closed_stdout(*args: str, stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``subagents ARGS >&-``: fd 1 closed before the command starts."""
    return subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" >&-', sys.executable, "-m", "supervisor.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def full_stdout(*args: str, stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``subagents ARGS > /dev/full``: every write fails (ENOSPC)."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "supervisor.cli", *args],
            input=stdin,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            timeout=120,
        )
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", proc.stderr)


@pytest.mark.parametrize("stdout", [closed_stdout, full_stdout], ids=["closed", "dev-full"])
@pytest.mark.parametrize("args", [("chat",), ("chat", "--json"), ("run", "hi"), ("run", "--json", "hi")])
def test_an_answer_nobody_can_read_is_one_line_and_exit_1(
    tmp_path: Path, stdout: Any, args: tuple[str, ...]
) -> None:
    """Before: ``chat`` exited with three tracebacks, ``run`` with one.  A chat reads no more
    tasks once an answer cannot be written (the second line is never sent)."""
    proc = stdout(*args, stdin="hi\nagain\n", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count(STDOUT_GONE) == 1, proc.stderr


# -- out of memory between two turns ---------------------------------------------------------


@needs_memory_limit
@pytest.mark.anyio
async def test_an_oom_kill_between_turns_says_which_limit(tmp_path: Path) -> None:
    """The idle child allocates past ``memory_max`` after its turn and the kernel kills it.
    Before: the next send said only ``child exited; signal: SIGKILL``; now the limit line
    follows, from the kernel's counters read before the leaf goes."""
    from supervisor import ConversationOver, Registry, SubagentRequest, create_provider
    from tests.conftest import internals
    from tests.support.reliability import acp_child

    registry = Registry()
    config = acp_child({"IDLE_ALLOC_MB": "256"}, memory_max="64M")
    registry.register(create_provider("acp", config, "hog"))
    request = SubagentRequest(task="t", parent_cwd=tmp_path)
    async with registry.run("hog", request, conversation=True) as run:
        assert (await run.result()).stop_reason == "completed"
        base = internals(run)
        assert base.process is not None
        await base.process.wait_exit()  # the kernel's kill, while the conversation is idle
        await base._engine.state.over_known.wait()  # the base has read why
        with pytest.raises(ConversationOver) as caught:
            await run.send("again")
    first, second = str(caught.value).split("\n")
    assert first.startswith("subagent conversation is over (provider: ACP; turn: 1; reason: ")
    assert second == "Subagent limit (resource: memory; limit: 64 MiB)"
    assert caught.value.limit == second
