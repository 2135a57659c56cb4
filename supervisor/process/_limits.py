"""A run's resource limits and accounting in the kernel (SPEC section 15).

Where each controller lives
---------------------------
A cgroup controller is bound to exactly one hierarchy.  When the cgroup v2 directory
run leaves go under (the *v2 base*: this process's own v2 group, or ``cgroup_root``)
lists a controller in ``cgroup.controllers``, the controller is used there: enabled in
the base's and the host group's ``cgroup.subtree_control`` and set in the run's own v2
leaf.  Otherwise, on a hybrid host, the controller is bound to a cgroup v1 hierarchy
(``/sys/fs/cgroup/memory`` ...): the run then also gets a leaf of the same name in that
hierarchy, under this process's own path there (``/proc/self/cgroup``), e.g.
``/sys/fs/cgroup/memory/<own path>/subagents-<pid>-<start>/run-<id>``.  The spawn
shim writes the child into every leaf before the program runs, and the leaves are
removed with the run.  :func:`limit_support` finds out once, per v2 base, which way
each controller goes, or why it cannot (the reason names the file that refused).

Files
-----
* v2: ``memory.max``, ``memory.swap.max`` (0: a memory limit is not stretched by
  swap), ``memory.oom.group`` (1: an out-of-memory kill takes the whole leaf),
  ``pids.max``, ``cpu.max``; read back ``cpu.stat`` (``usage_usec``, present in every
  v2 group), ``memory.peak``, ``pids.peak``, ``memory.events`` (``oom_kill``),
  ``pids.events.local`` (``max``: forks refused in the leaf).
* v1: ``memory.limit_in_bytes`` and, with swap accounting, ``memory.memsw.limit_in_bytes``;
  ``pids.max``; ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``; read back
  ``memory.max_usage_in_bytes``, ``memory.oom_control`` (``oom_kill``), ``pids.peak``,
  ``pids.events`` (``max``: forks refused in the leaf, whichever limit refused them).

v1 has no ``memory.oom.group``: the kernel kills one process.  So every v1 memory leaf
registers an eventfd on its ``memory.oom_control`` (``cgroup.event_control``) before the
child enters it, and :meth:`RunCgroups.watch` ends the whole run once the kernel has
counted an out-of-memory kill in the leaf.

Every run in cgroup mode gets a memory and a pids leaf where the host has those
controllers, limits or not: they cost ~0.2 ms and give the run's accounting (peaks) and
make "out of memory ends the whole run" hold for the host ceiling and the system too.
The cpu leaf is made only for ``cpu_max`` (CPU time is read from the v2 leaf).
"""

from __future__ import annotations

import atexit
import contextlib
import enum
import errno
import functools
import logging
import math
import os
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import anyio

log = logging.getLogger("supervisor")

MEMORY, PIDS, CPU = "memory", "pids", "cpu"
CONTROLLERS = (MEMORY, PIDS, CPU)
ACCOUNTED: tuple[str, ...] = (MEMORY, PIDS)
"""Controllers every run gets a leaf in when the host has them (accounting, OOM handling)."""

CPU_PERIOD_US = 100_000
MIN_CPU = 0.01  # the kernel's smallest quota is 1 ms per period
MAX_CPU = 4096.0
MAX_PIDS = 4_194_304  # PID_MAX_LIMIT
MAX_MEMORY = 2**62
"""The largest limit accepted (4 EiB): far above any machine, and within the kernel's counters."""

# After an out-of-memory notification, look this long for the kill to be counted (the
# kernel notifies before it has picked and killed a victim; the gap is its report).
OOM_KILL_LOOK_SECONDS = (0.001, 0.004, 0.016, 0.064, 0.25, 0.5, 1.0, 2.0)

_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(?:([KMGT])(?:iB)?|(B))", re.IGNORECASE)  # ASCII digits only


# -- values -----------------------------------------------------------------------------------


