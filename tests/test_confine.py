"""Confinement (Landlock) and a root child that is not the machine's root, over real processes.

The child is ``children/probe.py``: it tries every access the policy denies (and the few
it grants) and reports what the kernel answered.  The root cases run as root in cgroup
mode and leave the machine's own cgroup roots exactly as they found them (a snapshot
before, a comparison after: a changed setting is written back and fails the test).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.abc import TaskGroup
from pydantic import ValidationError

from machines import TeardownLadder
from supervisor import Registry, SubagentRequest
from supervisor.process import (
    Confinement,
    Containment,
    ContainmentMode,
    Limits,
    ManagedProcess,
    SpawnSpec,
    StderrMode,
    child_environment,
    containment_for,
)
from supervisor.process._confine import (
    CAPABILITIES,
    KEPT_CAPABILITIES,
    check_confinement,
    confinement_lines,
    dropped_capabilities,
    landlock_support,
)
from supervisor.providers.acp import Config as AcpConfig
from tests.conftest import CGROUP_AVAILABLE, CHILDREN, PYTHON
from tests.support import cgroup_roots
from tests.support.shims import either_shim

pytestmark = pytest.mark.anyio
__all__ = ["either_shim"]  # the fixture, used by name

ROOT = os.geteuid() == 0
REPO = Path(__file__).resolve().parent.parent
PROBE = str(CHILDREN / "probe.py")
needs_landlock = pytest.mark.skipif(
    not landlock_support().enforceable, reason=f"no Landlock here: {landlock_support().reason}"
)
root_in_cgroup_mode = pytest.mark.skipif(
    not (ROOT and CGROUP_AVAILABLE), reason="a root supervisor in cgroup mode"
)


@pytest.fixture
def untouched_roots() -> Iterator[None]:
    """The machine's cgroup roots as they were before the test, or the test fails (after restoring them)."""
    before = cgroup_roots.snapshot()
    yield
    changes = cgroup_roots.check_unchanged(before)
    assert not changes, f"the machine's cgroup roots were changed (restored): {changes}"


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Any]:
    """A workspace, a fake home with a key, a folder outside, a granted folder and file."""
    return make_places(tmp_path)


def make_places(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "notes.txt").write_text("keep me")
    (tmp_path / "state").mkdir()
    (tmp_path / "granted.txt").write_text("you may read this")
    return {
        "tmp": tmp_path,
        "workspace": tmp_path / "workspace",
        "secret": str(tmp_path / "home" / ".ssh" / "id_ed25519"),
        "outside": str(tmp_path / "outside"),
        "outside_file": str(tmp_path / "outside" / "notes.txt"),
        "writable": str(tmp_path / "state"),
        "readable": str(tmp_path / "granted.txt"),
    }


def probe_spec(
    places: dict[str, Any],
    containment: Containment,
    *,
    confinement: Confinement | None = None,
    limits: Limits | None = None,
    keep: frozenset[str] = frozenset(),
    extra: dict[str, Any] | None = None,
) -> SpawnSpec:
    tag = os.urandom(8).hex()
    wanted = {k: v for k, v in places.items() if isinstance(v, str)} | (extra or {})
    return SpawnSpec(
        argv=[PYTHON, PROBE, json.dumps(wanted)],
        cwd=places["workspace"],
        env=child_environment({}, run_tag=tag),
        run_tag=tag,
        stderr=StderrMode.LOG,
        containment=containment,
        limits=limits or Limits(),
        confinement=confinement,
        keep_capabilities=keep,
    )


def confinement_for(places: dict[str, Any]) -> Confinement:
    # the probe and the interpreter's libraries are read from the repository's checkout
    return Confinement(writable=(Path(places["writable"]),), readable=(Path(places["readable"]), REPO))


async def probe(spec: SpawnSpec, task_group: TaskGroup) -> tuple[dict[str, str], ManagedProcess]:
    proc = await ManagedProcess.spawn(spec, task_group)
    line = await proc.stdout.readline()
    assert line, proc.stderr_tail
    return json.loads(line)["results"], proc


async def finish(proc: ManagedProcess) -> None:
    report = await proc.teardown(TeardownLadder(), eof_grace=5.0, term_grace=2.0)
    assert report.quiescent
    assert proc.exit_facts is not None
    assert proc.exit_facts.exit_code == 0


