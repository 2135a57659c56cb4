"""A teardown signals only its own run, even once a number it knew names a stranger.

A run's direct child leads a process group (pid = group id).  Once it has exited and been
reaped, with nothing left in that group, the kernel may give the same number to the next
process it creates: on a busy machine with ``pid_max`` 32768 that is a matter of seconds.
A teardown that then sends ``killpg(<old pid>)`` (or a ``kill`` through a stale handle)
ends a stranger: on the machine where this was found, a *fresh* child of another run,
in its ``initialize``, which then failed as ``process-exit`` with ``SIGTERM``.

The test makes the kernel hand the child's pid to a stranger on purpose
(``/proc/sys/kernel/ns_last_pid``, root only), then tears the run down through the
SIGTERM rung.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskGroup

from machines import AuditTrail, TeardownLadder
from supervisor.process import Containment, ManagedProcess
from supervisor.process._escapes import (
    cgroup_namespace,
    escape_possible,
    namespace_prefix,
    own_cgroup_namespace,
)
from tests.test_process import spec_for

pytestmark = pytest.mark.anyio

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
ATTEMPTS = 300
NAMESPACES = 200


# A helper in our own session (so never one of a run's possible orphans) makes the
# stranger: a sleeper leading a session of its own, born with the pid asked for.  It
# prints the stranger's pid (or 0), waits for stdin EOF, then ends it.
HELPER = """
import os, signal, sys, time
want = int(sys.argv[1])
got = 0
for _ in range(int(sys.argv[2])):
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(want - 1))
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.execvp("sleep", ["sleep", "300"])
    if pid == want:
        got = pid
        break
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
# Past the setsid and the exec (observed, not waited out): the stranger leads its own
# session and runs sleep, so a signal to its group or to it is a signal to the stranger.
deadline = time.monotonic() + 60
while got and time.monotonic() < deadline:
    try:
        with open(f"/proc/{got}/comm") as comm:
            if os.getsid(got) == got and comm.read().strip() == "sleep":
                break
    except OSError:
        break
    time.sleep(0.01)
print(got, flush=True)
sys.stdin.read()
if got:
    os.kill(got, signal.SIGKILL)
    status = os.waitpid(got, 0)[1]
    print("killed-by-us" if os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9 else f"ended:{status}", flush=True)
"""


def take_pid(pid: int) -> tuple[subprocess.Popen[str], bool]:
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER, str(pid), str(ATTEMPTS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert helper.stdout is not None
    return helper, int(helper.stdout.readline()) == pid


def release(helper: subprocess.Popen[str]) -> str:
    """End the stranger; how it had ended: ``killed-by-us`` if it lived until now."""
    out, _ = helper.communicate("")
    return out.strip()


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(NS_LAST_PID, os.W_OK), reason="needs root")
async def test_teardown_spares_a_stranger_with_the_childs_pid(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for("setsid-grandchild", cwd=tmp_path, containment=containment), task_group
    )
    line = await proc.stdout.readline()
    assert line.split()[:1] == [b"ready"], line
    proc.close_stdin()  # the child exits; its grandchild (a session of its own) stays
    assert await proc.wait_exit() is not None
    helper, taken = take_pid(proc.pid)
    try:
        if not taken:
            pytest.skip("the machine kept taking the pid first")
        ladder = TeardownLadder(listeners=[AuditTrail("test")])
        report = await proc.teardown(ladder, eof_grace=5.0, term_grace=5.0, kill_wait=5.0)
    finally:
        fate = release(helper)
    assert fate == "killed-by-us", f"the stranger with the child's pid was ended by the teardown: {fate}"
    assert report.quiescent
    assert report.rung == "term-wait"  # the grandchild needed the SIGTERM rung


@pytest.mark.skipif(os.geteuid() != 0, reason="a cgroup namespace per run needs root")
async def test_teardown_spares_a_stranger_in_a_namespace_with_the_runs_old_number(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    """The kernel numbers cgroup namespaces with the lowest free inode: once a run's
    namespace is gone with its last process, the next namespace made (another run's fresh
    child's) gets the same number.  A teardown still looking for the run's escapees by that
    number took the stranger for one and ended it."""
    if containment.mode != "cgroup" or not namespace_prefix() or not escape_possible():
        pytest.skip("the escapee watch runs in cgroup mode with a namespace per run, without nsdelegate")
    proc = await ManagedProcess.spawn(spec_for("eof", cwd=tmp_path, containment=containment), task_group)
    line = await proc.stdout.readline()
    assert line.split()[:1] == [b"ready"], line
    number = cgroup_namespace(proc.pid)
    assert number is not None
    assert number != own_cgroup_namespace()
    proc.close_stdin()  # the child exits: nothing of the run is left, its namespace may go
    assert await proc.wait_exit() is not None
    # New namespaces, each kept, until one has the run's old number (lower free numbers go
    # first): the run, while it is not released, must keep its number to itself.
    strangers: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(NAMESPACES):
            stranger = subprocess.Popen(
                [*namespace_prefix(), "sh", "-c", "echo up; exec sleep 300"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
            )
            strangers.append(stranger)
            assert stranger.stdout is not None
            assert await anyio.to_thread.run_sync(stranger.stdout.readline) == b"up\n"  # past the unshare
            if cgroup_namespace(stranger.pid) == number:
                break
        ladder = TeardownLadder(listeners=[AuditTrail("test")])
        report = await proc.teardown(ladder, eof_grace=5.0, term_grace=5.0, kill_wait=5.0)
        ended = [s.returncode for s in strangers if s.poll() is not None]
        assert not ended, f"strangers were ended by the teardown: {ended}"
        assert report.quiescent
        assert report.rung == "eof-wait"
    finally:
        for stranger in strangers:
            stranger.kill()
            stranger.communicate()
