"""Agents that sandbox themselves still work confined: the real Codex app-server and codex-acp
with ``confine = true`` and ``writable`` set to their state folders (HOME, CODEX_HOME, and the
``/tmp/codex-daemon-<uid>`` folder Codex keeps whatever TMPDIR says).

Codex's own command sandbox is bubblewrap, which mounts; Landlock forbids a confined
process to mount, so inside ``confine`` Codex's sandboxed commands fail (its answers do
not).  Run it with ``sandbox_mode = "danger-full-access"`` and the supervisor's
confinement is the sandbox: a prompt-injected turn that reads a key outside the
workspace fails, and the key's text never reaches the model server (the mock records
every request), while a command in the workspace works.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor import Registry, StderrMode, SubagentRequest
from supervisor.process._confine import landlock_support
from supervisor.providers.acp import Config as AcpConfig
from supervisor.providers.acp import Provider as AcpProvider
from tests.mockmodel import EchoToolResult, MockModelServer, Shell, Text
from tests.support import missing_peer, peers
from tests.support.codex import provider as codex_provider
from tests.support.codex import run_once

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.real_peer,
    pytest.mark.skipif(not landlock_support().enforceable, reason="no Landlock here"),
]

KEY = "-----BEGIN OPENSSH PRIVATE KEY----- confined-test-key"


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A key in a folder of the user's that no policy grants."""
    folder = tmp_path / "user-home" / ".ssh"
    folder.mkdir(parents=True)
    (folder / "id_ed25519").write_text(KEY)
    return folder / "id_ed25519"


def codex_daemon_folder() -> Path:
    """Codex keeps a folder of its own in /tmp whatever TMPDIR says (``/tmp/codex-daemon-<uid>``,
    made by any codex run): confined, it must be ``writable`` (and made beforehand)."""
    folder = Path(f"/tmp/codex-daemon-{os.geteuid()}")
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def leaked(mock: MockModelServer) -> bool:
    return any(KEY.encode() in request.raw_body for request in mock.requests)


def installed(launcher: object) -> None:
    try:
        peers.codex_binary() if launcher is peers.codex_app_server_launch else peers.codex_acp_binary()
    except peers.PeerNotInstalled as exc:
        missing_peer(str(exc))


async def test_the_codex_app_server_answers_confined(mock: MockModelServer, tmp_path: Path) -> None:
    installed(peers.codex_app_server_launch)
    with peers.codex_app_server_launch(mock, root=tmp_path) as launch:  # its own sandbox: read-only
        mock.script(Text("MOCK_OK: confined"))
        writable = [str(launch.home), str(codex_daemon_folder())]
        codex = codex_provider(launch, confine=True, writable=writable)
        result, run = await run_once(codex, launch.cwd, task="say hello")
        assert result.output == "MOCK_OK: confined"
        assert run.quiescent


async def test_the_codex_app_server_runs_commands_confined(
    mock: MockModelServer, tmp_path: Path, secret: Path
) -> None:
    installed(peers.codex_app_server_launch)
    with peers.codex_app_server_launch(mock, root=tmp_path, sandbox_mode="danger-full-access") as launch:
        mock.script(Shell("touch made-by-codex.txt"), Shell(f"cat {secret}"), EchoToolResult())
        writable = [str(launch.home), str(codex_daemon_folder())]
        codex = codex_provider(launch, confine=True, writable=writable)
        result, run = await run_once(codex, launch.cwd, task="make a file, then read the key")
        assert result.stop_reason == "completed", result.diagnostic
        assert run.quiescent
        assert (launch.cwd / "made-by-codex.txt").exists()
        assert "Permission denied" in result.output  # what `cat` said, echoed by the mock
        assert KEY not in result.output
        assert not leaked(mock)


async def test_codex_acp_runs_commands_confined(mock: MockModelServer, tmp_path: Path, secret: Path) -> None:
    installed(peers.codex_acp_launch)
    with peers.codex_acp_launch(mock, root=tmp_path, sandbox_mode="danger-full-access") as launch:
        mock.script(
            Shell("touch made-by-codex-acp.txt", escalated=True),
            Shell(f"cat {secret}", escalated=True),
            EchoToolResult(),
        )
        config = AcpConfig(
            command=launch.argv[0],
            args=launch.argv[1:],
            env=dict(launch.env),
            stderr=StderrMode.LOG,
            dispose_eof_grace_ms=300,
            permission="allow",
            confine=True,
            writable=[launch.home, codex_daemon_folder()],
        )
        registry = Registry()
        registry.register(AcpProvider(config))
        async with registry.run("acp", SubagentRequest(task="go", parent_cwd=launch.cwd)) as run:
            result = await run.result()
        assert result.stop_reason == "completed", result.diagnostic
        assert run.quiescent
        assert (launch.cwd / "made-by-codex-acp.txt").exists()
        assert KEY not in result.output
        assert not leaked(mock)


async def test_a_confined_codex_commits_in_its_own_worktree(
    mock: MockModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``workspace = "worktree"`` with ``confine``: the agent may commit in its worktree (the
    worktree's own git files and the repository's objects are writable), not write the user's tree."""
    installed(peers.codex_app_server_launch)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "first"]):
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True
        )
    base = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    with peers.codex_app_server_launch(
        mock, root=tmp_path, cwd=repo, sandbox_mode="danger-full-access"
    ) as launch:
        commit = (
            "echo hi > made.txt && git add made.txt && git -c user.name=a -c user.email=a@a commit -qm agent"
        )
        mock.script(Shell(f"{commit}; touch {repo}/escaped.txt; echo done"), EchoToolResult())
        writable = [str(launch.home), str(codex_daemon_folder())]
        codex = codex_provider(launch, confine=True, writable=writable, workspace="worktree")
        result, run = await run_once(codex, repo, task="commit a file")
        assert result.stop_reason == "completed", result.diagnostic
        facts = run.workspace
        assert facts is not None
        assert facts.base == base
        assert facts.head != base  # the agent's commit
        assert (facts.changed, facts.files_changed, facts.insertions, facts.kept) == (True, 1, 1, True)
        assert not (repo / "escaped.txt").exists()  # the user's tree is outside the policy
        log = subprocess.run(
            ["git", "-C", str(repo), "log", "--format=%s", facts.head], capture_output=True, text=True
        )
        assert log.stdout.split() == ["agent", "first"]