def mask(names: frozenset[str]) -> int:
    return sum(1 << CAPABILITIES[name] for name in names)


# -- Landlock --------------------------------------------------------------------------------------

DENIED = (
    "read_secret", "list_secret_folder", "write_outside", "truncate_outside", "write_tmp",
    "mkfifo_outside", "symlink_outside", "rename_out_of_workspace", "link_out_of_workspace",
    "write_readable",
)  # fmt: skip
GRANTED = (
    "write_workspace",
    "write_tmpdir",
    "write_writable",
    "read_readable",
    "read_system",
    "write_dev_null",
)


@needs_landlock
async def test_a_confined_child_is_denied_every_access_outside_its_policy(
    either_shim: str, places: dict[str, Any], task_group: TaskGroup, containment: Containment
) -> None:
    spec = probe_spec(places, containment, confinement=confinement_for(places))
    results, proc = await probe(spec, task_group)
    tmpdir = Path(proc._tmpdir or "/nonexistent")  # its private TMPDIR, removed with the run
    assert tmpdir.is_dir()
    await finish(proc)

    assert {name: results[name] for name in DENIED} == {name: "EACCES" for name in DENIED} | {
        # a rename or link across the policy's border is refused as a cross-device one
        "rename_out_of_workspace": results["rename_out_of_workspace"],
        "link_out_of_workspace": results["link_out_of_workspace"],
    }
    assert results["rename_out_of_workspace"] in ("EACCES", "EXDEV")
    assert results["link_out_of_workspace"] in ("EACCES", "EXDEV")
    assert {name: results[name] for name in GRANTED} == dict.fromkeys(GRANTED, "ok")
    assert results["tmpdir_is_private"] == "True"
    assert results["no_new_privs"] == "1"
    if (landlock_support().abi or 0) >= 6:
        assert results["signal_parent"] == "EPERM"  # signals are scoped to the run's own processes
    assert results["parent_environ"] == "EACCES"
    # nothing outside the policy changed; what the policy granted did
    assert sorted(os.listdir(places["outside"])) == ["notes.txt"]
    assert Path(places["outside_file"]).read_text() == "keep me"
    assert Path(places["readable"]).read_text() == "you may read this"
    assert (places["workspace"] / "made-here.txt").exists()
    assert (Path(places["writable"]) / "state").exists()
    assert not tmpdir.exists()


async def test_an_unconfined_child_of_the_same_user_can_do_all_of_it(
    places: dict[str, Any], task_group: TaskGroup, containment: Containment
) -> None:
    """The control: without ``confine`` the same probe reads the key and writes outside (the
    denials above are Landlock's, not an accident of the test's folders)."""
    results, proc = await probe(probe_spec(places, containment), task_group)
    await finish(proc)
    assert results["read_secret"] == "PRIVATE KEY"
    assert results["write_outside"] == "ok"
    assert results["truncate_outside"] == "ok"
    assert results["tmpdir_is_private"] == "False"


@needs_landlock
async def test_the_example_agent_runs_confined_through_the_registry(tmp_path: Path) -> None:
    """A new user's first confined run: the built-in example agent, its source in this checkout."""
    from supervisor._kinds import example_config, example_kind

    found = example_kind()
    assert found is not None
    name, kind = found
    config = example_config(kind, stderr="discard", confine=True, readable=[str(REPO)])
    registry = Registry()
    registry.register(kind.provider(config, name))
    async with registry.run(name, SubagentRequest(task="say hello", parent_cwd=tmp_path)) as run:
        result = await run.result()
    assert result.stop_reason == "completed", result.diagnostic
    assert run.quiescent


@needs_landlock
def test_the_doctor_line_names_the_abi_the_kernel_answered() -> None:
    abi = landlock_support().abi
    assert confinement_lines()[0].startswith(f"confine: available (Landlock ABI {abi}")
    assert check_confinement().abi == abi


# -- configuration -----------------------------------------------------------------------------


