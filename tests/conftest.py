"""Shared fixtures: the asyncio backend, hypothesis profiles, and the leak guard.

The leak guard fails any test that leaves a live descendant or a zombie behind, and
the session fails at the end if anything escaped even that.  Every process a test
starts inherits ``SUBAGENT_TEST_SESSION`` (the name is not credential-shaped, so the
supervisor's scrub keeps it), so a daemon that escaped to PID 1 is still found.

Under pytest-xdist every worker is a session of its own (its own tag, its own guard, its
own end-of-session check, whose findings it hands to the controller); every process of the
whole run also carries ``SUBAGENT_TEST_ROOT``, the tag of the process that started the run,
which checks once its workers are gone that nothing carrying it is left on the machine.
Tests marked ``serial`` assert on the whole machine (dead hosts' sweeps and reaps, the
keeper): the test command runs them in a second pytest, alone, after the parallel one.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from anyio.abc import TaskGroup
from hypothesis import HealthCheck, settings

from supervisor import Run
from supervisor.process import (
    CgroupContainment,
    Containment,
    ContainmentMode,
    containment_for,
    detect_containment,
    host_group_name,
    keeper_pid,
    own_orphans,
    owns_orphans,
    set_subreaper,
    subreaper_enabled,
)
from supervisor.process._keeper_main import KEEPER_NAME
from supervisor.provider import ProviderRun
from tests.support.pidfd import pidfds
from tests.support.pidfd import wait_gone as wait_exited

# Shared checks whose ``assert``s should explain themselves, whichever test imports them first.
pytest.register_assert_rewrite("tests.support.reliability")

SESSION_VARIABLE = "SUBAGENT_TEST_SESSION"
SESSION_TAG = uuid.uuid4().hex
os.environ[SESSION_VARIABLE] = SESSION_TAG
# Every run is journaled by default: the commands the tests start write to a
# journal of this session's own, never to the user's $XDG_STATE_HOME.
_STATE_HOME = tempfile.mkdtemp(prefix="subagents-test-state-")
os.environ["XDG_STATE_HOME"] = _STATE_HOME
os.environ.pop("SUBAGENTS_JOURNAL", None)
atexit.register(shutil.rmtree, _STATE_HOME, True)

# The run's tag: set by the process that started the run (the xdist controller, or the only
# pytest), inherited by its workers; a pytest a test starts inherits it and does not own it.
ROOT_VARIABLE = "SUBAGENT_TEST_ROOT"
OWNS_ROOT = ROOT_VARIABLE not in os.environ
ROOT_TAG = os.environ.setdefault(ROOT_VARIABLE, SESSION_TAG)

TESTS = Path(__file__).resolve().parent
CHILDREN = TESTS / "children"
PYTHON = sys.executable

settings.register_profile(
    "ci",
    max_examples=15,
    stateful_step_count=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=60, stateful_step_count=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def internals(run: Run) -> ProviderRun[Any]:
    """A caller's :class:`Run` as the provider base it is (tests look at its process)."""
    assert isinstance(run, ProviderRun)
    return run


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def is_keeper(proc: psutil.Process) -> bool:
    """Whether ``proc`` is a supervising host's keeper process."""
    with contextlib.suppress(psutil.Error):
        return proc.name() == KEEPER_NAME  # the name, not the command line: a zombie has none
    return False


def settle_keepers(procs: list[psutil.Process]) -> list[psutil.Process]:
    """``procs`` without keepers that exit within a bounded wait.

    A keeper outlives its host by the moment it takes to read end of file: a CLI the
    test already waited for may leave its keeper exiting.  One that does not exit
    once its host is gone is a leak like any other.  Exited is enough (a pidfd becomes
    readable): a keeper re-parented to init stays a zombie until init reaps it, which
    here takes up to two seconds, and a zombie holds nothing.
    """
    keepers = [p for p in procs if is_keeper(p)]
    if not keepers:
        return procs
    alive = set(wait_exited(pidfds(p.pid for p in keepers if p.is_running()), 10))
    settled = {p.pid for p in keepers} - alive
    return [p for p in procs if p.pid not in settled]