def parse_memory(value: object) -> int:
    """Bytes from an integer, or from a string with a binary unit (``"512M"``, ``"2GiB"``, ``"4096B"``).

    Raises ``ValueError`` with a message fit to follow a key's name.
    """
    if isinstance(value, bool):
        raise ValueError('must be a number of bytes or a size such as "512M"')
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        match = _SIZE.fullmatch(value.strip())
        if match is None:
            raise ValueError(
                'must be a number of bytes or a size with a binary unit (B, K, M, G, T), e.g. "512M"'
            )
        number, unit, plain = match.groups()
        size = math.floor(float(number) * _UNITS[(unit or plain or "").upper()])
    else:
        raise ValueError('must be a number of bytes or a size such as "512M"')
    if not 0 < size <= MAX_MEMORY:
        raise ValueError(f"must be a positive size no greater than {MAX_MEMORY} bytes")
    return size


def check_pids(value: int) -> int:
    if not 0 < value <= MAX_PIDS:
        raise ValueError(f"must be a positive integer no greater than {MAX_PIDS}")
    return value


def check_cpu(value: float) -> float:
    if not (math.isfinite(value) and MIN_CPU <= value <= MAX_CPU):
        raise ValueError(f"must be a number of CPUs from {MIN_CPU} to {MAX_CPU:g}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Limits:
    """What the kernel enforces on one run's tree (or, as a host ceiling, on all runs)."""

    memory_max: int | None = None
    """Bytes."""
    pids_max: int | None = None
    """Processes and threads."""
    cpu_max: float | None = None
    """CPUs (0.5: half of one CPU's time)."""

    @property
    def controllers(self) -> tuple[str, ...]:
        wanted = {MEMORY: self.memory_max, PIDS: self.pids_max, CPU: self.cpu_max}
        return tuple(c for c in CONTROLLERS if wanted[c] is not None)


NO_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Usage:
    """What a run's tree used, from the kernel's counters (None where it does not count it)."""

    cpu_s: float | None = None
    memory_peak_bytes: int | None = None
    pids_peak: int | None = None


class HitScope(enum.StrEnum):
    """Whose limit the kernel enforced."""

    RUN = "run"
    HOST = "host"
    """The host ceiling (one group over all runs of the process)."""
    SYSTEM = "system"
    """A limit above the supervisor: its own cgroup's, the container's or the machine's."""


@dataclass(frozen=True, slots=True)
class KernelHit:
    """A limit the kernel enforced on the run, from its counters.

    ``resource`` is ``memory`` (an out-of-memory kill in the run's tree) or
    ``processes`` (a fork the kernel refused); ``limit`` is the limit that was reached
    (None for ``system``).
    """

    resource: str
    limit: int | None
    scope: HitScope


class LimitUnavailable(Exception):
    """A limit cannot be enforced here; the text says why."""


class LimitRefused(OSError):
    """A cgroup file refused what the supervisor wrote (``filename`` names it)."""


# -- where each controller lives --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One hierarchy this process puts runs' groups in."""

    version: int
    directory: Path
    """Where this process's host groups go in it."""
    controllers: frozenset[str]
    """Which of :data:`CONTROLLERS` it carries."""

    @property
    def label(self) -> str:
        return "cgroup v2" if self.version == 2 else f"cgroup v1 {','.join(sorted(self.controllers))}"


@dataclass(frozen=True)
class LimitSupport:
    """Which hierarchy carries each controller for runs under one v2 base, or why none does."""

    v2_base: Path | None
    where: Mapping[str, Hierarchy] = field(default_factory=dict)
    why_not: Mapping[str, str] = field(default_factory=dict)

    def require(self, controller: str) -> Hierarchy:
        """The hierarchy for ``controller``; raises :class:`LimitUnavailable` with the reason."""
        found = self.where.get(controller)
        if found is None:
            raise LimitUnavailable(self.why_not.get(controller, f"no {controller} controller"))
        return found

    @property
    def v1(self) -> list[Hierarchy]:
        """The v1 hierarchies in use, each once."""
        seen: dict[Path, Hierarchy] = {}
        for hierarchy in self.where.values():
            if hierarchy.version == 1:
                seen.setdefault(hierarchy.directory, hierarchy)
        return list(seen.values())


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _v1_mounts() -> dict[str, tuple[Path, str]]:
    """controller -> (mount point, root of the mount inside the hierarchy) for mounted v1 hierarchies."""
    found: dict[str, tuple[Path, str]] = {}
    text = _read(Path("/proc/self/mountinfo")) or ""
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        options = set(tail[2].split(","))
        for controller in CONTROLLERS:
            if controller in options:
                found.setdefault(controller, (Path(fields[4]), fields[3]))
    return found


def own_v1_paths() -> dict[str, str]:
    """controller -> this process's path in the v1 hierarchy carrying it (``/proc/self/cgroup``)."""
    found: dict[str, str] = {}
    for line in (_read(Path("/proc/self/cgroup")) or "").splitlines():
        _id, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        for name in names.split(","):
            if name in CONTROLLERS:
                found[name] = path.strip()
    return found


def v1_homes() -> list[tuple[Path, Path]]:
    """(mount point, this process's directory) of each cgroup v1 hierarchy carrying a
    controller runs' limits use: where a sweep looks for dead hosts' groups."""
    own = own_v1_paths()
    found: dict[Path, Path] = {}
    for controller, (mount, mount_root) in _v1_mounts().items():
        path = own.get(controller)
        if path is not None and (path + "/").startswith(mount_root.rstrip("/") + "/"):
            found[mount] = Path(os.path.normpath(mount / os.path.relpath(path, mount_root)))
    return list(found.items())


def _writable(directory: Path) -> bool:
    return os.access(directory, os.W_OK | os.X_OK) and os.access(directory / "cgroup.procs", os.W_OK)


def _v2_controller(base: Path, controller: str) -> tuple[Hierarchy | None, str | None]:
    enabled = (_read(base / "cgroup.subtree_control") or "").split()
    if controller not in enabled:
        try:
            (base / "cgroup.subtree_control").write_text(f"+{controller}")
        except OSError as exc:
            reason = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            hint = " (the group holds processes of its own)" if exc.errno == errno.EBUSY else ""
            return None, (
                f"the {controller} controller is delegated to {base} (cgroup v2), but writing "
                f"+{controller} to {base / 'cgroup.subtree_control'} was refused ({reason}){hint}"
            )
    return Hierarchy(2, base, frozenset({controller})), None


@functools.cache
def limit_support(v2_base: Path | None) -> LimitSupport:
    """Where each controller lives for runs under ``v2_base`` (None: no cgroup containment).

    Enabling a v2 controller in the base's ``cgroup.subtree_control`` is tried here,
    once (it is what using the controller needs; where the kernel refuses, the reason
    says so).
    """
    if v2_base is None:
        return LimitSupport(None, why_not=dict.fromkeys(CONTROLLERS, "cgroup containment is not available"))
    delegated = set((_read(v2_base / "cgroup.controllers") or "").split())
    mounts = _v1_mounts()
    own = own_v1_paths()
    where: dict[str, Hierarchy] = {}
    why_not: dict[str, str] = {}
    v1_dirs: dict[Path, set[str]] = {}
    for controller in CONTROLLERS:
        if controller in delegated:
            hierarchy, reason = _v2_controller(v2_base, controller)
            if hierarchy is not None:
                where[controller] = hierarchy
            else:
                why_not[controller] = str(reason)
            continue
        if controller not in mounts:
            why_not[controller] = (
                f"no {controller} controller here: {v2_base} (cgroup v2) does not delegate it and "
                f"no cgroup v1 {controller} hierarchy is mounted"
            )
            continue
        mount, mount_root = mounts[controller]
        path = own.get(controller)
        if path is None or not (path + "/").startswith(mount_root.rstrip("/") + "/"):
            why_not[controller] = f"this process's cgroup v1 {controller} group is not under {mount}"
            continue
        directory = mount / os.path.relpath(path, mount_root)
        directory = Path(os.path.normpath(directory))
        if not _writable(directory):
            why_not[controller] = f"{directory} (cgroup v1 {controller}) is not writable by this user"
            continue
        v1_dirs.setdefault(directory, set()).add(controller)
    for directory, controllers in v1_dirs.items():
        hierarchy = Hierarchy(1, directory, frozenset(controllers))
        for controller in controllers:
            where[controller] = hierarchy
    return LimitSupport(v2_base, where, why_not)


# -- host groups and the host ceiling ---------------------------------------------------------


def _refused(exc: OSError, path: Path) -> LimitRefused:
    code = exc.errno or errno.EIO
    return LimitRefused(code, os.strerror(code), str(path))


def _write(path: Path, value: str) -> None:
    """Write one cgroup file; a refusal is a :class:`LimitRefused` naming the file."""
    try:
        path.write_text(value)
    except OSError as exc:
        raise _refused(exc, path) from exc


def _memory_files(group: Path, version: int, size: int | None) -> None:
    """A memory limit (None: lift it) and, where swap is accounted, the same limit on swap."""
    if version == 2:
        _write(group / "memory.max", "max" if size is None else str(size))
        if (group / "memory.swap.max").exists():
            _write(group / "memory.swap.max", "max" if size is None else "0")
        return
    value = "-1" if size is None else str(size)
    memsw = group / "memory.memsw.limit_in_bytes"
    if memsw.exists() and size is None:  # raise memory+swap first: it may never be below memory
        _write(memsw, value)
    _write(group / "memory.limit_in_bytes", value)
    if memsw.exists() and size is not None:
        _write(memsw, value)


def _pids_file(group: Path, count: int | None) -> None:
    _write(group / "pids.max", "max" if count is None else str(count))


def _cpu_files(group: Path, version: int, cpus: float) -> None:
    quota = max(1000, round(cpus * CPU_PERIOD_US))
    if version == 2:
        _write(group / "cpu.max", f"{quota} {CPU_PERIOD_US}")
    else:
        _write(group / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(group / "cpu.cfs_quota_us", str(quota))


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


class HostGroups:
    """This process's host group in each hierarchy its runs use, and the host ceiling on them.

    A host group is made on first use (named :func:`host_group_name`), removed at
    exit when empty, and carries the ceiling (``memory_max``, ``pids_max``) in the
    hierarchies that hold those controllers.  In a v2 host group the controllers placed
    in v2 are enabled for the leaves.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[Path, Hierarchy] = {}
        self.ceiling = NO_LIMITS

    def group(self, hierarchy: Hierarchy, name: str, v2_controllers: Iterable[str] = ()) -> Path:
        path = hierarchy.directory / name
        with self._lock:
            if path in self._groups:
                return path
            try:
                path.mkdir(exist_ok=True)
            except OSError as exc:
                raise _refused(exc, path) from exc
            atexit.register(_remove_quietly, path)
            enable = " ".join(f"+{c}" for c in v2_controllers)
            if hierarchy.version == 2 and enable:
                _write(path / "cgroup.subtree_control", enable)
            self._apply_ceiling(path, hierarchy, self.ceiling)
            self._groups[path] = hierarchy
        return path

    def set_ceiling(self, ceiling: Limits) -> None:
        """Put ``ceiling`` on every host group made so far and every one made later."""
        with self._lock:
            for path, hierarchy in self._groups.items():
                self._apply_ceiling(path, hierarchy, ceiling, clear=True)
            self.ceiling = ceiling

    @staticmethod
    def _apply_ceiling(path: Path, hierarchy: Hierarchy, ceiling: Limits, *, clear: bool = False) -> None:
        if MEMORY in hierarchy.controllers and (clear or ceiling.memory_max is not None):
            _memory_files(path, hierarchy.version, ceiling.memory_max)
        if PIDS in hierarchy.controllers and (clear or ceiling.pids_max is not None):
            _pids_file(path, ceiling.pids_max)

    def groups(self) -> list[Path]:
        with self._lock:
            return list(self._groups)

    def forget(self) -> None:
        """A forked child is another host: it makes groups of its own."""
        self._lock = threading.Lock()
        self._groups = {}


HOST_GROUPS = HostGroups()
os.register_at_fork(after_in_child=HOST_GROUPS.forget)


# -- one run's groups ----------------------------------------------------------------------------


def _stat_value(path: Path, key: str) -> int | None:
    """``key``'s number in a flat keyed file (``cpu.stat``, ``memory.events``), or None."""
    for line in (_read(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
    return None


def _subtree_sum(group: Path, name: str, key: str) -> int:
    """``key`` of ``name`` summed over ``group`` and the groups below it.

    cgroup v1 counts an out-of-memory kill in the victim's own group and a refused fork
    in the forking one (neither is passed up): a root child sits in a group below its
    run's leaf, and a nested supervisor makes more."""
    total = 0
    for directory, _dirs, _files in os.walk(group):
        total += _stat_value(Path(directory) / name, key) or 0
    return total


def _number(path: Path) -> int | None:
    text = (_read(path) or "").strip()
    if text.isascii() and text.isdigit():
        return int(text)
    return None


@dataclass
class _OomWatch:
    """The eventfd registered on a v1 leaf's ``memory.oom_control``."""

    eventfd: int
    control: int

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # not on an event loop: nobody waits on it
            anyio.notify_closing(self.eventfd)
        for fd in (self.eventfd, self.control):
            with contextlib.suppress(OSError):
                os.close(fd)


class RunCgroups:
    """One run's limits and counters: its v2 leaf, plus a leaf in each v1 hierarchy it needs.

    Made in a worker thread before the child is spawned (:meth:`create`); the child
    enters every leaf through the spawn shim (the v2 leaf, then :attr:`v1_leaves`); counters are read
    while the leaves exist (:meth:`usage`, :meth:`hit`); :meth:`remove` removes the v1
    leaves once the run's tree is gone.
    """

    def __init__(self, v2_leaf: Path, support: LimitSupport, limits: Limits, host_groups: HostGroups) -> None:
        self.v2_leaf = v2_leaf
        self.support = support
        self.limits = limits
        self.host_groups = host_groups
        self.leaves: dict[str, Path] = {}
        """controller -> the leaf carrying it (the v2 leaf for controllers placed in v2)."""
        self.v1_leaves: list[Path] = []
        self._oom: _OomWatch | None = None
        self._oom_kills_seen = 0

    @classmethod
    def create(
        cls,
        v2_leaf: Path,
        support: LimitSupport,
        limits: Limits,
        *,
        host_groups: HostGroups = HOST_GROUPS,
    ) -> RunCgroups:
        """Make the run's v1 leaves, set its limits, and arm the v1 out-of-memory watch.

        A limit that cannot be had raises :class:`LimitUnavailable`, a file that refuses
        a write :class:`LimitRefused`; nothing made is left behind.  A controller wanted
        only for accounting that cannot be had is just left out.
        """
        run = cls(v2_leaf, support, limits, host_groups)
        try:
            run._make()
        except BaseException:
            run.remove()
            raise
        return run

    def _make(self) -> None:
        required = set(self.limits.controllers) | set(self.host_groups.ceiling.controllers)
        wanted = [c for c in CONTROLLERS if c in required or (c in ACCOUNTED and c in self.support.where)]
        name = self.v2_leaf.name
        host_name = self.v2_leaf.parent.name
        for controller in wanted:
            try:
                hierarchy = self.support.require(controller)
            except LimitUnavailable:
                if controller in required:
                    raise
                continue
            if hierarchy.version == 2:
                self.leaves[controller] = self.v2_leaf
                continue
            leaf = hierarchy.directory / host_name / name
            if leaf not in self.v1_leaves:
                try:
                    self.host_groups.group(hierarchy, host_name)
                    leaf.mkdir()
                except OSError as exc:
                    if controller in required:
                        if isinstance(exc, LimitRefused):
                            raise
                        raise _refused(exc, leaf) from exc
                    log.debug("no accounting leaf %s: %r", leaf, exc)
                    continue
                self.v1_leaves.append(leaf)
            self.leaves[controller] = leaf
        self._apply()

    def _version(self, controller: str) -> int:
        return 2 if self.leaves[controller] == self.v2_leaf else 1

    def _apply(self) -> None:
        limits = self.limits
        if MEMORY in self.leaves:
            leaf = self.leaves[MEMORY]
            if self._version(MEMORY) == 2:
                if limits.memory_max is not None:
                    _memory_files(leaf, 2, limits.memory_max)
                _write(leaf / "memory.oom.group", "1")
            else:
                if limits.memory_max is not None:
                    _memory_files(leaf, 1, limits.memory_max)
                self._oom = _arm_oom_watch(leaf)
        if limits.pids_max is not None:
            _pids_file(self.leaves[PIDS], limits.pids_max)
        if limits.cpu_max is not None:
            _cpu_files(self.leaves[CPU], self._version(CPU), limits.cpu_max)

    def mirror(self, below: str) -> None:
        """Set the run's limits again on the group ``below`` each leaf (a root child's own group).

        The limits that hold are the leaf's, above everything the child sees; these copies are
        what it reads (Node's heap, Go's ``GOMAXPROCS``), and raising them gains it nothing.  An
        out-of-memory at the copy must still end the whole run: ``memory.oom.group`` there too
        (v2), and the v1 watch listens on the group below (the kernel notifies the group out of
        memory and the groups below it)."""
        limits = self.limits
        v2 = [c for c in (MEMORY, PIDS, CPU) if c in self.leaves and self._version(c) == 2]
        wanted = {MEMORY: True, PIDS: limits.pids_max is not None, CPU: limits.cpu_max is not None}
        enable = [c for c in v2 if wanted[c]]
        if enable:
            _write(self.v2_leaf / "cgroup.subtree_control", " ".join(f"+{c}" for c in enable))
        if MEMORY in self.leaves:
            group = self.leaves[MEMORY] / below
            if limits.memory_max is not None:
                _memory_files(group, self._version(MEMORY), limits.memory_max)
            if self._version(MEMORY) == 2:
                _write(group / "memory.oom.group", "1")
            elif self._oom is not None:
                watch = _arm_oom_watch(group)
                self._oom.close()
                self._oom = watch
        if limits.pids_max is not None:
            _pids_file(self.leaves[PIDS] / below, limits.pids_max)
        if limits.cpu_max is not None:
            _cpu_files(self.leaves[CPU] / below, self._version(CPU), limits.cpu_max)

    # -- counters ---------------------------------------------------------------------------

    def cpu_seconds(self) -> float | None:
        """CPU time of the whole tree so far (``cpu.stat``, in every v2 group)."""
        usec = _stat_value(self.v2_leaf / "cpu.stat", "usage_usec")
        return None if usec is None else usec / 1e6

    def usage(self) -> Usage:
        memory_peak = pids_peak = None
        if MEMORY in self.leaves:
            leaf = self.leaves[MEMORY]
            memory_peak = _number(
                leaf / ("memory.peak" if self._version(MEMORY) == 2 else "memory.max_usage_in_bytes")
            )
        if PIDS in self.leaves:
            pids_peak = _number(self.leaves[PIDS] / "pids.peak")
        return Usage(
            cpu_s=self.cpu_seconds(),
            memory_peak_bytes=memory_peak,
            pids_peak=pids_peak,
        )

    def oom_kills(self) -> int:
        """Processes of the run the kernel killed for lack of memory (any limit's)."""
        if MEMORY not in self.leaves:
            return 0
        leaf = self.leaves[MEMORY]
        if self._version(MEMORY) == 2:
            return _stat_value(leaf / "memory.events", "oom_kill") or 0
        return _subtree_sum(leaf, "memory.oom_control", "oom_kill")

    def refused_forks(self) -> int:
        """Forks in the run's tree the kernel refused (any limit's)."""
        if PIDS not in self.leaves:
            return 0
        leaf = self.leaves[PIDS]
        if self._version(PIDS) == 2 and (leaf / "pids.events.local").exists():
            return _stat_value(leaf / "pids.events.local", "max") or 0
        if self._version(PIDS) == 2:
            return _stat_value(leaf / "pids.events", "max") or 0
        return _subtree_sum(leaf, "pids.events", "max")

    def hit(self) -> KernelHit | None:
        """The limit the kernel enforced on the run, if any: an out-of-memory kill first,
        then a refused fork.  Read before the leaves are removed."""
        if self.oom_kills():
            controller, resource = MEMORY, "memory"
        elif self.refused_forks():
            controller, resource = PIDS, "processes"
        else:
            return None
        own = self.limits.memory_max if controller == MEMORY else self.limits.pids_max
        ceiling = self.host_groups.ceiling
        host = ceiling.memory_max if controller == MEMORY else ceiling.pids_max
        leaf = self.leaves[controller]
        v2 = self._version(controller) == 2
        if own is not None and self._reached(leaf, controller, v2):
            return KernelHit(resource, own, HitScope.RUN)
        if host is not None and self._reached(leaf.parent, controller, v2):
            return KernelHit(resource, host, HitScope.HOST)
        return KernelHit(resource, None, HitScope.SYSTEM)

    @staticmethod
    def _reached(group: Path, controller: str, v2: bool) -> bool:
        """Whether ``group``'s own limit was reached (its peak is at its limit)."""
        if controller == MEMORY:
            limit = _number(group / ("memory.max" if v2 else "memory.limit_in_bytes"))
            peak = _number(group / ("memory.peak" if v2 else "memory.max_usage_in_bytes"))
        else:
            limit, peak = _number(group / "pids.max"), _number(group / "pids.peak")
        return limit is not None and peak is not None and peak >= limit

    # -- the v1 out-of-memory watch --------------------------------------------------------

    async def watch(self, end_run: Callable[[], Awaitable[None]]) -> None:
        """End the whole run once the kernel counts an out-of-memory kill in it (cgroup v1).

        The kernel notifies every group below the one out of memory before it picks
        its victim, so after each notification this looks a few times (within ~4 s) for
        the kill to be counted in this leaf; a notification for another leaf's victim
        changes nothing here.  Returns at once where v2's ``memory.oom.group`` does the job.
        """
        oom = self._oom
        try:
            while oom is not None and self._oom is oom:  # closed: its descriptors may be reused
                await anyio.wait_readable(oom.eventfd)
                if self._oom is not oom:
                    return
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(oom.eventfd)
                for pause in OOM_KILL_LOOK_SECONDS:
                    kills = self.oom_kills()
                    if kills > self._oom_kills_seen:
                        self._oom_kills_seen = kills
                        log.info("cgroup %s: out-of-memory kill; ending the run", self.v2_leaf.name)
                        await end_run()
                        break
                    await anyio.sleep(pause)
                    if self._oom is not oom:
                        return
        except (anyio.ClosedResourceError, OSError):  # the run is over: the watch was closed
            return

    def close(self) -> None:
        """Stop the out-of-memory watch (its descriptors go)."""
        if self._oom is not None:
            self._oom.close()
            self._oom = None

    def remove(self) -> None:
        """Close the watch and remove the v1 leaves (deepest first).  A leaf that will not
        go stays for a sweep to find."""
        self.close()
        for leaf in self.v1_leaves:
            try:
                os.rmdir(leaf)
                continue
            except FileNotFoundError:
                continue
            except OSError:  # groups a nested supervisor made inside: deepest first
                pass
            for directory, _dirs, _files in os.walk(leaf, topdown=False):
                try:
                    os.rmdir(directory)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    log.debug("could not remove %s: %r", directory, exc)
        self.v1_leaves = [leaf for leaf in self.v1_leaves if leaf.exists()]


def _arm_oom_watch(leaf: Path) -> _OomWatch:
    """Register an eventfd on ``memory.oom_control`` (cgroup v1) before the child enters."""
    efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    try:
        control = os.open(leaf / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        os.close(efd)
        raise
    watch = _OomWatch(efd, control)
    try:
        _write(leaf / "cgroup.event_control", f"{efd} {control}")
    except LimitRefused:
        watch.close()
        raise
    return watch


# -- what this host can enforce -----------------------------------------------------------------

LIMIT_KEYS = {MEMORY: "memory_max", PIDS: "pids_max", CPU: "cpu_max"}


def limit_lines(support: LimitSupport) -> list[str]:
    """One line per limit: how this host enforces it, or why it cannot (``subagents doctor``)."""
    lines = []
    for controller, key in LIMIT_KEYS.items():
        hierarchy = support.where.get(controller)
        if hierarchy is None:
            lines.append(f"limit {key}: unavailable ({support.why_not.get(controller, 'no controller')})")
        else:
            how = "cgroup v2" if hierarchy.version == 2 else f"cgroup v1 {controller}"
            lines.append(f"limit {key}: {how} ({hierarchy.directory})")
    lines.append("limit timeout_ms, stall_timeout_ms: the supervisor itself (every containment)")
    return lines
