"""cgroup v2 containment: one leaf per run, under one group per host process.

Layout, under a cgroup the supervisor can write (its own cgroup v2 path on the unified
mount, or a configured ``cgroup_root``)::

    subagents-<host pid>-<host start time>/    one per supervising process
        run-<run id>/                          one leaf per run

The host group's name carries the host's identity, so a sweep can tell the groups of
dead hosts from live ones (:func:`parse_host_group`).

The child enters its leaf before the agent program runs: the spawned argv is a tiny
shell shim that writes its own pid into ``cgroup.procs`` and then ``exec``s the real
argv, so there is no moment in which the program could fork outside the leaf.  From
then on the kernel keeps every descendant in the leaf, whatever it does (``setsid``,
double fork, cleared environment, non-dumpable).

Limits (``_limits`` and its neighbours): on a hybrid host the run also has a leaf in each cgroup v1
hierarchy its limits and accounting need; the same shim writes the child into those
too, before ``exec``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from signal import Signals

import anyio

from supervisor.process._cgroup_mounts import own_cgroup_directory, unified_mount
from supervisor.process._childpin import ChildPin
from supervisor.process._confine import is_root, view_steps
from supervisor.process._escapes import (
    CENSUS,
    adopted,
    descendants_suffice,
    escape_possible,
    main_thread_children,
    namespace_prefix,
    own_cgroup_namespace,
    pin_cgroup_namespace,
    run_descendants,
)
from supervisor.process._host_groups import HOST_GROUPS
from supervisor.process._inotify import watch_file
from supervisor.process._keeper import keeper_pid
from supervisor.process._keeper_main import start_time as process_start_time
from supervisor.process._limit_files import read_text, remove_group, subtree
from supervisor.process._limit_support import Hierarchy, LimitSupport, limit_support
from supervisor.process._limit_values import NO_LIMITS, KernelHit, Limits, Usage
from supervisor.process._limits import RunCgroups
from supervisor.process._pinned import signal_if
from supervisor.process._proctable import TABLE
from supervisor.process._tree import (
    ASYNCIO_CHILDREN,
    PIDFD_BATCH,
    in_slices,
    subreaper_enabled,
    subreaper_epoch,
    thread_group_gone,
    wait_gone,
)

log = logging.getLogger("supervisor")

HOST_GROUP_PREFIX = "subagents-"
RUN_LEAF_PREFIX = "run-"
AGENT_GROUP = "agent"
"""A root child's group, below each of its run's leaves: the limits are on the leaf, above
the root of everything the child sees."""
_HOST_GROUP = re.compile(r"^subagents-(\d+)-(\d+)$")
_SAFE_TAG = re.compile(r"[^A-Za-z0-9_.-]")

# The entry shim, the one place a child enters its groups: the shell writes its own pid
# (which ``exec`` keeps) into each group's cgroup.procs, then becomes the program.
# ``$0`` is how many groups follow, then their cgroup.procs files, then the real argv.
# A write the kernel refuses ends the shim (status 125) before the program runs.
SHIM = (
    "/bin/sh",
    "-c",
    'n=$0; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"',
)


def entry_command(procs_files: Sequence[Path], argv: Sequence[str]) -> list[str]:
    """The argv that enters ``procs_files`` (v2 leaf first), then runs ``argv``."""
    return [*SHIM, str(len(procs_files)), *(str(path) for path in procs_files), *argv]


def host_group_name(pid: int | None = None, start_time: int | None = None) -> str:
    """``subagents-<pid>-<start time>`` for the given host (default: this process)."""
    if pid is None:
        pid = os.getpid()
    if start_time is None:
        start_time = process_start_time(pid) or 0
    return f"{HOST_GROUP_PREFIX}{pid}-{start_time}"


def parse_host_group(name: str) -> tuple[int, int] | None:
    """``(pid, start time)`` of a host group's name, or None if it is not one."""
    match = _HOST_GROUP.match(name)
    return None if match is None else (int(match[1]), int(match[2]))


def run_leaf_name(run_tag: str) -> str:
    return RUN_LEAF_PREFIX + _SAFE_TAG.sub("_", run_tag)