def leftovers() -> list[psutil.Process]:
    """Our descendants, plus anything on the machine carrying this session's tag.

    This process's own keeper is not a leftover: it lives as long as the session and
    exits with it.
    """
    me = psutil.Process()
    found: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        for proc in me.children(recursive=True):
            found[proc.pid] = proc
    for proc in psutil.process_iter():
        if proc.pid in found or proc.pid == me.pid:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(SESSION_VARIABLE) == SESSION_TAG:
                found[proc.pid] = proc
    found.pop(keeper_pid() or 0, None)
    return list(found.values())


def tagged(tag: str) -> list[psutil.Process]:
    """Every live process on the machine whose environment carries the run tag ``tag``.

    The tests' oracle for "the tree is gone", independent of the supervisor's own tracking.
    """
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get("SUBAGENT_SUPERVISOR_RUN") == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def describe(proc: psutil.Process) -> str:
    try:
        with proc.oneshot():
            text = f"{proc.pid} [{proc.status()}] ppid={proc.ppid()} {proc.name()}"
            if proc.status() != psutil.STATUS_ZOMBIE:
                text += " " + " ".join(proc.cmdline())[:120]
            return text
    except psutil.Error:
        return f"{proc.pid} [gone]"


def clean_up(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=5)
    for proc in procs:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(proc.pid, os.WNOHANG)


CGROUP_AVAILABLE = detect_containment().cgroup_base is not None


@pytest.fixture(params=[ContainmentMode.CGROUP, ContainmentMode.PROCESS_TREE], ids=["cgroup", "process-tree"])
def containment(request: pytest.FixtureRequest) -> Containment:
    """Each containment mode in turn (cgroup only where this machine has it)."""
    mode: ContainmentMode = request.param
    if mode == ContainmentMode.CGROUP and not CGROUP_AVAILABLE:
        pytest.skip("no writable cgroup v2 hierarchy here")
    return containment_for(mode)


def run_cgroups() -> list[Path]:
    """Run leaves that exist under this process's host groups: the cgroup v2 one and, on a
    hybrid host, those in the cgroup v1 hierarchies limits use (none when cgroups are off)."""
    if not CGROUP_AVAILABLE:
        return []
    found = containment_for(ContainmentMode.CGROUP)
    assert isinstance(found, CgroupContainment)
    groups = [found.host_group, *(h.directory / host_group_name() for h in found.support.v1)]
    return sorted(p for group in groups for p in group.glob("run-*") if p.is_dir())


