"""The keeper program, and the stdlib-only primitives that end what a host leaves behind.

The keeper is one small process per supervising host (see ``_keeper``).  It reads
commands from a pipe whose write end only the host holds::

    +run <run id> <pgid> <start time of the pgid leader> [<cgroup leaf path>[\t<more leaves>...]]
    -run <run id> <pgid>
    +group <path of one of the host's own groups>

When the pipe reaches end of file the host is gone (or finished).  Every run still
registered is then ended: ``cgroup.kill`` on its leaf, SIGKILL to its process group
(unless that id now names a younger process), and SIGKILL to every process on the
machine whose environment carries the host's identity, repeated until none is found
(a chain that keeps forking is caught on a later pass).  Then the host's cgroup
groups (the parents of every leaf it announced, and every group it announced itself: a host
ceiling's, made before any run) are removed if empty, whether or not
a run was still registered, and the keeper exits.

This file runs as ``python -I -S <this file> <variable> <identity> [<marker>]``, and
removes the host's marker file (see ``_markers``) when it exits.  It imports nothing
outside the standard library, so it starts in a few milliseconds and never loads the
supervisor.  The sweep and ``subagents reap`` import the same primitives from here.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

# The keeper's process name (``comm``): still readable once it is a zombie.
KEEPER_NAME = "subagents-keep"
# How long one "end everything" pass may keep finding and killing tagged processes.
END_DEADLINE_SECONDS = 10.0
# How long to wait for a killed cgroup to report ``populated 0``.
CGROUP_EMPTY_SECONDS = 2.0


# -- processes -----------------------------------------------------------------------------


def read_bytes(path: str) -> bytes:
    """The whole content of a (``/proc``) file, read with the system calls alone.

    Python's ``open`` builds a file and a buffer object and asks the file's status and
    position first: about three times the cost of the read itself for a small ``/proc``
    file, and a run reads several.  Raises ``OSError`` as ``open`` would."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks since boot), or None if there is no such pid.

    With the pid it names one process for the machine's uptime: a reused pid has a
    later start time.
    """
    try:
        data = read_bytes(f"/proc/{pid}/stat")
    except OSError:
        return None
    return start_ticks(data)


def start_ticks(stat: bytes) -> int | None:
    """Field 22 of a ``/proc/<pid>/stat`` file's content, or None if it has none."""
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def environ_value(pid: int, variable: bytes) -> bytes | None:
    """The value of ``variable`` in a live process's environment, None when absent or unreadable."""
    try:
        data = read_bytes(f"/proc/{pid}/environ")
    except OSError:
        return None
    prefix = variable + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :]
    return None


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def in_our_pid_namespace(pid: int) -> bool:
    """Whether ``pid`` lives in this process's pid namespace.

    A host identity holds a pid as its own namespace numbers it: a process seen
    from another namespace (a container's, from the machine's) carries a host pid
    that means something else here, so it is never judged from here.
    """
    ours = pid_namespace("self")
    return ours is not None and pid_namespace(pid) == ours


def tagged_processes(variable: str) -> dict[int, str]:
    """Every process we can see whose environment carries ``variable``, with its value.

    Processes in pid namespaces below ours are seen too (with our numbers for them);
    whose host a value names is for the caller to judge (see ``_sweep``).
    """
    name = variable.encode()
    me = os.getpid()
    found: dict[int, str] = {}
    for pid in all_pids():
        if pid == me:
            continue
        value = environ_value(pid, name)
        if value is not None:
            found[pid] = value.decode("utf-8", "replace")
    return found


def kill_group(pgid: int, leader_start: int | None) -> bool:
    """SIGKILL the process group ``pgid`` unless the id is now a younger process's.

    A group id cannot be reused while the group has members; once the leader is gone
    the id is safe to signal.  If a process with that pid lives and started later
    than the recorded leader, the id was reused: leave it alone.
    """
    if pgid <= 1 or pgid == os.getpgrp():
        return False
    if leader_start is not None:
        now = start_time(pgid)
        if now is not None and now != leader_start:
            return False
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        return False
    return True