@dataclass(frozen=True, slots=True)
class CgroupBase:
    """Where run leaves may be created, or why they may not (``path`` None)."""

    path: Path | None
    reason: str


def find_cgroup_base(root: Path | None = None) -> CgroupBase:
    """The writable cgroup v2 directory to put host groups in, or why there is none."""
    if root is None:
        mount = unified_mount()
        if mount is None:
            return CgroupBase(None, "no cgroup v2 hierarchy is mounted")
        own = own_cgroup_directory(mount)
        if own is None:
            return CgroupBase(None, "this process's cgroup v2 directory cannot be found")
        base = own
    else:
        base = root
    if not (base / "cgroup.procs").is_file():
        return CgroupBase(None, f"{base} is not a cgroup v2 directory")
    if not os.access(base, os.W_OK | os.X_OK) or not os.access(base / "cgroup.procs", os.W_OK):
        return CgroupBase(None, f"{base} is not writable by this user")
    return CgroupBase(base, f"cgroup v2 leaves under {base}")


class CgroupContainment:
    """Every run in its own cgroup v2 leaf under this host's group."""

    mode = "cgroup"

    def __init__(self, base: Path) -> None:
        self.base = base
        self._host_group: Path | None = None

    @property
    def support(self) -> LimitSupport:
        """Which hierarchy carries each limit's controller for runs under this base."""
        return limit_support(self.base)

    @property
    def host_group(self) -> Path:
        """This host's group (created on first use, removed at exit when empty; it carries
        the host ceiling, and enables the controllers placed in cgroup v2 for the leaves)."""
        if self._host_group is None:
            v2 = frozenset(c for c, h in self.support.where.items() if h.version == 2)
            hierarchy = Hierarchy(2, self.base, v2)
            self._host_group = HOST_GROUPS.group(hierarchy, host_group_name(), v2_controllers=sorted(v2))
        return self._host_group

    def enclose(self, run_tag: str, limits: Limits = NO_LIMITS) -> CgroupEnclosure:
        """A new leaf for the run (called off the event loop: mkdir, the limit files, and the
        one-time trial of ``unshare --cgroup``)."""
        leaf = self.host_group / run_leaf_name(run_tag)
        leaf.mkdir()
        try:
            cgroups = RunCgroups.create(leaf, self.support, limits, arm_later=is_root())
        except BaseException:
            _remove_quietly(leaf)
            raise
        enclosure = CgroupEnclosure(
            leaf, cgroups, run_tag, namespace=namespace_prefix(), watch_escapes=escape_possible()
        )
        if is_root():  # a root child's limits go where it cannot write them: on a group above its own
            try:
                for group in enclosure.leaves:
                    (group / AGENT_GROUP).mkdir()
            except BaseException:
                enclosure.release()
                raise
            enclosure.below = AGENT_GROUP
            try:  # what it reads as its limits; the leaf's hold whatever becomes of these
                cgroups.mirror(AGENT_GROUP)
            except OSError as exc:
                log.warning("run %s: its own group shows no limits: %r", run_tag, exc)
            try:  # the v1 out-of-memory watch, once, on the group below (if the mirror has not)
                cgroups.arm()
            except BaseException:
                enclosure.release()
                raise
        return enclosure


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: not a zombie, or a zombie leader whose other threads still do."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X") or not thread_group_gone(pid)


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