def clean_up_cgroups(leaves: list[Path]) -> None:
    for leaf in leaves:
        with contextlib.suppress(OSError):
            (leaf / "cgroup.kill").write_text("1")
        with contextlib.suppress(OSError):  # a cgroup v1 leaf: its members one by one
            for pid in (leaf / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
        for _ in range(100):
            with contextlib.suppress(OSError):
                leaf.rmdir()
            if not leaf.exists():
                break
            psutil.wait_procs([], timeout=0.05)


# Roots of long-lived helpers a session-scoped fixture owns (the local Ray cluster): their
# descendants outlive single tests by design, so the per-test guard passes over them,
# except a supervised run's process (it carries the run tag), which no test may leave.
# The session-end check has no such exemption: the fixture must have ended them all.
EXEMPT_ROOTS: set[int] = set()


def exempt_pids() -> set[int]:
    """The exempt roots and their descendants, less any process carrying a run tag."""
    found: set[int] = set()
    for pid in EXEMPT_ROOTS:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                if not _carries_run_tag(proc):
                    found.add(proc.pid)
    return found


def _carries_run_tag(proc: psutil.Process) -> bool:
    for _ in range(3):  # a process in the middle of an exec may not show its environment yet
        try:
            return "SUBAGENT_SUPERVISOR_RUN" in proc.environ()
        except psutil.NoSuchProcess:
            return False
        except (psutil.Error, OSError):
            time.sleep(0.05)
    return True


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    before = {p.pid for p in leftovers()}
    leaves_before = set(run_cgroups())
    subreaper = subreaper_enabled()
    orphans_owned = owns_orphans()
    yield
    try:
        check_leftovers(before, leaves_before)
    finally:
        # A test that spawned in this process may have made it the child subreaper: later
        # tests' orphans (of a CLI or server they start) would then become zombies here.
        if subreaper_enabled() != subreaper:
            set_subreaper(subreaper)
        # A test that called the CLI's ``main()`` in this process declared ``own_orphans()``:
        # the fallback's rules for later tests are the embedder's default again.
        own_orphans(orphans_owned)


def check_leftovers(before: set[int], leaves_before: set[Path]) -> None:
    new = [p for p in leftovers() if p.pid not in before]
    if EXEMPT_ROOTS:  # after the scan, so a process it found is in this snapshot of the tree
        passed_over = exempt_pids()
        new = [p for p in new if p.pid not in passed_over and p.is_running()]
    left = settle_keepers(new)
    report = "\n".join(describe(p) for p in left)
    leaves = [leaf for leaf in run_cgroups() if leaf not in leaves_before]
    if left:
        clean_up(left)
    if leaves:
        clean_up_cgroups(leaves)
        report += "".join(f"\nrun cgroup left behind: {leaf}" for leaf in leaves)
    if left or leaves:
        pytest.fail(f"test left processes behind:\n{report}", pytrace=False)


def _is_xdist_controller(config: pytest.Config) -> bool:
    return config.pluginmanager.has_plugin("dsession")


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def session_leftovers() -> str:
    """What this session left (its descendants, its tag, its run cgroups), ended; "" if nothing."""
    left = settle_keepers(leftovers())
    leaves = run_cgroups()
    if not (left or leaves):
        return ""
    report = "\n".join(describe(p) for p in left)
    report += "".join(f"\nrun cgroup left behind: {leaf}" for leaf in leaves)
    clean_up(left)
    clean_up_cgroups(leaves)
    return report


def run_leftovers() -> str:
    """Anything on the machine carrying this run's tag but this process, ended; "" if nothing."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.environ().get(ROOT_VARIABLE) == ROOT_TAG:
                found.append(proc)
    found = [p for p in found if p.pid != (keeper_pid() or 0)]
    left = settle_keepers(found)
    if not left:
        return ""
    report = "\n".join(describe(p) for p in left)
    clean_up(left)
    return report


WORKER_REPORTS = pytest.StashKey[list[str]]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """The controller keeps what a worker's end-of-session check found."""
    report = getattr(node, "workeroutput", {}).get("leftovers")
    if report:
        node.config.stash.setdefault(WORKER_REPORTS, []).append(f"[{node.gateway.id}]\n{report}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A session that runs tests (a worker, or the only pytest) checks what it left."""
    if _is_xdist_controller(session.config):
        return  # its descendants are its workers, still up: it checks once they are gone
    report = session_leftovers()
    if not report:
        return
    if _is_xdist_worker(session.config):  # handed to the controller, which reports it and fails the run
        session.config.workeroutput["leftovers"] = report  # type: ignore[attr-defined]
        return
    sys.stderr.write(f"\nprocesses left behind by the test session:\n{report}\n")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True, specname="pytest_sessionfinish")
def pytest_sessionfinish_run(session: pytest.Session, exitstatus: int) -> Iterator[None]:
    """The process that started the run checks the whole run once every worker is gone (xdist's
    controller tears its workers down in its own ``pytest_sessionfinish``, inside this wrapper)."""
    yield
    if not OWNS_ROOT:
        return
    reports = list(session.config.stash.get(WORKER_REPORTS, None) or ())
    report = run_leftovers()
    if report:
        reports.append(report)
    if reports:
        sys.stderr.write("\nprocesses left behind by the test run:\n{}\n".format("\n".join(reports)))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
async def task_group() -> AsyncIterator[TaskGroup]:
    """A task group for a test's spawns (``ManagedProcess.spawn`` watches its child in it),
    cancelled when the test ends."""
    async with anyio.create_task_group() as tg:
        yield tg
        tg.cancel_scope.cancel()