def kill_tagged(pid: int, variable: str, value: str) -> bool:
    """SIGKILL ``pid`` if it still carries ``variable=value``: that process alone.

    A pidfd opened before the check pins the process, so a pid reused in between is
    never hit; its process group is left alone (a group-mate without the tag may be
    anybody's).
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False  # gone already (or no descriptor left: a later pass tries again)
    try:
        if environ_value(pid, variable.encode()) != value.encode():
            return False
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def end_tagged(
    variable: str, values: Iterable[str], *, deadline: float = END_DEADLINE_SECONDS
) -> dict[int, str]:
    """SIGKILL every process tagged with one of ``values`` until a full pass finds none.

    Exactly the tagged processes: nothing else in their process groups.  A killed
    process is a zombie until its parent reaps it; a zombie's environment reads empty,
    so it is not found again.  Returns the pids killed, with their tag.
    """
    wanted = set(values)
    killed: dict[int, str] = {}
    end = time.monotonic() + deadline
    while True:
        found = {pid: value for pid, value in tagged_processes(variable).items() if value in wanted}
        if not found or time.monotonic() > end:
            return killed
        for pid, value in found.items():
            if kill_tagged(pid, variable, value):
                killed[pid] = value


# -- cgroups (v2) ------------------------------------------------------------------------


def cgroup_members(path: Path) -> list[int]:
    """Every pid in the cgroup and its descendants (``cgroup.procs`` of each)."""
    members: list[int] = []
    for directory, _dirs, _files in os.walk(path):
        with contextlib.suppress(OSError):
            members.extend(int(line) for line in (Path(directory) / "cgroup.procs").read_text().split())
    return members


def cgroup_kill(path: Path) -> None:
    """Kill every process in the cgroup's subtree: ``cgroup.kill``, else each member until empty."""
    try:
        (path / "cgroup.kill").write_text("1")
        return
    except OSError:
        pass
    end = time.monotonic() + END_DEADLINE_SECONDS
    while (members := cgroup_members(path)) and time.monotonic() < end:
        for pid in members:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def cgroup_populated(path: Path) -> bool | None:
    try:
        text = (path / "cgroup.events").read_text()
    except OSError:
        return None
    return "populated 1" in text


def wait_cgroup_empty(path: Path, within: float = CGROUP_EMPTY_SECONDS) -> bool:
    """Wait, woken by ``cgroup.events`` changes (POLLPRI), until the cgroup is not populated."""
    end = time.monotonic() + within
    try:
        fd = os.open(path / "cgroup.events", os.O_RDONLY)
    except OSError:
        # A cgroup v1 group has no cgroup.events: its members were killed (cgroup_kill);
        # give the last of them a bounded moment to finish exiting.
        while cgroup_members(path) and time.monotonic() < end:
            time.sleep(0.01)
        return not cgroup_members(path)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLPRI)
        while True:
            os.lseek(fd, 0, os.SEEK_SET)
            if b"populated 0" in os.read(fd, 4096):
                return True
            left = end - time.monotonic()
            if left <= 0:
                return False
            poller.poll(int(left * 1000) + 1)
    except OSError:
        return cgroup_populated(path) is not True
    finally:
        os.close(fd)