class CgroupEnclosure:
    """One run's leaf: membership, signals, and "gone" as the kernel sees them.

    Where the kernel would let a member leave the leaf (see ``_escapes``), a run is gone
    only once no process that left it is alive either: an escaped process is found by the
    run's cgroup namespace or its run tag, signalled with every rung, and waited for.
    """

    mode = "cgroup"

    def __init__(
        self,
        leaf: Path,
        cgroups: RunCgroups,
        run_tag: str = "",
        *,
        namespace: Sequence[str] = (),
        watch_escapes: bool = False,
    ) -> None:
        self.leaf = leaf
        self.cgroups = cgroups
        self.run_tag = run_tag
        self._namespace_prefix = tuple(namespace)
        self._watch = watch_escapes and bool(run_tag)
        self._namespace: str | None = None  # the run's own cgroup namespace, once seen
        self._namespace_fd: int | None = None  # ... held open, so its number stays the run's
        self._escaped: dict[int, int] = {}  # pid -> start time of members found outside the leaf
        self._root: int | None = None
        self._pin: ChildPin | None = None
        self._epoch: int | None = None  # the subreaper's when the child started (None: off)
        self._released = False
        self._usage: Usage | None = None
        self.below = ""
        """The group below each leaf the child enters (a root child's), or ``""``: the leaves."""

    @property
    def leaves(self) -> tuple[Path, ...]:
        """Every group of the run: the v2 leaf, then its v1 leaves."""
        return (self.leaf, *self.cgroups.v1_leaves)

    @property
    def entered(self) -> tuple[Path, ...]:
        """The groups the child enters: the leaves, or the group below each of them."""
        return tuple(leaf / self.below if self.below else leaf for leaf in self.leaves)

    def command(self, argv: Sequence[str]) -> list[str]:
        """The shim enters the run's groups, then (where it can) starts the program in a cgroup
        namespace rooted at them."""
        return entry_command(
            [group / "cgroup.procs" for group in self.entered], [*self._namespace_prefix, *argv]
        )

    def shim_steps(self) -> list[str]:
        """The same for the confining shim (``_shim.py``): enter the groups, then a cgroup
        namespace; for a root child also a mount namespace in which every cgroup mount shows
        its own group (or nothing)."""
        entered = self.entered
        steps = [f"procs={group}/cgroup.procs" for group in entered]
        if self.below:
            steps += ["ns=cgroup,mount", *view_steps(entered)]
        elif self._namespace_prefix:
            steps.append("ns=cgroup")
        return steps

    # -- limits and accounting ---------------------------------------------------------

    def limit_hit(self) -> KernelHit | None:
        """The limit the kernel enforced on the run so far, from its counters."""
        return self.cgroups.hit()

    async def cpu_seconds(self) -> float | None:
        """CPU time the whole tree has used so far (``cpu.stat`` of the v2 leaf)."""
        return self.cgroups.cpu_seconds()

    @property
    def usage(self) -> Usage | None:
        """What the tree used, read once it is gone and before its leaves are removed."""
        return self._usage

    @property
    def watches(self) -> bool:
        """Whether :meth:`watch` has anything to do (else the run starts no task for it)."""
        return self.cgroups.watching

    async def watch(self) -> None:
        """Enforce what the kernel leaves to the supervisor (cgroup v1: out of memory ends
        the whole run)."""
        await self.cgroups.watch(lambda: self.signal(signal.SIGKILL))

    def pinned(self, pin: ChildPin) -> None:
        """The spawner's pidfd pin of the child (the spawner closes it)."""
        self._pin = pin

    @property
    def wants_subreaper(self) -> bool:
        """Whether the spawner should turn the child subreaper on (unless the embedder said no):
        the look for processes that left the leaf then walks the run's own tree, not every
        process of the machine (see ``_escapes``)."""
        return self._watch

    def started(self, pid: int) -> None:
        self._root = pid
        if self._pin is None or self._pin.pid != pid:
            self._pin = ChildPin(pid, open_fd=False)  # by start time, until :meth:`pinned`
        self._epoch = subreaper_epoch()

    def program_running(self) -> None:
        """The child wrote its first output: it runs the program, in the run's namespace."""
        self._note_namespace()

    def members(self) -> list[int]:
        """Every process in the leaf and in any cgroup a member created below it (a nested
        supervisor makes its own groups inside the leaf it was started in)."""
        found: list[int] = []
        for directory in self._subtree():
            try:
                text = read_text(directory / "cgroup.procs")
            except OSError:
                continue
            found.extend(int(word) for word in text.split())
        return found

    def _subtree(self) -> list[Path]:
        """The leaf and the cgroups below it, deepest first (the order ``rmdir`` needs)."""
        return subtree(self.leaf, self.below) or [self.leaf]

    def populated(self) -> bool:
        try:
            text = read_text(self.leaf / "cgroup.events")
        except FileNotFoundError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "populated":
                return value.strip() != "0"
        return True

    async def empty(self) -> bool:
        if self.populated():
            return False
        return not await self._escapees()

    async def signal(self, sig: Signals) -> None:
        """Every member (``cgroup.kill`` for SIGKILL), then whatever left the leaf: the rung
        reaches the leaf before the look for escaped processes (a read of ``/proc``)."""
        await self._signal_leaf(sig)
        await self._signal_escapees(sig)

    async def _signal_leaf(self, sig: Signals) -> None:
        if sig == signal.SIGKILL and self._kill_all():
            return
        if self._pin is not None:  # the child's own group, whatever the leaf says (while it is)
            self._pin.signal_group(sig)
        for _ in range(100):  # bounded: only reached without cgroup.kill
            members = self.members()
            await in_slices(members, lambda pid: self._signal_member(pid, sig))
            if sig != signal.SIGKILL or not members:
                break
            if not self.populated():
                break
        if sig == signal.SIGTERM:  # a stopped member handles SIGTERM only once continued
            await in_slices(self.members(), lambda pid: self._signal_member(pid, signal.SIGCONT))

    def _kill_all(self) -> bool:
        try:
            (self.leaf / "cgroup.kill").write_text("1")
        except OSError as exc:
            log.debug("cgroup.kill of %s failed: %r", self.leaf, exc)
            return False
        return True

    def _signal_member(self, pid: int, sig: Signals) -> None:
        """Signal ``pid`` only if it is still in the leaf."""
        signal_if(pid, sig, lambda: self._holds(pid))

    def _holds(self, pid: int) -> bool:
        try:
            text = read_text(Path(f"/proc/{pid}/cgroup"))
        except OSError:
            return False
        for line in text.splitlines():
            if line.startswith("0::"):
                # The leaf or a group below it; host group and leaf names are unique.
                tail = f"/{self.leaf.parent.name}/{self.leaf.name}/"
                return tail in line[3:].strip() + "/"
        return False

    async def wait_empty(self, resignal: Signals | None = None) -> None:
        """Return once ``populated 0`` (woken by the kernel's modify event on ``cgroup.events``)
        and no process that left the leaf is alive (their pidfds)."""
        self._note_namespace()
        while True:
            if self.populated():  # else no watch to set: the leaf's tree is already gone
                async with watch_file(self.leaf / "cgroup.events") as changed:
                    while self.populated():  # looked at again once the watch is set: no change missed
                        await changed()
            escaped = await self._escapees()
            if not escaped:
                return
            if resignal is not None:
                await self._signal_escapees(resignal, escaped)
            await wait_gone(escaped[:PIDFD_BATCH])

    def survivors(self) -> tuple[int, ...]:
        return tuple(sorted({*self.members(), *self._escaped}))

    # -- processes that left the leaf ---------------------------------------------------

    def _note_namespace(self) -> None:
        """Remember the run's cgroup namespace from a live process of the run (once past the
        shim, the child and every member are in it), and hold it open until the release
        (see :func:`pin_cgroup_namespace`)."""
        if not self._watch or self._namespace is not None or self._released:
            return
        ours = own_cgroup_namespace()
        for pid in self._namespace_candidates():
            pinned = pin_cgroup_namespace(pid)
            if pinned is None:
                continue
            found, fd = pinned
            # The namespace held is the run's: the child's, still not reaped once it is held (so
            # its number named no other process meanwhile), or a member's still in the leaf.
            child = pid == self._root and self._pin is not None and self._pin.held()
            if found != ours and (child or self._holds(pid)):
                self._namespace, self._namespace_fd = found, fd
                return
            os.close(fd)

    def _namespace_candidates(self) -> Iterator[int]:
        """The child while it is held, then the leaf's members, listed only if it is not enough
        (listing them walks the leaf's subtree: most of a run's first output's cost)."""
        root = self._root
        if root is not None and self._pin is not None and self._pin.held():
            yield root
        yield from self.members()

    async def _escapees(self) -> list[int]:
        """Live processes of the run outside the leaf: in its cgroup namespace or carrying its
        run tag (one shared read; the run tag only when the namespace was never seen)."""
        if not self._watch:
            return []
        self._note_namespace()
        if self._namespace is not None and descendants_suffice(self._epoch, subreaper_epoch()):
            candidates = await self._below_us(self._namespace)
        elif self._namespace is not None:
            candidates = list((await CENSUS.fresh()).get(self._namespace, ()))
        else:
            table = await TABLE.fresh()
            candidates = [pid for pid in table.by_tag.get(self.run_tag, ()) if not table.entries[pid].zombie]
        candidates += [pid for pid, start in self._escaped.items() if process_start_time(pid) == start]
        found = []
        for pid in dict.fromkeys(candidates):
            start = process_start_time(pid)
            if start is None or pid == self._root or self._holds(pid) or not _alive(pid):
                continue
            if pid not in self._escaped:
                log.warning("a process of run %s left its cgroup leaf: ending it too", self.run_tag)
            self._escaped[pid] = start
            found.append(pid)
        return found

    async def _below_us(self, namespace: str) -> list[int]:
        """The run's processes below us (see :func:`run_descendants`); when its child has exited
        and we adopted nothing, there are none: one file read, no hop to a worker thread."""
        exclude = {*ASYNCIO_CHILDREN, self._root or 0, keeper_pid() or 0}
        pin = self._pin
        roots = [] if self._root is None or (pin is not None and pin.has_exited()) else [self._root]
        if not roots and not adopted(exclude):
            return []
        return await anyio.to_thread.run_sync(run_descendants, namespace, roots, exclude)

    async def _signal_escapees(self, sig: Signals, pids: Sequence[int] | None = None) -> None:
        """Signal the processes that left the leaf (still the same processes: pid and start)."""
        escaped = await self._escapees() if pids is None else pids
        await in_slices(escaped, lambda pid: signal_if(pid, sig, lambda: self._still_escaped(pid)))
        if sig == signal.SIGTERM:  # a stopped one handles SIGTERM only once continued
            await in_slices(
                escaped, lambda pid: signal_if(pid, signal.SIGCONT, lambda: self._still_escaped(pid))
            )

    def _still_escaped(self, pid: int) -> bool:
        return process_start_time(pid) == self._escaped.get(pid)

    def _reap_members(self) -> None:
        if not subreaper_enabled():  # without it, no member but the child is ever ours
            return
        keeper = keeper_pid()
        for pid in main_thread_children():
            if pid in ASYNCIO_CHILDREN or pid == self._root or pid == keeper:
                continue  # direct children of runs are asyncio's to reap; the keeper is no member
            if self._holds(pid) or (pid in self._escaped and self._still_escaped(pid)):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    async def let_go(self) -> None:
        """:meth:`release`, off the event loop: removing a group takes the kernel's
        ``cgroup_mutex``, which other groups' removals and any migration in flight hold
        (through an RCU grace period), and a run's teardown must not stall every other run
        on the loop meanwhile.  The out-of-memory watch stops here first, on the loop that
        waits on its descriptor."""
        self.cgroups.close()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.release)

    def release(self) -> None:
        """Reap our zombie children that were members, then remove the leaf once empty.

        Zombies become ours only when an embedder turned the child subreaper on; they
        stay recognisable as members, since a zombie keeps its cgroup.  A populated leaf
        stays, for a sweep to find.
        """
        if self._released:
            return
        fd, self._namespace_fd = self._namespace_fd, None
        if fd is not None:
            os.close(fd)
        self._reap_members()
        if self._usage is None:  # the counters go with the leaves
            self._usage = self.cgroups.usage()
        try:
            if not remove_group(self.leaf, self.below):
                for directory in self._subtree():  # groups a nested supervisor left, then the leaf
                    directory.rmdir()
            self._released = True
        except OSError as exc:
            log.debug("could not remove %s: %r", self.leaf, exc)
        self.cgroups.close()
        if self._released:
            self.cgroups.remove()