def test_confinement_keys_are_checked(tmp_path: Path) -> None:
    base = {"command": "agent"}
    with pytest.raises(ValidationError, match="has effect only with confine = true"):
        AcpConfig.model_validate({**base, "writable": [str(tmp_path)]})
    with pytest.raises(ValidationError, match="does not exist"):
        AcpConfig.model_validate({**base, "confine": True, "writable": [str(tmp_path / "missing")]})
    with pytest.raises(ValidationError, match="a relative path needs a base directory"):
        AcpConfig.model_validate({**base, "confine": True, "readable": ["state"]})
    with pytest.raises(ValidationError, match="must be true or false"):
        AcpConfig.model_validate({**base, "confine": "yes"})
    with pytest.raises(ValidationError, match="is not a Linux capability"):
        AcpConfig.model_validate({**base, "keep_capabilities": ["sys_everything"]})
    kept = AcpConfig.model_validate({**base, "keep_capabilities": ["CAP_NET_RAW", "net_raw", "sys_ptrace"]})
    assert kept.keep_capabilities == ["net_raw", "sys_ptrace"]
    relative = AcpConfig.model_validate(
        {**base, "confine": True, "writable": ["."]}, context={"base_dir": tmp_path}
    )
    if landlock_support().enforceable:
        assert relative.confinement == Confinement(writable=(tmp_path,))
    assert AcpConfig.model_validate(base).confinement is None


@pytest.mark.skipif(landlock_support().enforceable, reason="this kernel can enforce Landlock")
def test_confine_where_the_kernel_cannot_is_a_configuration_error() -> None:
    with pytest.raises(ValidationError, match="confine = true cannot be enforced here"):
        AcpConfig.model_validate({"command": "agent", "confine": True})


# -- the root child ------------------------------------------------------------------------------


@root_in_cgroup_mode
@pytest.mark.usefixtures("untouched_roots")
async def test_a_root_child_is_not_the_machines_root(
    either_shim: str, places: dict[str, Any], task_group: TaskGroup
) -> None:
    """What the third release's root child did to the machine, tried again: write the cgroup
    root it sees, fill it with groups, raise its own limits, mount, unshare, reach the host's
    mount through ``/proc/1/root``.  It sees only its own group, lacks the capabilities, and
    the run's limits stay where they were set."""
    containment = containment_for(ContainmentMode.CGROUP)
    limits = Limits(memory_max=512 << 20, pids_max=200)
    spec = probe_spec(places, containment, limits=limits)
    results, proc = await probe(spec, task_group)
    enclosure: Any = proc._enclosure
    memory_leaf = enclosure.cgroups.leaves["memory"]
    pids_leaf = enclosure.cgroups.leaves["pids"]
    v1 = enclosure.cgroups._version("memory") == 1
    memory_file = "memory.limit_in_bytes" if v1 else "memory.max"
    assert (memory_leaf / memory_file).read_text().strip() == str(512 << 20)
    assert (pids_leaf / "pids.max").read_text().strip() == "200"
    assert enclosure.below  # it runs in a group below the leaf that carries the limits
    made = sorted(p.name for p in (enclosure.entered[0]).iterdir() if p.is_dir())
    await finish(proc)

    assert int(results["cap_bnd"], 16) == mask(KEPT_CAPABILITIES)
    assert not int(results["cap_bnd"], 16) >> CAPABILITIES["sys_admin"] & 1
    assert results["cgroup"] == "0::/"
    # what a runtime sizing itself from its cgroup reads: the run's limits (a copy in its own group)
    assert results["view_memory_limit"] == str(512 << 20)
    assert results["view_pids_limit"] == "200"
    assert results["v2_view_procs"] == str(proc.pid)  # only itself
    assert results["v2_view_has_agent_group_above"] == "False"
    # it may write the root it sees: that root is its own group, and its limits are above it
    assert results["write_max_descendants"] == "ok"
    assert results["make_groups"] == "ok"
    assert made == sorted(f"g{i}" for i in range(20))
    assert results["see_devices_v1"] == "False"  # no group of its own there: hidden
    assert results["see_release_agent"] == "False"
    assert results["write_core_pattern"] == "EROFS"
    assert results["mount"] == "EPERM"
    assert results["umount_view"] == "EPERM"
    assert results["unshare"] == "EPERM"
    assert results["host_root_via_proc1"] == "EACCES"
    assert results["parent_environ"] == "EACCES"
    assert results["write_core_pattern"] == "EROFS"
    assert results["write_sys"] in ("EROFS", "ENOENT")
    assert not enclosure.leaf.exists()  # its groups went with the run