def remove_cgroup(path: Path) -> bool:
    """rmdir the cgroup and its descendants, deepest first; whether it is gone."""
    for directory, _dirs, _files in os.walk(path, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(directory)
    return not path.exists()


# -- the keeper ----------------------------------------------------------------------------


class _Run:
    __slots__ = ("leader_start", "leaves", "pgid")

    def __init__(self, pgid: int, leader_start: int | None, leaves: list[Path]) -> None:
        self.pgid = pgid
        self.leader_start = leader_start
        self.leaves = leaves  # the v2 leaf first, then the run's cgroup v1 leaves


def _apply(line: str, runs: dict[str, _Run], seen: set[Path]) -> None:
    """One command; ``seen`` collects every leaf ever announced (their parents are the host's groups)."""
    parts = line.rstrip("\n").split(" ", 4)
    try:
        if parts[0] == "+run" and len(parts) >= 4:
            leader_start = int(parts[3]) or None
            leaves = [Path(p) for p in parts[4].split("\t") if p] if len(parts) == 5 else []
            runs[f"{parts[1]} {parts[2]}"] = _Run(int(parts[2]), leader_start, leaves)
            seen.update(leaves)
        elif parts[0] == "-run" and len(parts) == 3:
            runs.pop(f"{parts[1]} {parts[2]}", None)
        elif parts[0] == "+group" and len(parts) >= 2:
            # its own groups are named like the parent of a leaf: one placeholder leaf stands for it
            seen.add(Path(line.rstrip("\n").partition(" ")[2]) / "-")
    except ValueError:
        pass


def end_runs(runs: Iterable[_Run], variable: str, identity: str) -> None:
    """End every listed run of the host ``identity``, then remove their cgroup leaves."""
    listed = list(runs)
    leaves = [leaf for run in listed for leaf in run.leaves]
    for leaf in leaves:
        cgroup_kill(leaf)
    for run in listed:
        kill_group(run.pgid, run.leader_start)
    end_tagged(variable, [identity])
    for leaf in leaves:
        wait_cgroup_empty(leaf)
        remove_cgroup(leaf)


def remove_host_groups(leaves: Iterable[Path], identity: str) -> None:
    """Remove the host's own groups: the parents of every leaf it ever announced that are
    named for it (``subagents-<pid>-<start>``; its v2 group and its groups in the cgroup v1
    hierarchies of limited runs), with whatever empty cgroups are left in them.

    Also when no run was in flight at the end: a host killed between runs (SIGKILL, or a
    SIGTERM before its cleanup) leaves an empty group that nobody else removes until a sweep.
    Only empty cgroups go (``rmdir`` refuses the others).
    """
    host_pid, _, host_start = identity.partition(":")
    name = f"subagents-{host_pid}-{host_start}"
    for group in {leaf.parent for leaf in leaves if leaf.parent.name == name}:
        remove_cgroup(group)


def worktrees_dir() -> Path:
    """Where runs' worktrees live (``workspace = "worktree"``), each with a ``<name>.json``
    marker naming its host while a run uses it."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "subagent-supervisor" / "worktrees"


WORKTREE_LOCK_FILE = "subagent-worktrees.lock"
"""In a repository's git common directory: the file whose ``flock`` every supervisor process
holds around its worktree commands on that repository (``supervisor.workspace._admin_lock``)."""
WORKTREE_LOCK_PATIENCE = 30.0
"""Seconds the removal of a dead host's worktree waits for that lock before going on without it."""


@contextlib.contextmanager
def worktree_lock(common_dir: str | None) -> Iterator[None]:
    """Hold a repository's worktree lock (blocking this thread, :data:`WORKTREE_LOCK_PATIENCE`
    seconds at most); without a usable lock file, go on without it."""
    import fcntl  # here, not at the top: the keeper starts without it

    fd = None
    if common_dir is not None:
        with contextlib.suppress(OSError):
            path = os.path.join(common_dir, WORKTREE_LOCK_FILE)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    try:
        give_up, pause = time.monotonic() + WORKTREE_LOCK_PATIENCE, 0.005
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= give_up:
                    break
                time.sleep(pause)
                pause = min(pause * 2, 0.1)
            except OSError:
                break
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _git(repository: str, *args: str) -> None:
    import subprocess  # here, not at the top: the keeper starts without it

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            ["git", "-c", "core.hooksPath=/dev/null", "-C", repository, *args],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=60, check=False,
        )  # fmt: skip


def remove_worktrees(ended: Callable[[str], bool]) -> list[tuple[Path, str]]:
    """Remove every run worktree whose marker names a host ``ended`` says is gone (the worktree,
    its administrative files, then ``git worktree prune``); (path, host) of each removed."""
    import json
    import shutil

    removed: list[tuple[Path, str]] = []
    with contextlib.suppress(OSError):
        for marker in sorted(worktrees_dir().glob("*.json")):
            try:
                data = json.loads(marker.read_text())
                host = str(data["host"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if not ended(host):
                continue
            path = marker.with_name(marker.name[: -len(".json")])
            repository = data.get("repository")
            common_dir = data.get("common_dir")
            with worktree_lock(common_dir if isinstance(common_dir, str) else None):
                if isinstance(repository, str):
                    _git(repository, "worktree", "remove", "--force", "--force", str(path))
                shutil.rmtree(path, ignore_errors=True)
                if isinstance(repository, str):
                    _git(repository, "worktree", "prune")
            if not path.exists():
                with contextlib.suppress(OSError):
                    marker.unlink()
                removed.append((path, host))
    return removed


def main(argv: list[str]) -> int:
    variable, identity = argv[1], argv[2]
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(KEEPER_NAME)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTSTP):
        signal.signal(sig, signal.SIG_IGN)
    marker = Path(argv[3]) if len(argv) > 3 else None
    runs: dict[str, _Run] = {}
    leaves: set[Path] = set()
    try:
        for raw in sys.stdin.buffer:
            _apply(raw.decode("utf-8", "replace"), runs, leaves)
        if runs:
            end_runs(runs.values(), variable, identity)
        remove_host_groups(leaves, identity)
        if runs:  # the worktrees of runs that never finished (their results were never delivered)
            remove_worktrees(lambda host: host == identity)
    finally:
        if marker is not None:  # this host's runs are ended: nothing for a sweep to do
            with contextlib.suppress(OSError):
                marker.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
