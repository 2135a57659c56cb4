"""Host death: a supervising process killed mid-run leaves nothing running.

The host is a real process (``children/host.py``, or the CLI), never pytest itself.
Every wait is on an event (a pidfd turning readable, a line on a pipe) with a
generous bound; nothing here measures time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor import installed_kinds
from supervisor.process import (
    HOST_TAG_VARIABLE,
    Containment,
    HostIdentity,
    ManagedProcess,
    detect_containment,
    host_is_alive,
    keeper_pid,
    this_host,
)
from supervisor.process._keeper import KEEPER_PROGRAM
from supervisor.process._keeper_main import KEEPER_NAME, cgroup_members, start_time
from supervisor.process._markers import marker_dir
from tests.conftest import CHILDREN, PYTHON, tagged
from tests.support.pidfd import pidfds as pidfds
from tests.support.pidfd import wait_gone as wait_exited

# Dead hosts' leftovers, reaps and sweeps, and the keeper: alone on the machine (see conftest).
pytestmark = pytest.mark.serial

HOST = CHILDREN / "host.py"
ACP_CHILD = [PYTHON, "-I", str(CHILDREN / "acp_child.py")]
GONE_WITHIN = 30.0  # a bound for "eventually", never a claim about speed


def wait_gone(fds: dict[int, int], within: float = GONE_WITHIN) -> list[int]:
    """:func:`tests.support.pidfd.wait_gone` with this module's bound for "eventually"."""
    return wait_exited(fds, within)