@root_in_cgroup_mode
@pytest.mark.usefixtures("untouched_roots")
async def test_a_root_child_cannot_raise_its_own_memory_limit(
    places: dict[str, Any], task_group: TaskGroup
) -> None:
    """It writes "no limit" into every memory limit it can see, then allocates four times its
    limit: the kernel ends the run at the configured limit."""
    containment = containment_for(ContainmentMode.CGROUP)
    spec = probe_spec(places, containment, limits=Limits(memory_max=64 << 20), extra={"allocate_mb": 256})
    results, proc = await probe(spec, task_group)
    assert results["raise_memory_v1"] == "ok" or results["raise_memory_v2"] == "ok"
    exit_facts = await proc.wait_exit(60)
    hit = proc.limit_hit()
    report = await proc.teardown(TeardownLadder(), eof_grace=1.0, term_grace=1.0)
    assert report.quiescent
    assert exit_facts is not None
    assert exit_facts.signal == signal.SIGKILL.name
    assert hit is not None
    assert hit.resource == "memory"
    assert hit.limit == 64 << 20


@root_in_cgroup_mode
@pytest.mark.usefixtures("untouched_roots")
async def test_an_embedder_keeps_a_capability(places: dict[str, Any], task_group: TaskGroup) -> None:
    containment = containment_for(ContainmentMode.CGROUP)
    spec = probe_spec(places, containment, keep=frozenset({"net_raw"}))
    results, proc = await probe(spec, task_group)
    await finish(proc)
    assert int(results["cap_bnd"], 16) == mask(KEPT_CAPABILITIES | {"net_raw"})
    assert CAPABILITIES["net_raw"] not in dropped_capabilities({"net_raw"})


@pytest.mark.skipif(not ROOT, reason="a root supervisor")
@pytest.mark.usefixtures("untouched_roots")
async def test_a_root_child_in_process_tree_mode_sees_no_cgroup_mount(
    either_shim: str, places: dict[str, Any], task_group: TaskGroup
) -> None:
    containment = containment_for(ContainmentMode.PROCESS_TREE)
    results, proc = await probe(probe_spec(places, containment), task_group)
    await finish(proc)
    assert int(results["cap_bnd"], 16) == mask(KEPT_CAPABILITIES)
    assert results["v2_view_procs"] == "ENOENT"
    assert results["write_max_descendants"] == "ENOENT"
    assert results["see_release_agent"] == "False"
    assert results["write_core_pattern"] == "EROFS"


NOBODY_HOST = """
import anyio, json, os, sys
from pathlib import Path
from machines import TeardownLadder
from supervisor.process import (
    Confinement, ContainmentMode, ManagedProcess, SpawnSpec, StderrMode, child_environment, containment_for,
)

async def main() -> None:
    places, repo, probe = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    tag = os.urandom(8).hex()
    confinement = Confinement(writable=(Path(places["writable"]),), readable=(Path(places["readable"]), Path(repo)))
    spec = SpawnSpec(
        argv=[sys.executable, probe, json.dumps(places)], cwd=Path(places["workspace"]),
        env=child_environment({}, run_tag=tag), run_tag=tag, stderr=StderrMode.LOG,
        containment=containment_for(ContainmentMode.PROCESS_TREE), confinement=confinement,
    )
    async with anyio.create_task_group() as tg:
        proc = await ManagedProcess.spawn(spec, tg)
        line = await proc.stdout.readline()
        report = await proc.teardown(TeardownLadder(), eof_grace=5.0, term_grace=2.0)
        tg.cancel_scope.cancel()
    from supervisor.process._cshim import compiled_shim
    print(json.dumps({
        "uid": os.geteuid(), "results": json.loads(line)["results"], "quiescent": report.quiescent,
        "compiled_shim": compiled_shim(),
    }))

anyio.run(main)
"""
SYSTEM_PYTHON = Path("/usr/bin/python3.11")


def _as_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


