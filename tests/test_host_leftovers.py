"""Nothing of a host outlives it (issue 31 items 3 and 4: no stray process, cgroup or file), with real
processes: each test failed before its fix.

* A host with a ceiling SIGKILLed mid-run (``subagents batch --max-pids 200``) left its host
  group in the cgroup v1 cpu hierarchy; ``subagents mcp`` with a ceiling SIGKILLed before its
  first run left all its host groups (no keeper ran yet).  The keeper now starts with the
  ceiling and knows the host groups from then on.
* A run's ``/dev/shm`` files outlived it and stayed charged to the host ceiling, so the next
  run died for memory it never used (``--max-memory 96M``: a first run wrote 64 MiB to
  ``/dev/shm`` and completed; the second, writing the same, was killed).  A root child now has a
  ``/dev/shm`` of its own (a private tmpfs in its mount namespace), gone with the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.process import detect_containment, limit_support
from supervisor.process._host import HostIdentity
from supervisor.process._keeper_main import start_time
from supervisor.process._limit_support import v1_homes
from supervisor.process._markers import marker_dir
from tests.support import cgroup_roots
from tests.support.pidfd import pidfds, wait_gone
from tests.support.resume import GONE_WITHIN, wait_for
from tests.test_batch import entry, records, subagents_batch, write_config, write_input

SUPPORT = limit_support(detect_containment().cgroup_base)
needs_memory_ceiling = pytest.mark.skipif(
    "memory" not in SUPPORT.where, reason=f"no memory limit here: {dict(SUPPORT.why_not)}"
)
needs_pids_ceiling = pytest.mark.skipif(
    "pids" not in SUPPORT.where, reason=f"no pids limit here: {dict(SUPPORT.why_not)}"
)


@pytest.fixture
def untouched_roots() -> Iterator[None]:
    before = cgroup_roots.snapshot()
    yield
    changes = cgroup_roots.check_unchanged(before)
    assert not changes, f"the machine's cgroup roots were changed (restored): {changes}"


def host_groups(pid: int, start: int) -> list[Path]:
    """Every group named for the host ``pid``/``start`` that exists, in v2 and each v1 hierarchy."""
    name = f"subagents-{pid}-{start}"
    homes = [home for _mount, home in v1_homes()]
    base = detect_containment().cgroup_base
    if base is not None:
        homes.append(base)
    return [home / name for home in homes if (home / name).exists()]


def remove_left(pid: int, start: int) -> None:
    """What a failing test left: removed, so the machine is as it was."""
    for group in host_groups(pid, start):
        for directory, _dirs, _files in os.walk(group, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def keepers_of(pid: int, start: int) -> list[int]:
    """The keeper of the host ``pid``/``start``, from the host's marker (written as it starts the
    keeper, so before anything the host says afterwards: no race with the keeper naming itself)."""
    directory = marker_dir()
    assert directory is not None
    try:
        keeper = HostIdentity.parse((directory / f"{pid}-{start}").read_text().strip())
    except FileNotFoundError:
        return []
    return [] if keeper is None else [keeper.pid]


def kill_and_settle(host: subprocess.Popen[str], *, also: list[int]) -> None:
    """SIGKILL the host; wait until it and its keeper (and ``also``) are gone."""
    start = start_time(host.pid)
    assert start is not None
    keepers = keepers_of(host.pid, start)
    fds = pidfds([*keepers, *also])
    host.kill()
    host.wait()
    assert wait_gone(fds, GONE_WITHIN) == []


@pytest.mark.serial
@needs_pids_ceiling
def test_a_killed_batch_with_a_ceiling_leaves_no_host_group(tmp_path: Path, untouched_roots: None) -> None:
    ready = tmp_path / "ready"
    config = write_config(
        tmp_path / "agents.toml", entry("hang", {"ACP_CHILD_HANG": "1", "ACP_CHILD_READY_FILE": str(ready)})
    )
    items = write_input(tmp_path / "in.jsonl", {"id": "a", "task": "t"})
    host = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "batch", str(items), "--config", str(config), "--max-pids", "200"],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        wait_for(ready.exists)
        start = start_time(host.pid)
        assert start is not None
        assert host_groups(host.pid, start), "the run is in its host's groups"
        child = int(ready.read_text())
        kill_and_settle(host, also=[child])
        left = host_groups(host.pid, start)
        remove_left(host.pid, start)
        assert left == []
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


@pytest.mark.serial
@needs_pids_ceiling
def test_mcp_with_a_ceiling_killed_before_its_first_run_leaves_no_host_group(
    tmp_path: Path, untouched_roots: None
) -> None:
    config = write_config(tmp_path / "agents.toml", entry("hang", {"ACP_CHILD_HANG": "1"}))
    host = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "mcp", "--config", str(config), "--max-pids", "200"],
        cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert host.stdin is not None
        assert host.stdout is not None
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
        host.stdin.write(json.dumps(hello) + "\n")
        host.stdin.flush()
        assert json.loads(host.stdout.readline())["id"] == 1  # serving: the ceiling is set
        start = start_time(host.pid)
        assert start is not None
        assert host_groups(host.pid, start), "the ceiling's groups exist"
        kill_and_settle(host, also=[])
        left = host_groups(host.pid, start)
        remove_left(host.pid, start)
        assert left == []
    finally:
        if host.poll() is None:
            host.kill()
        host.wait()
        for stream in (host.stdin, host.stdout):
            if stream is not None:
                stream.close()


def shm_files(tag: str) -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(f"subagents-test-{tag}"))


@pytest.mark.skipif(os.geteuid() != 0, reason="a private /dev/shm needs root (docs/limits.md)")
@needs_memory_ceiling
def test_a_runs_shared_memory_goes_with_it(tmp_path: Path, untouched_roots: None) -> None:
    tag = tmp_path.name
    env = {"ACP_CHILD_SHM_MB": "64", "ACP_CHILD_SHM_NAME": tag}
    config = write_config(tmp_path / "agents.toml", entry("shm", env))
    items = write_input(tmp_path / "in.jsonl", {"id": "a", "task": "t"}, {"id": "b", "task": "t"})
    try:
        proc = subagents_batch(
            str(items), "--config", str(config), "--concurrency", "1", "--max-memory", "96M", cwd=tmp_path
        )
        left = shm_files(tag)
    finally:
        for name in shm_files(tag):
            os.unlink(f"/dev/shm/{name}")
    assert proc.returncode == 0, proc.stderr
    found = {record["id"]: record for record in records(proc.stdout)}
    assert {key: "error" in record for key, record in found.items()} == {"a": False, "b": False}, found
    assert all("wrote 64 MiB" in record["output"] for record in found.values()), found
    assert left == []