@contextlib.contextmanager
def host(tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """A running host script and the facts it printed once its run had started."""
    proc = subprocess.Popen(
        [PYTHON, str(HOST), str(tmp_path / "pids"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    facts: dict[str, Any] = {}
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the host did not start its run"
        facts = json.loads(line)
        yield proc, facts
    finally:
        # The run ends with its host; what was re-parented to us (a subreaper) is reaped here.
        fds = pidfds([facts.get("child", 0), *facts.get("descendants", ()), facts.get("keeper") or 0])
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=GONE_WITHIN)
        wait_gone(fds)
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.mark.parametrize(
    ("subreaper", "mode"),
    [("subreaper-on", "process-tree"), ("subreaper-off", "process-tree"), ("subreaper-off", "cgroup")],
)
def test_sigkill_of_the_host_ends_every_process_of_its_run(tmp_path: Path, subreaper: str, mode: str) -> None:
    if mode == "cgroup" and detect_containment().cgroup_base is None:
        pytest.skip("no cgroup mode here")
    with host(tmp_path, subreaper, mode) as (proc, facts):
        run = [facts["child"], *facts["descendants"]]
        assert len(facts["descendants"]) == 2  # a grandchild in the child's group, a setsid daemon
        assert facts["keeper"] is not None
        fds = pidfds([*run, facts["keeper"]])
        assert set(fds) == {*run, facts["keeper"]}
        proc.kill()
        proc.wait(timeout=GONE_WITHIN)
        assert wait_gone(fds) == []  # the run's processes, and the keeper once its work was done
    assert tagged(facts["run_id"]) == []


def test_the_keeper_carries_no_tag_and_lives_in_its_own_session(tmp_path: Path) -> None:
    with host(tmp_path) as (_proc, facts):
        keeper = facts["keeper"]
        environ = Path(f"/proc/{keeper}/environ").read_bytes().split(b"\0")
        assert not [
            e for e in environ if e.startswith((b"SUBAGENT_SUPERVISOR_RUN=", HOST_TAG_VARIABLE.encode()))
        ]
        assert os.getsid(keeper) == keeper
        assert str(KEEPER_PROGRAM) in Path(f"/proc/{keeper}/cmdline").read_text()
        assert Path(f"/proc/{keeper}/comm").read_text() == f"{KEEPER_NAME}\n"
        child = Path(f"/proc/{facts['child']}/environ").read_bytes().split(b"\0")
        assert f"{HOST_TAG_VARIABLE}={facts['host']}".encode() in child


def test_a_host_that_disposes_and_exits_takes_its_keeper_along(tmp_path: Path) -> None:
    script = (
        "import anyio, json, sys\n"
        "from pathlib import Path\n"
        "from supervisor import AbortSignal, SubagentRequest\n"
        "from supervisor.process import keeper_pid, this_host\n"
        "from supervisor.providers import acp\n"
        "async def main():\n"
        "    run = acp.Provider(acp.example_agent_config()).create_run(\n"
        "        SubagentRequest(task='hi', parent_cwd=Path.cwd()))\n"
        "    async with anyio.create_task_group() as tg:\n"
        "        await run.start(tg, AbortSignal())\n"
        "        print(keeper_pid(), this_host().pid, this_host().start, flush=True)\n"
        "        await run.result()\n"
        "        await run.dispose()\n"
        "anyio.run(main, backend='asyncio')\n"
    )
    proc = subprocess.run([PYTHON, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    keeper, host_pid, host_start = proc.stdout.split()
    directory = marker_dir()
    assert directory is not None
    marker = directory / f"{host_pid}-{host_start}"
    assert wait_gone(pidfds([int(keeper)])) == []
    assert not marker.exists()  # a keeper that finished leaves no work for a sweep


def test_sighup_cancels_the_cli_locally_and_ends_the_tree(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    config = tmp_path / "subagents.toml"
    config.write_text(  # short graces: the grandchildren ignore EOF, so the ladder reaches SIGTERM
        f'[[provider]]\nkind = "acp"\ncommand = {json.dumps(PYTHON)}\n'
        f"args = [{', '.join(json.dumps(a) for a in ACP_CHILD[1:])}]\n"
        "dispose_eof_grace_ms = 200\ndispose_grace_ms = 2000\n",
        encoding="utf-8",
    )
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "supervisor.cli",
            "run",
            "--json",
            "--trace",
            "--config",
            str(config),
            "t",
        ],
        cwd=tmp_path,
        env={
            **os.environ,
            "ACP_CHILD_HANG": "prompt",
            "ACP_CHILD_GRANDCHILD": "1",
            "ACP_CHILD_DAEMON": "1",
            "ACP_CHILD_GRANDCHILD_PID_FILE": str(pid_file),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cli.stderr is not None
    for line in cli.stderr:  # wait, event-driven, for the run to be published
        if json.loads(line)["event"] == "session_created":
            break
    descendants = pidfds(int(p) for p in pid_file.read_text().split())
    assert len(descendants) == 2
    cli.send_signal(signal.SIGHUP)
    out, _ = cli.communicate(timeout=60)
    assert cli.returncode == 129
    doc = json.loads(out)
    assert (doc["stop_reason"], doc["quiescent"]) == ("aborted", True)
    assert wait_gone(descendants) == []
    assert tagged(doc["run_id"]) == []


# `subagents reap`, loaded and waiting for its cue: it starts the moment the test has made its
# leftovers.  Other supervisors on this machine sweep dead hosts' leftovers too (every host does
# at its first spawn), and one may still get there first: see `another_sweep_may_come_first`.
PRELOADED_REAP = (
    "import sys\n"
    "from supervisor.cli import main\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
    "sys.exit(main(['reap']))\n"
)


@contextlib.contextmanager
def reaper() -> Iterator[Callable[[], list[str]]]:
    """A ``subagents reap`` that runs when the yielded function is called; it returns the lines."""
    proc = subprocess.Popen(
        [PYTHON, "-c", PRELOADED_REAP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"

        def reap() -> list[str]:
            out, _ = proc.communicate("", timeout=120)
            assert proc.returncode == 0
            return out.splitlines()

        yield reap
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


REAP_LINE = re.compile(
    r"reaped (cgroup .+ \(\d+ process(es)?\)|process \d+ \(host \d+:\d+ is gone\)|worktree .+)"
)
REAP_ATTEMPTS = 3


class SweptByAnother(Exception):
    """Another supervisor's sweep ended this test's leftovers before the test's reap looked."""


def another_sweep_may_come_first(test: Callable[..., None]) -> Callable[..., None]:
    """Run a reap test again, in a fresh folder, when another supervisor swept its leftovers first.

    Every supervisor on the machine sweeps dead hosts' leftovers at its first spawn, and one may
    end a test's leftovers between the moment the test made them and its reap.  Each try
    asserts the outcome all the same (every leftover gone, the host's record settled, nothing
    else touched) and that each line of the reap is well formed and exact for what it names; a
    try whose reap did not name all of the test's leftovers raises :class:`SweptByAnother`
    after those checks, and is tried again.  A test whose reap never got there first in
    :data:`REAP_ATTEMPTS` tries is skipped, saying so (it proved the outcome, not the reap)."""

    @functools.wraps(test)
    def tries(tmp_path: Path, **kwargs: Any) -> None:
        swept: list[str] = []
        for attempt in range(REAP_ATTEMPTS):
            folder = tmp_path / f"try-{attempt}"
            folder.mkdir()
            try:
                return test(folder, **kwargs)
            except SweptByAnother as exc:
                swept.append(str(exc))
        pytest.skip(f"another supervisor swept the leftovers before the reap, {REAP_ATTEMPTS} times: {swept}")

    return tries


def reaped_by_this_reap(lines: list[str], expected: list[str], *, naming: list[str]) -> None:
    """Every line well formed; each line naming a leftover (it starts with one of ``naming``) is
    one of ``expected``; :class:`SweptByAnother` unless every ``expected`` line is there.

    Call it once the leftovers are proven gone."""
    assert all(REAP_LINE.fullmatch(line) for line in lines if line != "nothing to reap"), lines
    assert all(line in expected for line in lines if line.startswith(tuple(naming))), (lines, expected)
    if missing := [line for line in expected if line not in lines]:
        raise SweptByAnother(f"the reap did not say {missing}")


@contextlib.contextmanager
def abandoned_run(
    tmp_path: Path, mode: str = "process-tree", *options: str
) -> Iterator[tuple[dict[str, Any], dict[int, int]]]:
    """A run whose host and keeper were both SIGKILLed: its grandchild and daemon live on.

    Yields at once (the direct child may still be dying by its parent-death signal) the
    host's facts and pidfds of the two survivors.
    """
    if mode == "cgroup" and detect_containment().cgroup_base is None:
        pytest.skip("no cgroup mode here")
    with host(tmp_path, mode, *options) as (proc, facts):
        keeper = pidfds([facts["keeper"]])
        os.kill(facts["keeper"], signal.SIGKILL)
        assert wait_gone(keeper) == []
        child = pidfds([facts["child"]])
        left = pidfds(facts["descendants"])
        assert sorted(left) == sorted(facts["descendants"])
        proc.kill()
        proc.wait(timeout=GONE_WITHIN)
        pid, start = facts["host"].split(":")
        directory = marker_dir()
        assert directory is not None
        assert (directory / f"{pid}-{start}").exists()  # the keeper did not finish
        yield facts, left
        assert wait_gone(child) == []
        assert not (directory / f"{pid}-{start}").exists()


@pytest.mark.parametrize("mode", ["process-tree", "cgroup"])
@another_sweep_may_come_first
def test_reap_ends_what_a_host_and_its_keeper_left(tmp_path: Path, mode: str) -> None:
    with reaper() as reap, abandoned_run(tmp_path, mode) as (facts, left):
        lines = reap()
        assert wait_gone(left) == []
    # (and abandoned_run saw the direct child gone and the host's marker settled)
    if mode == "cgroup":  # the leaf holds both survivors; the whole host group goes at once
        group = CGROUP.cgroup_base / "subagents-{}-{}".format(*facts["host"].split(":"))  # type: ignore[operator]
        # (and the direct child, if its parent-death signal had not ended it yet)
        named = [line for line in lines if line.startswith(f"reaped cgroup {group} (")]
        expected = [
            line for line in (f"reaped cgroup {group} ({n} processes)" for n in (2, 3)) if line in named
        ]
        reaped_by_this_reap(
            lines, expected or [f"reaped cgroup {group} (2 processes)"], naming=[f"reaped cgroup {group} "]
        )
    else:
        expected = [f"reaped process {pid} (host {facts['host']} is gone)" for pid in facts["descendants"]]
        reaped_by_this_reap(
            lines, expected, naming=[f"reaped process {pid} " for pid in facts["descendants"]]
        )


def test_the_next_host_sweeps_what_a_host_and_its_keeper_left(tmp_path: Path) -> None:
    with abandoned_run(tmp_path) as (_facts, left):
        cli = subprocess.run(
            [sys.executable, "-m", "supervisor.cli", "run", "hi"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0
        assert wait_gone(left) == []


def test_reap_with_nothing_left_says_so(tmp_path: Path) -> None:
    reap = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "reap"], capture_output=True, text=True, timeout=120
    )
    assert reap.returncode == 0
    assert reap.stdout in ("nothing to reap\n",) or all(
        re.fullmatch(r"reaped (cgroup .+ \(\d+ process(es)?\)|process \d+ \(host \d+:\d+ is gone\))", line)
        for line in reap.stdout.splitlines()
    )


def test_host_identity_names_one_process(tmp_path: Path) -> None:
    me = this_host()
    assert me.pid == os.getpid()
    assert HostIdentity.parse(str(me)) == me
    assert host_is_alive(me)
    assert not host_is_alive(HostIdentity(me.pid, me.start + 1))  # same pid, another process
    assert HostIdentity.parse("12") is None
    assert HostIdentity.parse("a:1") is None
    exited = subprocess.Popen([PYTHON, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    start = start_time(exited.pid)
    assert start is not None
    assert host_is_alive(HostIdentity(exited.pid, start))
    exited.communicate(b"")
    assert not host_is_alive(HostIdentity(exited.pid, start))


def test_doctor_reports_each_fact_and_succeeds(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "doctor"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    prefixes = [
        "containment: ",
        "limit memory_max: ",
        "limit pids_max: ",
        "limit cpu_max: ",
        "limit timeout_ms, stall_timeout_ms: ",
        "confine: ",
        *(["root child: "] if os.geteuid() == 0 else []),
        "kernel: ",
        "python: ",
        "package: subagent-supervisor ",
        "subreaper: ",
        # one line per installed kind, in order (a third party's too)
        *(f"provider {name}: " for name in installed_kinds()),
        "example agent: ran (completed)",
    ]
    assert len(lines) == len(prefixes)
    for line, prefix in zip(lines, prefixes, strict=True):
        assert line.startswith(prefix), line
    at = lines.index(next(line for line in lines if line.startswith("kernel: ")))
    assert lines[at + 4].startswith("provider acp: found")
    assert lines[at + 5].startswith("provider dsh-sdk: found")
    assert os.uname().release in lines[at]
    assert re.fullmatch(
        r"containment: (cgroup \(run leaves under .+\)|process-tree \(cgroup unavailable: .+\))", lines[0]
    )
    support = detect_containment()
    assert lines[0].startswith(
        "containment: cgroup" if support.cgroup_base is not None else "containment: process-tree"
    )


# -- cgroup mode: the keeper and the sweep on real cgroup leaves -------------------------------

CGROUP = detect_containment()
needs_cgroup = pytest.mark.skipif(CGROUP.cgroup_base is None, reason=f"no cgroup mode here: {CGROUP.reason}")


@contextlib.contextmanager
def stand_in_host() -> Iterator[tuple[subprocess.Popen[bytes], HostIdentity]]:
    """A live process whose identity names a host group: no sweep takes that group for a dead host's
    until the test ends the stand-in."""
    proc = subprocess.Popen([PYTHON, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    start = start_time(proc.pid)
    assert start is not None
    try:
        yield proc, HostIdentity(proc.pid, start)
    finally:
        proc.communicate(b"")


def tree_in_leaf(leaf: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A ``sh`` that entered ``leaf`` before starting a ``setsid`` sleeper and a plain one."""
    proc = subprocess.Popen(
        [
            "sh",
            "-c",
            'echo $$ > "$1/cgroup.procs" || exit 1; setsid sleep 600 & sleep 600 & echo ready; wait',
            "sh",
            str(leaf),
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    members = [int(p) for p in (leaf / "cgroup.procs").read_text().split()]
    return proc, members


@needs_cgroup
def test_the_keeper_kills_a_cgroup_leaf_when_its_host_pipe_breaks(tmp_path: Path) -> None:
    assert CGROUP.cgroup_base is not None
    with stand_in_host() as (_stand_in, identity):
        keeper_ends_the_leaf(CGROUP.cgroup_base / f"subagents-{identity.pid}-{identity.start}", identity)


def keeper_ends_the_leaf(group: Path, identity: HostIdentity) -> None:
    leaf = group / "run-test"
    leaf.mkdir(parents=True)
    try:
        sh, members = tree_in_leaf(leaf)
        assert len(members) >= 3
        fds = pidfds(members)
        read_fd, write_fd = os.pipe()
        keeper = subprocess.Popen(
            [PYTHON, "-I", "-S", str(KEEPER_PROGRAM), HOST_TAG_VARIABLE, str(identity)],
            stdin=read_fd,
            start_new_session=True,
        )
        os.close(read_fd)
        os.write(write_fd, f"+run test {sh.pid} {start_time(sh.pid)} {leaf}\n".encode())
        os.close(write_fd)  # the host "dies"
        assert keeper.wait(timeout=GONE_WITHIN) == 0
        sh.wait(timeout=GONE_WITHIN)
        assert sh.stdout is not None
        sh.stdout.close()
        assert wait_gone(fds) == []
        assert not group.exists()
    finally:
        for path in (leaf, group):
            with contextlib.suppress(OSError):
                path.rmdir()


@needs_cgroup
def test_the_keeper_removes_its_hosts_group_with_no_run_in_flight(tmp_path: Path) -> None:
    """A host killed between runs (every run withdrawn) still leaves no group behind."""
    assert CGROUP.cgroup_base is not None
    with stand_in_host() as (stand_in, identity):
        group = CGROUP.cgroup_base / f"subagents-{identity.pid}-{identity.start}"
        leaf = group / "run-done"
        leaf.mkdir(parents=True)
        try:
            read_fd, write_fd = os.pipe()
            keeper = subprocess.Popen(
                [PYTHON, "-I", "-S", str(KEEPER_PROGRAM), HOST_TAG_VARIABLE, str(identity)],
                stdin=read_fd,
                start_new_session=True,
            )
            os.close(read_fd)
            start = start_time(stand_in.pid)
            os.write(write_fd, f"+run done {stand_in.pid} {start} {leaf}\n".encode())
            leaf.rmdir()  # the run's teardown proved its tree gone and removed its leaf
            os.write(write_fd, f"-run done {stand_in.pid}\n".encode())
            os.close(write_fd)  # the host dies between runs
            assert keeper.wait(timeout=GONE_WITHIN) == 0
            assert stand_in.poll() is None  # nothing to end: the run was withdrawn
            assert not group.exists()
        finally:
            for path in (leaf, group):
                with contextlib.suppress(OSError):
                    path.rmdir()


@needs_cgroup
@another_sweep_may_come_first
def test_reap_ends_a_stale_cgroup_of_a_dead_host(tmp_path: Path) -> None:
    assert CGROUP.cgroup_base is not None
    with reaper() as reap:
        with stand_in_host() as (_stand_in, identity):
            group = CGROUP.cgroup_base / f"subagents-{identity.pid}-{identity.start}"
            leaf = group / "run-stale"
            leaf.mkdir(parents=True)
            sh, members = tree_in_leaf(leaf)
        try:
            fds = pidfds(members)
            assert not host_is_alive(identity)
            lines = reap()
            sh.wait(timeout=GONE_WITHIN)
            assert sh.stdout is not None
            sh.stdout.close()
            assert wait_gone(fds) == []
            assert not group.exists()
        finally:
            for path in (leaf, group):
                with contextlib.suppress(OSError):
                    path.rmdir()
    expected = f"reaped cgroup {group} ({len(members)} processes)"
    reaped_by_this_reap(lines, [expected], naming=[f"reaped cgroup {group} "])


@needs_cgroup
@another_sweep_may_come_first
def test_reap_kills_a_dead_hosts_group_whose_members_are_in_another_pid_namespace(tmp_path: Path) -> None:
    """The run's grandchild is ``unshare --pid --fork sh`` (PID 1 of a namespace of its own, with a
    ``sleep``): after the host and its keeper die, ``subagents reap`` kills the host's group whole."""
    assert CGROUP.cgroup_base is not None
    with reaper() as reap, host(tmp_path, "cgroup", "pid-namespace") as (proc, facts):
        group = CGROUP.cgroup_base / "subagents-{}-{}".format(*facts["host"].split(":"))
        os.kill(facts["keeper"], signal.SIGKILL)
        assert wait_gone(pidfds([facts["keeper"]])) == []
        members = cgroup_members(group)
        ours = os.readlink("/proc/self/ns/pid")
        inner = [pid for pid in members if os.readlink(f"/proc/{pid}/ns/pid") != ours]
        assert len(inner) == 2  # the namespace's shell and its sleep
        fds = pidfds(members)
        proc.kill()
        proc.wait(timeout=GONE_WITHIN)
        lines = reap()
        assert wait_gone(fds) == []
        assert not group.exists()
    named = [line for line in lines if line.startswith(f"reaped cgroup {group} (")]
    reaped_by_this_reap(lines, named or [f"reaped cgroup {group} (...)"], naming=[f"reaped cgroup {group} "])


@another_sweep_may_come_first
def test_reap_ends_exactly_the_tagged_processes_of_a_dead_host(tmp_path: Path) -> None:
    """Two tagged processes share a process group with one that is not tagged: ``subagents reap``
    ends the two (one line each) and leaves the third alone."""
    script = f'sleep 600 & env -u {HOST_TAG_VARIABLE} sleep 600 & echo "$!"; wait'
    with reaper() as reap:
        with stand_in_host() as (_stand_in, identity):
            group = subprocess.Popen(
                ["sh", "-c", script],
                env={**os.environ, HOST_TAG_VARIABLE: str(identity)},
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            assert group.stdout is not None
            untagged = int(group.stdout.readline())
            children = Path(f"/proc/{group.pid}/task/{group.pid}/children").read_text().split()
        try:
            tagged_sleep = next(int(pid) for pid in children if int(pid) != untagged)
            assert os.getpgid(untagged) == os.getpgid(tagged_sleep) == group.pid
            assert not host_is_alive(identity)
            fds = pidfds([group.pid, tagged_sleep])
            lines = reap()
            assert not [line for line in lines if f" {untagged} " in line]
            assert wait_gone(fds) == []  # (and reaped: the shell was our child)
            assert host_is_alive(HostIdentity(untagged, start_time(untagged) or 0))  # never signalled
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(untagged, signal.SIGKILL)
            wait_gone(pidfds([untagged]))
            group.wait(timeout=GONE_WITHIN)
            assert group.stdout is not None
            group.stdout.close()
    ours = (group.pid, tagged_sleep)
    expected = [f"reaped process {pid} (host {identity} is gone)" for pid in ours]
    reaped_by_this_reap(lines, expected, naming=[f"reaped process {pid} " for pid in ours])


# -- the keeper of this very process --------------------------------------------------------


@pytest.mark.anyio
async def test_a_killed_keeper_is_replaced_at_the_next_run(tmp_path: Path, containment: Containment) -> None:
    from tests.test_process import ready_pids, spec_for, tear_down

    async with anyio.create_task_group() as tg:
        first = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), tg)
        await ready_pids(first)
        old = keeper_pid()
        assert old is not None
        os.kill(old, signal.SIGKILL)
        assert wait_gone(pidfds([old])) == []
        second = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), tg)
        await ready_pids(second)
        new = keeper_pid()
        assert new is not None
        assert new != old
        for proc in (first, second):
            report, _ = await tear_down(proc)
            assert report.quiescent
        assert keeper_pid() == new  # withdrawing runs does not end the keeper
        tg.cancel_scope.cancel()
