"""Bounded runs with real processes (every limit enforced by the kernel or refused): memory,
processes, CPU, time, silence.

The kernel limits run on the real kernel: on this kind of host (hybrid: the memory, pids
and cpu controllers are cgroup v1 hierarchies) that is the v1 path; the v2 file
protocol is pinned in ``test_limits.py``.  Every hog is small and capped (the children
allocate at most 1 GiB and fork at most 200 processes) so that a broken limit cannot hurt
the machine.  Nothing waits on a clock: the children announce what they did, the
limits end them, and a test asserts what ended them, never how fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.reliability  # noqa: F401  (first: it has the shared oracles' asserts rewritten)
from supervisor import Registry, StartFailed, StopReason, SubagentRequest, SubagentResult
from supervisor.process import HOST_TAG_VARIABLE, detect_containment, host_is_alive, limit_support
from supervisor.process._host_limits import host_limit_lines
from supervisor.process._keeper import KEEPER_PROGRAM
from supervisor.process._keeper_main import start_time
from supervisor.providers import acp
from tests.conftest import PYTHON, internals, tagged
from tests.support.reliability import ACP_CHILD, acp_child
from tests.test_batch import entry, subagents_batch, write_config, write_input
from tests.test_cli import as_json, subagents
from tests.test_hostdeath import GONE_WITHIN, pidfds, stand_in_host, wait_gone

MiB = 2**20
BASE = detect_containment().cgroup_base
SUPPORT = limit_support(BASE)
ALL_LIMITS = all(c in SUPPORT.where for c in ("memory", "pids", "cpu"))
needs_limits = pytest.mark.skipif(not ALL_LIMITS, reason=f"no kernel limits here: {dict(SUPPORT.why_not)}")
needs_v1 = pytest.mark.skipif(not SUPPORT.v1, reason="no cgroup v1 hierarchy for limits here")


def failure(stage: str, category: str, *facts: str) -> str:
    return "; ".join([f"Subagent failure (provider: ACP; stage: {stage}; category: {category}", *facts]) + ")"


def limit(resource: str, value: str, scope: str | None = None) -> str:
    return f"Subagent limit (resource: {resource}; limit: {value}{f'; scope: {scope}' if scope else ''})"


async def run_once(config: acp.Config, *, before_dispose: Any = None) -> tuple[SubagentResult, Any]:
    """Start, settle and dispose one run of ``config``; ``before_dispose(run)`` looks at it live."""
    registry = Registry()
    registry.register(acp.Provider(config))
    async with registry.run("acp", SubagentRequest(task="t", parent_cwd=Path.cwd())) as run:
        result = await run.result()
        if before_dispose is not None:
            before_dispose(run)
    assert run.quiescent
    assert tagged(run.id) == []
    return result, run


@pytest.fixture(params=["cgroup", "process-tree"])
def mode(request: pytest.FixtureRequest) -> str:
    if request.param == "cgroup" and BASE is None:
        pytest.skip("no cgroup containment here")
    return str(request.param)


# -- memory ------------------------------------------------------------------------------------


@needs_limits
def test_a_child_past_memory_max_ends_the_run_and_the_cli_lives(tmp_path: Path) -> None:
    """The CLI supervises a child allocating past 96 MiB: the kernel kills it, the CLI reports
    the limit and the peak, and exits 1 on its own."""
    proc = subagents(
        *("run", "--json", "--memory-max", "96M", "--env", "ACP_CHILD_ALLOC_MB=400", "t", "--"),
        *(PYTHON, "-I", str(ACP_CHILD)),
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stderr
    doc = as_json(proc)
    assert doc["stop_reason"] == "error"
    first, second = doc["diagnostic"].split("\n")
    assert first.startswith("Subagent failure (provider: ACP; stage: ")  # the provider's line, as today
    assert second == limit("memory", "96 MiB")
    assert 48 * MiB <= doc["resources"]["memory_peak_bytes"] <= 96 * MiB
    assert doc["quiescent"] is True
    assert tagged(doc["run_id"]) == []


@needs_limits
@pytest.mark.anyio
async def test_a_grandchild_past_memory_max_ends_the_whole_run() -> None:
    """The kernel kills the grandchild that allocates; the child would wait for ever, so only
    the supervisor ending the whole run on the OOM kill (cgroup v1 has no oom.group) ends it."""
    config = acp_child({"ALLOC_MB": "400", "ALLOC_IN": "grandchild", "HANG": "prompt"}, memory_max="96M")
    result, run = await run_once(config)
    assert result.stop_reason == StopReason.ERROR
    assert result.diagnostic is not None
    first, second = result.diagnostic.split("\n")
    assert first.startswith("Subagent failure (provider: ACP; stage: ")
    assert second == limit("memory", "96 MiB")
    assert run.exit_facts.signal == "SIGKILL"  # the child itself was ended with its grandchild
    assert run.resources.memory_peak_bytes <= 96 * MiB


@needs_limits
@pytest.mark.anyio
async def test_a_limit_too_small_to_start_is_a_failed_start_naming_it() -> None:
    with pytest.raises(StartFailed) as caught:
        await run_once(acp.example_agent_config(memory_max="2M", stderr="discard"))
    first, second = caught.value.diagnostic.split("\n")
    assert first.startswith("Subagent failure (provider: ACP; stage: initialize; ")
    assert second == limit("memory", "2 MiB")
    assert caught.value.quiescent


@needs_limits
def test_runs_together_past_the_host_ceiling(tmp_path: Path) -> None:
    """Two runs of 160 MiB each, allocating at the same time under a 192 MiB ceiling: the
    kernel kills one of them (the whole run goes), the batch goes on and exits 1."""
    hold = tmp_path / "hold"
    hold.mkdir()
    knobs = {"ACP_CHILD_ALLOC_MB": "160", "ACP_CHILD_ALLOC_HOLD": f"{hold}:2"}
    config = write_config(tmp_path / "agents.toml", entry("hog", knobs, grace_ms=300))
    items = write_input(tmp_path / "in.jsonl", {"id": "a", "task": "t"}, {"id": "b", "task": "t"})
    proc = subagents_batch(
        str(items), "--config", str(config), "--concurrency", "2", "--max-memory", "192M", cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted(r["id"] for r in records) == ["a", "b"]
    ended = [r for r in records if r["stop_reason"] != "completed"]
    assert ended, "the ceiling stopped no run"
    for record in ended:
        assert record["diagnostic"].split("\n")[1] == limit("memory", "192 MiB", "host")
    for record in records:
        assert record["resources"]["memory_peak_bytes"] <= 192 * MiB
        assert record["quiescent"]
        assert tagged(record["run_id"]) == []


# -- processes and CPU -------------------------------------------------------------------------


@needs_limits
@pytest.mark.anyio
async def test_a_fork_bomb_under_pids_max() -> None:
    """A grandchild forks until the kernel refuses; the child then fails: the processes line
    explains it, the tree never held more than the limit, and nothing is left after."""
    result, run = await run_once(acp_child({"FORK_BOMB": "200", "EXIT_AT": "prompt"}, pids_max=24))
    assert result.stop_reason == StopReason.ERROR
    assert result.diagnostic == "\n".join(
        [failure("process", "process-exit", "exit code: 1"), limit("processes", "24")]
    )
    assert re.match(r"forks refused after \d+\n", result.output)
    assert run.resources.pids_peak <= 24


@needs_limits
@pytest.mark.anyio
async def test_cpu_max_throttles_a_spinner() -> None:
    """Four processes spinning 0.15 s of CPU each under cpu_max = 0.2 (a demand of up to two
    CPUs against a quota of 20 ms in each 100 ms period: exceeded even on a machine whose other
    work leaves the run a quarter of a CPU): the kernel throttled the run, and the tree's CPU time
    over the run's wall time stays at about a fifth of a CPU (not a failure)."""
    throttled: list[int] = []

    def look(run: Any) -> None:  # the cpu leaf's counters, before the teardown removes it
        process = internals(run).process
        assert process is not None
        enclosure: Any = process._enclosure
        leaf = enclosure.cgroups.leaves["cpu"]
        # a root child's own group below the leaf carries a copy of the quota: it may be throttled first
        total = 0
        for group in (leaf, *(leaf / enclosure.below for _ in [0] if enclosure.below)):
            stat = (group / "cpu.stat").read_text()
            total += int(re.search(r"^nr_throttled (\d+)$", stat, re.M).group(1))  # type: ignore[union-attr]
        throttled.append(total)

    began = time.monotonic()
    knobs = {"SPIN_MS": "150", "SPIN_PROCS": "4"}
    result, run = await run_once(acp_child(knobs, cpu_max=0.2), before_dispose=look)
    wall = time.monotonic() - began
    assert result.stop_reason == StopReason.COMPLETED
    assert result.output.startswith("spun 150 ms\n")
    assert throttled[0] > 0
    assert 0.6 <= run.resources.cpu_s <= 0.24 * wall


