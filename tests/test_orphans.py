"""The process-tree fallback's orphans under a non-root supervisor (uid 65534, no cgroup).

A non-dumpable daemon's environment cannot be read by a non-root supervisor, so nothing
ties it to its run but its birth.  A process that declares it starts no children of its
own besides runs (``own_orphans``; the CLI's ``run``, ``mcp`` and ``batch`` do) owns every
orphan adopted while runs are alive: the runs alive at the orphan's birth share it, and
the last of them to be torn down ends it.

The supervisor runs as uid 65534 with the system Python (the research file's recipe: the
default interpreter lives under root's home, which that user cannot enter).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import site
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import CHILDREN

BEHAVE = str(CHILDREN / "behave.py")
ACP_CHILD = str(CHILDREN / "acp_child.py")
SYSTEM_PYTHON = Path("/usr/bin/python3.11")
ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not SYSTEM_PYTHON.exists(), reason="needs root (to become uid 65534) and python3.11"
)

# A host as uid 65534: runs of behave.py in the process-tree fallback (no cgroup is writable).
# ``sole``: one run whose child starts a daemon.  ``shared``: run B starts, then run A, whose
# child starts the daemon (so both were alive at its birth); A is torn down first, then B.
NOBODY_HOST = textwrap.dedent(
    """
    import json, os, sys, anyio
    from pathlib import Path
    from machines import TeardownLadder
    from supervisor.process import (
        ManagedProcess, SpawnSpec, StderrMode, child_environment, containment_for, own_orphans,
    )

    behave, scenario, daemon_kind, declared = sys.argv[1:5]
    if declared == "declared":
        own_orphans(True)

    def alive(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def spec(behaviour):
        tag = os.urandom(8).hex()
        return SpawnSpec(
            argv=[sys.executable, behave, behaviour], cwd=Path.cwd(),
            env=child_environment({}, run_tag=tag), run_tag=tag, stderr=StderrMode.DISCARD,
            containment=containment_for(),
        )

    async def end(proc):
        report = await proc.teardown(TeardownLadder(), eof_grace=0.2, term_grace=0.3, kill_wait=0.3)
        return {"containment": report.containment, "quiescent": report.quiescent}

    async def main():
        facts = {"uid": os.getuid()}
        async with anyio.create_task_group() as tg:
            other = None
            if scenario == "shared":
                other = await ManagedProcess.spawn(spec("eof"), tg)
            proc = await ManagedProcess.spawn(spec(daemon_kind), tg)
            daemon = int((await proc.stdout.readline()).split()[1])
            facts["daemon"] = daemon
            print(json.dumps({"daemon": daemon}), flush=True)  # for the test's clean-up
            facts["first"] = await end(proc)
            facts["alive after first"] = alive(daemon)
            if other is not None:
                facts["second"] = await end(other)
                facts["alive after second"] = alive(daemon)
            tg.cancel_scope.cancel()
        print(json.dumps(facts), flush=True)

    anyio.run(main)
    """
)


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


@contextlib.contextmanager
def nobody_dir() -> Iterator[Path]:
    """A directory uid 65534 may write in (children's cwd and TMPDIR)."""
    path = Path(tempfile.mkdtemp(prefix="orphans-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def kill(pid: int) -> None:
    """Clean up a daemon the leak guard cannot see (not our descendant, environment unreadable)."""
    with contextlib.suppress(psutil.Error):
        proc = psutil.Process(pid)
        proc.kill()
        proc.wait(5)


def run_as_nobody(
    argv: list[str], cwd: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    path = os.pathsep.join([str(ROOT), *site.getsitepackages()])
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path, "TMPDIR": str(cwd), **env},
        preexec_fn=_as_nobody,
        check=False,
    )
    documents = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, documents


@pytest.mark.parametrize("daemon_kind", ["nondumpable-daemon", "ssh-agent"])
def test_a_declared_sole_parent_ends_its_runs_non_dumpable_daemon(daemon_kind: str) -> None:
    if daemon_kind == "ssh-agent" and shutil.which("ssh-agent") is None:
        pytest.skip("no ssh-agent here")
    with nobody_dir() as cwd:
        host, documents = run_as_nobody(
            [str(SYSTEM_PYTHON), "-c", NOBODY_HOST, BEHAVE, "sole", daemon_kind, "declared"], cwd
        )
        try:
            assert host.returncode == 0, host.stderr[-3000:]
            facts = documents[-1]
            assert facts["uid"] == 65534
            assert facts["first"] == {"containment": "process-tree", "quiescent": True}
            assert facts["alive after first"] is False
        finally:
            for document in documents:
                kill(document["daemon"])


def test_an_orphan_belongs_to_the_runs_alive_at_its_birth_and_ends_with_the_last() -> None:
    """Two runs alive when the daemon is born: the first torn down cannot prove it gone and
    leaves it alone (it may be the other's); the second ends it."""
    with nobody_dir() as cwd:
        host, documents = run_as_nobody(
            [str(SYSTEM_PYTHON), "-c", NOBODY_HOST, BEHAVE, "shared", "nondumpable-daemon", "declared"], cwd
        )
        try:
            assert host.returncode == 0, host.stderr[-3000:]
            facts = documents[-1]
            assert facts["first"] == {"containment": "process-tree", "quiescent": False}
            assert facts["alive after first"] is True
            assert facts["second"] == {"containment": "process-tree", "quiescent": True}
            assert facts["alive after second"] is False
        finally:
            for document in documents:
                kill(document["daemon"])


@pytest.mark.parametrize("daemon_kind", ["nondumpable-daemon", "ssh-agent"])
def test_without_the_declaration_the_orphan_is_only_held_against_quiescence(daemon_kind: str) -> None:
    """An embedder that starts children of its own: the daemon may be anybody's, so it is never
    signalled, and the run does not claim quiescence while it lives."""
    if daemon_kind == "ssh-agent" and shutil.which("ssh-agent") is None:
        pytest.skip("no ssh-agent here")
    with nobody_dir() as cwd:
        host, documents = run_as_nobody(
            [str(SYSTEM_PYTHON), "-c", NOBODY_HOST, BEHAVE, "sole", daemon_kind, "undeclared"], cwd
        )
        try:
            assert host.returncode == 0, host.stderr[-3000:]
            facts = documents[-1]
            assert facts["first"] == {"containment": "process-tree", "quiescent": False}
            assert facts["alive after first"] is True
        finally:
            for document in documents:
                kill(document["daemon"])


def test_the_cli_owns_its_orphans(tmp_path: Path) -> None:
    """``subagents run`` as uid 65534: the ACP child's non-dumpable daemon ends with the run."""
    with nobody_dir() as cwd:
        pids = cwd / "pids"
        argv = [str(SYSTEM_PYTHON), "-m", "supervisor.cli", "run", "--json", "t", "--"]
        argv += [str(SYSTEM_PYTHON), "-I", ACP_CHILD]
        env_before = dict(os.environ)
        os.environ.update({"ACP_CHILD_DAEMON": "non-dumpable", "ACP_CHILD_GRANDCHILD_PID_FILE": str(pids)})
        try:
            cli, documents = run_as_nobody(argv, cwd)
        finally:
            os.environ.clear()
            os.environ.update(env_before)
        daemons = [int(p) for p in pids.read_text().split()] if pids.exists() else []
        try:
            assert cli.returncode == 0, cli.stderr[-3000:]
            (document,) = documents
            assert (document["containment"], document["quiescent"]) == ("process-tree", True)
            assert len(daemons) == 1
            assert not psutil.pid_exists(daemons[0]) or psutil.Process(daemons[0]).status() == "zombie"
        finally:
            for pid in daemons:
                kill(pid)
