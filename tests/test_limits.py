"""Limits without processes: strict keys, the limit line, and the cgroup v2 file protocol.

This machine cannot enable the v2 memory or pids controllers (they are bound to v1
hierarchies the host uses), so the v2 path is exercised here against a directory laid
out like a cgroup v2 tree: what the supervisor writes where, and what it makes of the
counters the kernel would write.  The v1 path runs on the real kernel in
``test_bounded.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from supervisor import ConfigurationError, set_host_ceiling
from supervisor._diagnostic import LimitFacts, LimitResource, LimitScope, format_bytes
from supervisor.cli._config_file import ConfigError, load_file
from supervisor.process import HitScope, KernelHit, Limits, limit_support
from supervisor.process._host_groups import HostGroups
from supervisor.process._limit_support import Hierarchy
from supervisor.process._limit_values import LimitRefused, Usage
from supervisor.process._limits import RunCgroups
from supervisor.providers import acp

MiB = 2**20


def config(**keys: Any) -> acp.Config:
    return acp.Config(command="agent", **keys)


# -- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"memory_max": "256M"}, Limits(memory_max=256 * MiB)),
        ({"memory_max": "1.5GiB"}, Limits(memory_max=1536 * MiB)),
        ({"memory_max": 4096}, Limits(memory_max=4096)),
        ({"pids_max": 64, "cpu_max": 0.5}, Limits(pids_max=64, cpu_max=0.5)),
        ({"cpu_max": 2}, Limits(cpu_max=2.0)),
    ],
)
def test_limit_keys_take_sizes_counts_and_cpus(keys: dict[str, Any], expected: Limits) -> None:
    assert config(**keys).limits == expected


def test_time_keys_need_no_cgroup() -> None:
    found = config(timeout_ms=600_000, stall_timeout_ms=120_000, containment="process-tree")
    assert (found.timeout_ms, found.stall_timeout_ms, found.limits) == (600_000, 120_000, Limits())


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "memory_max",
            "12Q",
            'must be a number of bytes or a size with a binary unit (B, K, M, G, T), e.g. "512M"',
        ),
        (
            "memory_max",
            "3000",
            'must be a number of bytes or a size with a binary unit (B, K, M, G, T), e.g. "512M"',
        ),
        ("memory_max", True, 'must be a number of bytes or a size such as "512M"'),
        ("memory_max", 0, "must be a positive size no greater than 4611686018427387904 bytes"),
        ("pids_max", "64", "must be an integer"),
        ("pids_max", 0, "must be a positive integer no greater than 4194304"),
        ("cpu_max", 0, "must be a number of CPUs from 0.01 to 4096"),
        ("cpu_max", "1", "must be a number"),
        ("timeout_ms", 0, "must be a positive finite number no greater than 2147483647"),
        ("stall_timeout_ms", True, "must be a number"),
    ],
)
def test_a_bad_limit_is_an_error_naming_the_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        config(**{key: value})
    ((error),) = caught.value.errors()
    assert error["loc"] == (key,)
    assert str(error["msg"]).removeprefix("Value error, ") == message


@pytest.mark.parametrize("key", ["memory_max", "pids_max", "cpu_max"])
def test_process_tree_containment_refuses_the_kernel_limits(tmp_path: Path, key: str) -> None:
    path = tmp_path / "agents.toml"
    value = '"64M"' if key == "memory_max" else "1"
    path.write_text(
        f'[[provider]]\nkind = "acp"\ncommand = "agent"\ncontainment = "process-tree"\n{key} = {value}\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert str(caught.value) == (
        f'{path}: provider[0] "acp": {key}: cannot be enforced in process-tree containment '
        "(only timeout_ms and stall_timeout_ms are)"
    )


def test_a_bad_host_ceiling_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"^host ceiling: must be a number of bytes"):
        set_host_ceiling(memory_max="lots")
    with pytest.raises(ConfigurationError, match=r"^host ceiling: pids_max: must be an integer$"):
        set_host_ceiling(pids_max="8")  # type: ignore[arg-type]


# -- the limit line --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "line"),
    [
        (LimitFacts(LimitResource.MEMORY, 256 * MiB), "Subagent limit (resource: memory; limit: 256 MiB)"),
        (LimitFacts(LimitResource.PROCESSES, 64), "Subagent limit (resource: processes; limit: 64)"),
        (LimitFacts(LimitResource.TIME, 600_000), "Subagent limit (resource: time; limit: 600 s)"),
        (LimitFacts(LimitResource.SILENCE, 120_000.0), "Subagent limit (resource: silence; limit: 120 s)"),
        (LimitFacts(LimitResource.SILENCE, 1500), "Subagent limit (resource: silence; limit: 1.5 s)"),
        (
            LimitFacts(LimitResource.MEMORY, 3 * 2**29, LimitScope.HOST),
            "Subagent limit (resource: memory; limit: 1536 MiB; scope: host)",
        ),
        (
            LimitFacts(LimitResource.MEMORY, None, LimitScope.SYSTEM),
            "Subagent limit (resource: memory; scope: system)",
        ),
    ],
)
def test_the_limit_line(facts: LimitFacts, line: str) -> None:
    assert facts.line() == line


def test_sizes_print_in_the_largest_exact_binary_unit() -> None:
    assert [format_bytes(n) for n in (2**30, 1536 * MiB, 512 * 1024, 1000)] == [
        "1 GiB",
        "1536 MiB",
        "512 KiB",
        "1000 bytes",
    ]


# -- the cgroup v2 file protocol, on a directory laid out like a v2 tree --------------------------


def fake_v2_base(root: Path, controllers: str = "cpu memory pids") -> Path:
    """A directory shaped like this process's cgroup v2 group with ``controllers`` delegated."""
    base = root / "base"
    base.mkdir()
    (base / "cgroup.procs").write_text("")
    (base / "cgroup.controllers").write_text(controllers + "\n")
    (base / "cgroup.subtree_control").write_text("")
    return base