# -- time and silence ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_silent_child_is_stalled(mode: str) -> None:
    """Nothing on stdout and no CPU for stall_timeout_ms: the run settles error, with its
    partial output, and the tree goes through the ladder."""
    result, run = await run_once(acp_child({"HANG": "prompt"}, stall_timeout_ms=400, containment=mode))
    assert result == SubagentResult(
        output="hello from acp_child",
        stop_reason=StopReason.ERROR,
        diagnostic="\n".join([failure("prompt", "transport"), limit("silence", "0.4 s")]),
    )
    assert (run.resources is None) == (mode == "process-tree")


@pytest.mark.anyio
async def test_a_child_busy_on_cpu_is_not_stalled(mode: str) -> None:
    """Writing nothing while it spins 1 s of CPU, twice the silence limit: it is working."""
    result, _ = await run_once(acp_child({"SPIN_MS": "1000"}, stall_timeout_ms=500, containment=mode))
    assert result.stop_reason == StopReason.COMPLETED
    assert result.output.startswith("spun 1000 ms\n")


@pytest.mark.anyio
async def test_timeout_ms_bounds_a_turn_from_spawn() -> None:
    """A turn that never ends: the time limit ends it (in the start, should the start itself take
    that long on a loaded machine, as a failed start with the same line)."""
    outcome: SubagentResult | StartFailed
    try:
        outcome, _ = await run_once(acp_child({"HANG": "prompt"}, timeout_ms=2000))
    except StartFailed as exc:
        outcome = exc
    if isinstance(outcome, StartFailed):
        assert outcome.diagnostic.endswith("\n" + limit("time", "2 s"))
    else:
        assert outcome.stop_reason == StopReason.ERROR
        assert outcome.output == "hello from acp_child"
        assert outcome.diagnostic == "\n".join([failure("prompt", "transport"), limit("time", "2 s")])


