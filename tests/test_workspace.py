"""Workspaces (``workspace = "worktree"``): a run's own git worktree, over real git and real runs
of the example ACP agent (whose ``@permission edit`` directive writes ``subagent-example.txt`` into
its session cwd once allowed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from supervisor import Registry, StartFailed, SubagentRequest
from supervisor.process import HostIdentity, sweep
from supervisor.process._keeper_main import WORKTREE_LOCK_FILE, start_time, worktree_lock
from supervisor.providers.acp import Config, Provider, example_agent_config
from tests.support.git import git

pytestmark = pytest.mark.anyio

WRITE = "@permission edit\nsay hello"


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Worktrees go under the test's own state folder."""
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home / "subagent-supervisor" / "worktrees"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("one\ntwo\n")
    (path / "src").mkdir()
    (path / "src" / "a.txt").write_text("a\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


def config(**keys: Any) -> Config:
    return example_agent_config(stderr="discard", permission="allow", workspace="worktree", **keys)


async def run_in(cwd: Path, task: str = WRITE, **keys: Any) -> Any:
    registry = Registry()
    registry.register(Provider(config(**keys)))
    async with registry.run("acp", SubagentRequest(task=task, parent_cwd=cwd)) as run:
        result = await run.result()
    assert result.stop_reason == "completed", result.diagnostic
    return run


def worktrees(repo: Path) -> list[str]:
    return [
        line
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


async def test_a_run_that_changes_files_gets_its_worktree_kept_and_reported(
    repo: Path, state_home: Path
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    run = await run_in(repo)
    facts = run.workspace
    assert facts is not None
    assert facts.base == head
    assert facts.head == head
    assert facts.changed
    assert (facts.files_changed, facts.insertions, facts.deletions) == (1, 1, 0)
    assert facts.kept
    path = Path(facts.path)
    assert path.parent == state_home
    assert (path / "subagent-example.txt").exists()  # the agent wrote there...
    assert not (repo / "subagent-example.txt").exists()  # ...and not in the user's tree
    assert git(repo, "status", "--porcelain") == ""
    assert len(worktrees(repo)) == 2
    assert not Path(str(path) + ".json").exists()  # reported: the user's now, no sweep takes it


async def test_an_unchanged_worktree_is_removed(repo: Path) -> None:
    run = await run_in(repo, task="say hello")
    facts = run.workspace
    assert facts is not None
    assert not facts.changed
    assert (facts.files_changed, facts.insertions, facts.deletions) == (0, 0, 0)
    assert not facts.kept
    assert not Path(facts.path).exists()
    assert len(worktrees(repo)) == 1


@pytest.mark.parametrize(("keep", "task", "kept"), [("never", WRITE, False), ("always", "say hello", True)])
async def test_workspace_keep(repo: Path, keep: str, task: str, kept: bool) -> None:
    run = await run_in(repo, task=task, workspace_keep=keep)
    assert run.workspace.kept is kept
    assert Path(run.workspace.path).exists() is kept
    assert len(worktrees(repo)) == (2 if kept else 1)


async def test_a_run_from_a_subfolder_starts_in_the_same_folder_of_its_worktree(repo: Path) -> None:
    run = await run_in(repo / "src")
    path = Path(run.workspace.path)
    assert (path / "src" / "subagent-example.txt").exists()
    assert not (repo / "src" / "subagent-example.txt").exists()


async def test_runs_on_one_repository_never_share_a_tree(repo: Path) -> None:
    runs: list[Any] = []

    async def one() -> None:
        runs.append(await run_in(repo))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    paths = {run.workspace.path for run in runs}
    assert len(paths) == 3
    for path in paths:
        assert sorted(p.name for p in Path(path).iterdir() if p.name != ".git") == [
            "README", "src", "subagent-example.txt",
        ]  # fmt: skip


async def test_commits_and_deletions_are_counted(repo: Path) -> None:
    """The base can be any commit; what the agent left is counted against it, commits included."""
    first = git(repo, "rev-parse", "HEAD")
    (repo / "README").write_text("one\n")
    git(repo, "commit", "-q", "-am", "second")
    run = await run_in(repo, task="say hello", workspace_base=first, workspace_keep="always")
    facts = run.workspace
    assert facts.base == first
    assert not facts.changed
    worktree = Path(facts.path)
    assert (worktree / "README").read_text() == "one\ntwo\n"


async def test_outside_a_git_work_tree_the_start_fails_as_configuration(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    registry = Registry()
    registry.register(Provider(config()))
    with pytest.raises(StartFailed, match="category: configuration") as failed:
        async with registry.run("acp", SubagentRequest(task="hi", parent_cwd=plain)):
            pass
    assert str(failed.value).endswith("\nSubagent workspace (worktree: not in a git work tree)")


async def test_an_unknown_base_fails_as_configuration(repo: Path) -> None:
    registry = Registry()
    registry.register(Provider(config(workspace_base="no-such-branch")))
    with pytest.raises(StartFailed, match="category: configuration") as failed:
        async with registry.run("acp", SubagentRequest(task="hi", parent_cwd=repo)):
            pass
    assert "Subagent workspace (worktree: workspace_base is not a commit of the repository)" in str(
        failed.value
    )
    assert len(worktrees(repo)) == 1


def test_workspace_keys_are_checked() -> None:
    with pytest.raises(ValidationError, match="workspace"):
        Config.model_validate({"command": "agent", "workspace": "copy"})
    with pytest.raises(ValidationError, match="workspace_keep"):
        Config.model_validate({"command": "agent", "workspace_keep": "sometimes"})
    with pytest.raises(ValidationError, match="workspace_base"):
        Config.model_validate({"command": "agent", "workspace_base": "--output=/tmp/x"})
    assert Config.model_validate({"command": "agent"}).workspace == "shared"


def test_reap_removes_a_dead_hosts_worktree(repo: Path, state_home: Path) -> None:
    """A worktree whose marker names a host that is gone (it died mid-run: no result ever
    reported it) is removed by ``sweep`` (what ``subagents reap`` runs), and git forgets it."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    start = start_time(gone.pid)
    gone.wait()
    host = HostIdentity(gone.pid, start or 1)
    state_home.mkdir(parents=True)
    path = state_home / "dead-run"
    git(repo, "worktree", "add", "--detach", "-q", str(path), "HEAD")
    (path / "work.txt").write_text("unfinished")
    (state_home / "dead-run.json").write_text(json.dumps({"host": str(host), "repository": str(repo)}))
    alive_path = state_home / "live-run"
    git(repo, "worktree", "add", "--detach", "-q", str(alive_path), "HEAD")
    from supervisor.process import this_host

    (state_home / "live-run.json").write_text(json.dumps({"host": str(this_host()), "repository": str(repo)}))
    lines = [item.line() for item in sweep()]
    assert f"reaped worktree {path} (host {host} is gone)" in lines
    assert not path.exists()
    assert not (state_home / "dead-run.json").exists()
    assert alive_path.exists()  # a live host's is left alone
    assert len(worktrees(repo)) == 2


def dead_host() -> HostIdentity:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    start = start_time(gone.pid)
    gone.wait()
    return HostIdentity(gone.pid, start or 1)


# The sweep of dead hosts' worktrees (what a host runs before its first spawn), in a process of
# its own that waits for the worktree lock as long as the test holds it.
SWEEP_WORKTREES = """
from supervisor.process import _keeper_main
from supervisor.process._sweep import sweep_worktrees

_keeper_main.WORKTREE_LOCK_PATIENCE = 3600.0
for item in sweep_worktrees():
    print(item.line())
"""


def holds_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


def test_a_dead_hosts_worktree_is_removed_under_the_repositorys_worktree_lock(
    repo: Path, state_home: Path
) -> None:
    """The sweep (and the keeper, and ``subagents reap``) removes a dead host's worktree holding
    the lock a run holds around its own worktree commands: while the test holds it the sweep has
    the lock file open and waits, the worktree still there; once it is let go, the sweep removes it."""
    host = dead_host()
    state_home.mkdir(parents=True)
    path = state_home / "dead-run"
    git(repo, "worktree", "add", "--detach", "-q", str(path), "HEAD")
    common = (repo / ".git").resolve()
    marker = {"host": str(host), "repository": str(repo), "common_dir": str(common)}
    (state_home / "dead-run.json").write_text(json.dumps(marker))
    with worktree_lock(str(common)):
        sweeper = subprocess.Popen([sys.executable, "-c", SWEEP_WORKTREES], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120  # a bound for a loaded machine, not a timing assumption
        while sweeper.poll() is None and not holds_open(sweeper.pid, common / WORKTREE_LOCK_FILE):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert sweeper.poll() is None, "the sweep did not wait for the worktree lock"
        assert path.is_dir()
    out, _ = sweeper.communicate(timeout=120)
    assert sweeper.returncode == 0
    assert out == f"reaped worktree {path} (host {host} is gone)\n"
    assert not path.exists()
    assert len(worktrees(repo)) == 1


def test_the_cli_json_document_carries_the_workspace(repo: Path, tmp_path: Path) -> None:
    from supervisor.providers.acp import EXAMPLE_AGENT

    config = tmp_path / "agents.toml"
    config.write_text(
        f'[[provider]]\nkind = "acp"\ncommand = {json.dumps(sys.executable)}\n'
        f'args = ["-I", {json.dumps(str(EXAMPLE_AGENT))}]\npermission = "allow"\nworkspace = "worktree"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "run", "--json", "--config", str(config), WRITE],
        cwd=repo, capture_output=True, text=True, timeout=120, env=os.environ.copy(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    workspace = json.loads(proc.stdout)["workspace"]
    assert set(workspace) == {
        "path",
        "base",
        "head",
        "changed",
        "files_changed",
        "insertions",
        "deletions",
        "kept",
    }
    assert (workspace["changed"], workspace["files_changed"], workspace["kept"]) == (True, 1, True)
    assert workspace["base"] == git(repo, "rev-parse", "HEAD")


async def test_the_span_carries_the_workspace(repo: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from supervisor import telemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use(provider)
    try:
        run = await run_in(repo)
    finally:
        telemetry.use(None)
        provider.shutdown()
    attributes = [dict(span.attributes or {}) for span in exporter.get_finished_spans()]
    found = [a for a in attributes if "subagent.workspace.path" in a]
    assert found, attributes
    assert found[0]["subagent.workspace.path"] == run.workspace.path
    assert found[0]["subagent.workspace.files_changed"] == 1
    assert found[0]["subagent.workspace.changed"] is True


def test_a_batch_on_one_repository_gives_each_item_its_own_worktree(repo: Path, tmp_path: Path) -> None:
    from supervisor.providers.acp import EXAMPLE_AGENT

    config = tmp_path / "agents.toml"
    config.write_text(
        f'[[provider]]\nkind = "acp"\ncommand = {json.dumps(sys.executable)}\n'
        f'args = ["-I", {json.dumps(str(EXAMPLE_AGENT))}]\npermission = "allow"\nworkspace = "worktree"\n'
    )
    items = tmp_path / "tasks.jsonl"
    items.write_text(
        "".join(json.dumps({"id": f"i{n}", "task": WRITE, "cwd": str(repo)}) + "\n" for n in range(3))
    )
    out = tmp_path / "records.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "batch", str(items), "--config", str(config), "--out", str(out), "--verbose"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=os.environ.copy(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    paths = {record["workspace"]["path"] for record in records}
    assert len(paths) == 3
    assert all(record["workspace"]["files_changed"] == 1 for record in records)
    assert not (repo / "subagent-example.txt").exists()


async def test_the_mcp_answer_carries_the_workspace(repo: Path, tmp_path: Path) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from supervisor.providers.acp import EXAMPLE_AGENT

    config = tmp_path / "agents.toml"
    config.write_text(
        f'[[provider]]\nkind = "acp"\ncommand = {json.dumps(sys.executable)}\n'
        f'args = ["-I", {json.dumps(str(EXAMPLE_AGENT))}]\npermission = "allow"\nworkspace = "worktree"\n'
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor.cli", "mcp", "--config", str(config)],
        cwd=str(repo),
        env=os.environ.copy(),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("run_subagent", {"task": WRITE})
    assert not result.is_error, result.content
    from supervisor.mcp._answers import result_facts

    workspace = (result_facts(result) or {})["workspace"]
    assert (workspace["changed"], workspace["files_changed"], workspace["kept"]) == (True, 1, True)
    assert Path(workspace["path"]).is_dir()


HOST = """
import anyio, json, sys
from pathlib import Path
from supervisor import AbortSignal, SubagentRequest
from supervisor.providers.acp import Provider, example_agent_config

async def main() -> None:
    config = example_agent_config(stderr="discard", workspace="worktree")
    run = Provider(config).create_run(SubagentRequest(task="@slow 600000\\nsay hello", parent_cwd=Path.cwd()))
    async with anyio.create_task_group() as tg:
        await run.start(tg, AbortSignal())
        print(json.dumps({"path": str(run._engine.state.workspace.checkout.path)}), flush=True)
        await run.result()

anyio.run(main)
"""


def test_the_keeper_removes_the_worktree_of_a_host_that_died_mid_run(repo: Path) -> None:
    import signal

    host = subprocess.Popen(
        [sys.executable, "-c", HOST], cwd=repo, stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert host.stdout is not None
    with host.stdout:
        path = Path(json.loads(host.stdout.readline())["path"])
    assert path.is_dir()
    marker = json.loads(Path(str(path) + ".json").read_text())
    # (where the repository's worktree lock is: the keeper holds it too while it removes them)
    assert (marker["repository"], Path(marker["common_dir"])) == (str(repo), (repo / ".git").resolve())
    host.send_signal(signal.SIGKILL)
    host.wait()
    deadline = time.monotonic() + 120  # a bound for a loaded machine, not a timing assumption
    while (path.exists() or Path(str(path) + ".json").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not path.exists()
    assert not Path(str(path) + ".json").exists()
    assert len(worktrees(repo)) == 1