def kernel_files(group: Path, **files: str) -> None:
    """What the kernel shows in a new group: the files the supervisor reads or checks for."""
    group.mkdir(exist_ok=True)
    defaults = {
        "memory.swap.max": "max",
        "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
        "memory.peak": "0",
        "pids.events.local": "max 0\n",
        "pids.peak": "0",
        "cpu.stat": "usage_usec 0\nuser_usec 0\nsystem_usec 0\n",
    }
    for name, text in {**defaults, **files}.items():
        (group / name).write_text(text)


def test_v2_limits_are_written_where_the_kernel_reads_them(tmp_path: Path) -> None:
    base = fake_v2_base(tmp_path)
    support = limit_support(base)
    assert {c: h.version for c, h in support.where.items()} == {"memory": 2, "pids": 2, "cpu": 2}
    assert (base / "cgroup.subtree_control").read_text() == "+cpu"  # one write per controller: the last
    groups = HostGroups()
    host = groups.group(
        Hierarchy(2, base, frozenset(support.where)), "subagents-1-2", ["cpu", "memory", "pids"]
    )
    assert (host / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    leaf = host / "run-x"
    kernel_files(leaf)
    run = RunCgroups.create(
        leaf, support, Limits(memory_max=256 * MiB, pids_max=64, cpu_max=0.5), host_groups=groups
    )
    written = {
        name: (leaf / name).read_text() for name in ("memory.max", "memory.swap.max", "memory.oom.group")
    }
    assert written == {"memory.max": "268435456", "memory.swap.max": "0", "memory.oom.group": "1"}
    assert (leaf / "pids.max").read_text() == "64"
    assert (leaf / "cpu.max").read_text() == "50000 100000"
    assert run.v1_leaves == []  # the v2 leaf is the only group the child enters
    assert run.hit() is None

    # What the kernel would count: a peak at the limit, an out-of-memory kill.
    kernel_files(
        leaf,
        **{
            "memory.events": "max 3\noom 1\noom_kill 1\n",
            "memory.peak": "268435456",
            "cpu.stat": "usage_usec 2500000\n",
            "pids.peak": "7",
        },
    )
    assert run.hit() == KernelHit("memory", 256 * MiB, HitScope.RUN)
    assert run.usage() == Usage(cpu_s=2.5, memory_peak_bytes=256 * MiB, pids_peak=7)


def test_v2_host_ceiling_and_whose_limit_stopped_the_run(tmp_path: Path) -> None:
    base = fake_v2_base(tmp_path)
    support = limit_support(base)
    groups = HostGroups()
    hierarchy = Hierarchy(2, base, frozenset(support.where))
    host = groups.group(hierarchy, "subagents-1-2", ["cpu", "memory", "pids"])
    kernel_files(host)
    groups.set_ceiling(Limits(memory_max=2**30, pids_max=500))
    assert [(host / n).read_text() for n in ("memory.max", "memory.swap.max", "pids.max")] == [
        "1073741824",
        "0",
        "500",
    ]
    leaf = host / "run-y"
    kernel_files(leaf)
    run = RunCgroups.create(leaf, support, Limits(), host_groups=groups)
    assert not (leaf / "memory.max").exists()  # no limit of its own: only the ceiling above it
    assert (leaf / "memory.oom.group").read_text() == "1"  # but an OOM still takes the whole run
    kernel_files(leaf, **{"pids.events.local": "max 2\n", "pids.peak": "120"})
    (host / "pids.peak").write_text("500")
    assert run.hit() == KernelHit("processes", 500, HitScope.HOST)
    kernel_files(leaf, **{"memory.events": "oom_kill 1\n"})
    assert run.hit() == KernelHit("memory", None, HitScope.SYSTEM)  # neither peak reached its limit
    groups.set_ceiling(Limits())
    assert [(host / n).read_text() for n in ("memory.max", "pids.max")] == ["max", "max"]


def test_a_v2_controller_the_kernel_will_not_enable_is_a_reason_naming_the_file(tmp_path: Path) -> None:
    base = fake_v2_base(tmp_path, "memory")
    (base / "cgroup.subtree_control").unlink()
    (base / "cgroup.subtree_control").mkdir()  # any write to it fails, as a refusing kernel's would
    support = limit_support(base)
    assert "memory" not in support.where
    assert support.why_not["memory"] == (
        f"the memory controller is delegated to {base} (cgroup v2), but writing +memory to "
        f"{base / 'cgroup.subtree_control'} was refused (EISDIR)"
    )
    leaf = base / "run-z"
    kernel_files(leaf)
    with pytest.raises(Exception, match="was refused"):
        RunCgroups.create(leaf, support, Limits(memory_max=MiB), host_groups=HostGroups())
    with pytest.raises(LimitRefused) as refused:
        HostGroups().group(Hierarchy(2, base / "missing", frozenset()), "subagents-1-2")
    assert refused.value.filename == str(base / "missing" / "subagents-1-2")


@pytest.mark.parametrize(
    "shape",
    [
        [],  # a leaf with no group below (link count 2: not listed)
        ["agent"],  # the root child's group only (found by name, not listed)
        ["agent", "agent/nested"],  # a group a nested supervisor made below the child's
        ["agent", "other"],  # a group beside the child's
        ["other"],  # one group, not the one named
    ],
)
def test_a_groups_subtree_is_every_group_below_it_deepest_first(tmp_path: Path, shape: list[str]) -> None:
    """What ``os.walk(topdown=False)`` gives (the order ``rmdir`` needs), whether the link
    counts let it skip the listing or not (a file system that does not count them lists)."""
    from supervisor.process._limit_files import subtree, subtree_sum

    leaf = tmp_path / "run-x"
    leaf.mkdir()
    (leaf / "memory.oom_control").write_text("oom_kill_disable 0\noom_kill 1\n")
    for name in shape:
        (leaf / name).mkdir()
        (leaf / name / "memory.oom_control").write_text("oom_kill 2\n")
    walked = [Path(root) for root, _dirs, _files in os.walk(leaf, topdown=False)]
    got = subtree(leaf, "agent")
    assert sorted(got) == sorted(walked)
    assert all(got.index(d) < got.index(d.parent) for d in got if d.parent in got)  # deepest first
    assert subtree_sum(leaf, "memory.oom_control", "oom_kill", "agent") == 1 + 2 * len(shape)
    assert subtree(tmp_path / "gone") == []