@pytest.mark.anyio
async def test_timeout_ms_counts_the_start() -> None:
    with pytest.raises(StartFailed) as caught:
        await run_once(acp_child({"HANG": "initialize"}, timeout_ms=300))
    assert caught.value.diagnostic == "\n".join([failure("initialize", "transport"), limit("time", "0.3 s")])


# -- configuration, front-ends, doctor -------------------------------------------------------------


def test_bad_limits_are_usage_errors(tmp_path: Path) -> None:
    proc = subagents("run", "--memory-max", "12Q", "t", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (
        2,
        'subagents: --memory-max: must be a number of bytes or a size with a binary unit (B, K, M, G, T), e.g. "512M"\n',
    )
    proc = subagents_batch(str(tmp_path / "in.jsonl"), "--max-pids", "many", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, "subagents: --max-pids: must be a positive integer\n")


def test_doctor_says_how_each_limit_is_enforced() -> None:
    lines = host_limit_lines()
    assert [line.split(":")[0] for line in lines] == [
        "limit memory_max",
        "limit pids_max",
        "limit cpu_max",
        "limit timeout_ms, stall_timeout_ms",
    ]
    for line, controller in zip(lines, ("memory", "pids", "cpu"), strict=False):
        hierarchy = SUPPORT.where.get(controller)
        if hierarchy is None:
            assert line.endswith(f"unavailable ({SUPPORT.why_not[controller]})")
        elif hierarchy.version == 1:
            assert f": cgroup v1 {controller} ({hierarchy.directory})" in line
        else:
            assert f": cgroup v2 ({hierarchy.directory})" in line


# -- a dead host's cgroup v1 groups ----------------------------------------------------------------


@contextlib.contextmanager
def member_of(*groups: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A sleeping ``sh`` that entered a run leaf under each of ``groups`` (made here)."""
    leaves = [group / "run-test" for group in groups]
    for leaf in leaves:
        leaf.mkdir(parents=True)
    script = 'for f; do echo $$ > "$f/cgroup.procs" || exit 1; done; echo ready; exec sleep 600'
    proc = subprocess.Popen(["sh", "-c", script, "sh", *map(str, leaves)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        for path in [*leaves, *groups]:
            with contextlib.suppress(OSError):
                path.rmdir()


@needs_v1
@pytest.mark.serial  # a dead host's groups: alone on the machine (see conftest)
def test_the_keeper_removes_a_runs_v1_leaves_when_its_host_dies() -> None:
    assert BASE is not None
    with stand_in_host() as (_stand_in, identity):
        name = f"subagents-{identity.pid}-{identity.start}"
        groups = [BASE / name, *(h.directory / name for h in SUPPORT.v1)]
        with member_of(*groups) as member:
            fds = pidfds([member.pid])
            read_fd, write_fd = os.pipe()
            keeper = subprocess.Popen(
                [PYTHON, "-I", "-S", str(KEEPER_PROGRAM), HOST_TAG_VARIABLE, str(identity)],
                stdin=read_fd,
                start_new_session=True,
            )
            os.close(read_fd)
            leaves = "\t".join(str(group / "run-test") for group in groups)
            os.write(write_fd, f"+run test {member.pid} {start_time(member.pid)} {leaves}\n".encode())
            os.close(write_fd)  # the host "dies"
            assert keeper.wait(timeout=GONE_WITHIN) == 0
            assert wait_gone(fds) == []
            assert [group for group in groups if group.exists()] == []


@needs_v1
@pytest.mark.serial  # a dead host's groups: alone on the machine (see conftest)
def test_reap_removes_a_dead_hosts_v1_groups(tmp_path: Path) -> None:
    with stand_in_host() as (_stand_in, identity):
        name = f"subagents-{identity.pid}-{identity.start}"
    assert not host_is_alive(identity)
    groups = [h.directory / name for h in SUPPORT.v1]
    with member_of(*groups) as member:  # what the dead host left in its v1 groups
        fds = pidfds([member.pid])
        reap = subagents("reap", cwd=tmp_path)
        assert reap.returncode == 0
        reaped = set(re.findall(r"^reaped cgroup (\S+) \(\d+ process(?:es)?\)$", reap.stdout, re.M))
        assert {str(group) for group in groups} <= reaped
        assert wait_gone(fds) == []
        assert [group for group in groups if group.exists()] == []