@needs_landlock
@pytest.mark.skipif(
    not ROOT or not SYSTEM_PYTHON.exists(), reason="needs root (to become nobody) and a system python3.11"
)
def test_a_non_root_supervisor_confines_its_child_too(either_shim: str) -> None:
    """As uid 65534: no capability to lean on, so the shim sets no_new_privs before the ruleset;
    every file the user may read (the key is world-readable here) is still out of the child's reach.
    The compiled shim is built by that user, into a cache directory of its own."""
    import shutil
    import site
    import subprocess
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="subagent-nobody-", dir="/tmp"))  # pytest's folders are root's alone
    try:
        outcome = _confined_as_nobody(tmp, make_places(tmp), site.getsitepackages(), subprocess.run)
        if either_shim == "compiled":
            assert str(outcome["compiled_shim"]).startswith(f"{tmp}/cache/")
        else:
            assert outcome["compiled_shim"] is None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _confined_as_nobody(
    tmp: Path, places: dict[str, Any], site_packages: list[str], run: Any
) -> dict[str, Any]:
    for path in (tmp, tmp / "home", tmp / "home" / ".ssh"):
        path.chmod(0o755)
    (tmp / "cache").mkdir(mode=0o700)
    os.chown(tmp / "cache", 65534, 65534)
    for path in (places["workspace"], tmp / "outside", tmp / "state"):
        path.chmod(0o777)
    for path in (Path(places["secret"]), Path(places["readable"])):
        path.chmod(0o644)
    Path(places["outside_file"]).chmod(0o666)
    wanted = {k: (str(v) if isinstance(v, Path) else v) for k, v in places.items() if k != "tmp"}
    host = run(
        [str(SYSTEM_PYTHON), "-c", NOBODY_HOST, json.dumps(wanted), str(REPO), PROBE],
        capture_output=True, text=True, timeout=120, cwd="/tmp",
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *site_packages]), "XDG_CACHE_HOME": str(tmp / "cache")},
        preexec_fn=_as_nobody, check=False,
    )  # fmt: skip
    assert host.returncode == 0, host.stderr[-2000:]
    outcome = json.loads(host.stdout)
    results = outcome["results"]
    assert outcome["uid"] == 65534
    assert outcome["quiescent"]
    assert results["no_new_privs"] == "1"
    assert results["read_secret"] == "EACCES"
    assert results["write_outside"] == "EACCES"
    assert results["truncate_outside"] == "EACCES"
    assert results["write_workspace"] == "ok"
    assert results["write_writable"] == "ok"
    assert results["read_readable"] == "ok"
    assert Path(places["outside_file"]).read_text() == "keep me"
    return dict(outcome)


def test_a_root_child_s_mount_view_shows_exactly_the_mounts_holding_its_groups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The view compares paths as strings (pathlib's ``parents`` per mount and group cost a
    cgroup-mode run about a millisecond): it must decide as ``Path`` does, a prefix that is
    not a parent (``/sys/fs/cgroup/pids`` of ``/sys/fs/cgroup/pidsx/...``) included."""
    from supervisor.process import _confine

    mounts = [
        ("/sys/fs/cgroup/unified", "cgroup2", "rw"),
        ("/sys/fs/cgroup/memory", "cgroup", "rw,memory"),
        ("/sys/fs/cgroup/pids", "cgroup", "rw,pids"),
        ("/sys/fs/cgroup/cpu", "cgroup", "rw,cpu"),
        ("/", "cgroup2", "rw"),
    ]
    monkeypatch.setattr(_confine, "_mounts", lambda: mounts)
    monkeypatch.setattr(_confine, "_controller_names", lambda: frozenset({"memory", "pids", "cpu"}))
    cases: list[list[Path] | None] = [
        None,
        [Path("/sys/fs/cgroup/unified/h/run/agent"), Path("/sys/fs/cgroup/memory/h/run/agent")],
        [Path("/sys/fs/cgroup/pidsx/h/run"), Path("/sys/fs/cgroup/memory")],
        [Path("/elsewhere/run")],
    ]
    for groups in cases:
        expected = [f"ro={path}" for path in _confine.READ_ONLY]
        for point, kind, options in mounts:
            inside = groups is not None and any(g == Path(point) or Path(point) in g.parents for g in groups)
            if not inside:
                expected.append(f"view=hide::{point}")
            elif kind == "cgroup2":
                expected.append(f"view=cgroup2::{point}")
            else:
                expected.append(f"view=cgroup:{options.split(',')[1]}:{point}")
        expected.append(f"shm={_confine.PRIVATE_SHM}")
        assert _confine.view_steps(groups) == expected, groups
