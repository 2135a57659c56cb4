"""What a child may touch: Landlock confinement, and a root child that is not the machine's root.

Both are applied by the spawn shim (``_shim.c`` compiled, or ``_shim.py``, a stdlib-only
Python program run with ``-I -S``) in the child's own process before it ``exec``s the agent, so there is
no instruction of the agent's that runs unconfined.

**Confinement** (``confine = true``): a Landlock ruleset that handles every file-system
right this kernel's ABI knows, and grants

* everything in the workspace (the child's working directory), its private ``TMPDIR``
  and each ``writable`` path;
* read and execute in the system (:data:`SYSTEM_READ`), each ``readable`` path and the
  prefix of the program's own install (``.../bin/program`` -> ``...``);
* read and write of the harmless devices (:data:`DEVICES`), and a listing of ``/dev``.

Nothing else: not the rest of the user's home (``~/.ssh``, ``~/.aws``, ``~/.netrc``),
not ``/tmp``, not a block device.  From ABI 6 on, the ruleset also scopes signals and
abstract unix sockets to the run's own processes (an agent cannot signal its
supervisor).  The network is not confined.

**The root child** (the supervisor runs as root): the bounding set loses every
capability but :data:`KEPT_CAPABILITIES` (an embedder keeps more with
``keep_capabilities``), and in cgroup containment the child sits in a group *below*
the run's leaf (its limits are on the leaf, out of its reach) with a cgroup namespace
and a private mount namespace in which every cgroup mount shows that group as its root
(v1 hierarchies it has no group in are hidden).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import importlib.util
import os
import py_compile
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from supervisor.process._cshim import compiled_shim
from supervisor.process._mounttable import mount_table

SHIM = Path(__file__).with_name("_shim.py")

# -- Landlock ---------------------------------------------------------------------------------

_SYS_LANDLOCK_CREATE_RULESET = 444
_LANDLOCK_CREATE_RULESET_VERSION = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

MIN_ABI = 3
"""Below ABI 3 (Linux 6.2) Landlock cannot deny ``truncate``: a confined agent could empty
any file it can name, so confinement is refused there."""

READ = EXECUTE | READ_FILE | READ_DIR
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV

SYSTEM_READ = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc", "/sys",
    "/run", "/nix", "/snap", "/gnu",
)  # fmt: skip
"""Read and execute: the installed system.  Not ``/home``, ``/root``, ``/tmp``, ``/var``,
``/srv``, ``/mnt``, ``/media`` or ``/work``: a path there is granted by ``readable``."""

DEVICES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
)


def handled_rights(abi: int) -> int:
    """Every file-system right the kernel's Landlock ABI ``abi`` knows."""
    rights = (1 << 13) - 1  # ABI 1: execute .. make_sym
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


@dataclass(frozen=True, slots=True)
class LandlockSupport:
    """This kernel's Landlock ABI (None: not usable here), and why."""

    abi: int | None
    reason: str

    @property
    def enforceable(self) -> bool:
        return self.abi is not None and self.abi >= MIN_ABI


@functools.cache
def landlock_support() -> LandlockSupport:
    """Asked of the kernel by its system call (``landlock_create_ruleset`` with
    ``LANDLOCK_CREATE_RULESET_VERSION``): ``/sys/kernel/security/lsm`` is often not mounted."""
    if not sys.platform.startswith("linux"):
        return LandlockSupport(None, "Landlock is a Linux security module; this is not Linux")
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        abi = int(libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION))
    except (OSError, AttributeError) as exc:
        return LandlockSupport(None, f"the landlock_create_ruleset system call cannot be made ({exc!r})")
    if abi < 0:
        code = ctypes.get_errno()
        name = errno.errorcode.get(code, str(code))
        if code == errno.EOPNOTSUPP:
            why = "Landlock is built into this kernel but not enabled (boot with lsm=...,landlock)"
        elif code == errno.ENOSYS:
            why = "this kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)"
        else:
            why = "the kernel refused landlock_create_ruleset"
        return LandlockSupport(None, f"{why}: landlock_create_ruleset returned {name}")
    if abi < MIN_ABI:
        return LandlockSupport(
            abi, f"Landlock ABI {abi} cannot deny truncation; confinement needs ABI {MIN_ABI} (Linux 6.2)"
        )
    return LandlockSupport(abi, f"Landlock ABI {abi}")


class ConfinementUnavailable(Exception):
    """``confine = true`` cannot be enforced here; the text says why."""


def check_confinement() -> LandlockSupport:
    """This host's Landlock, or :class:`ConfinementUnavailable` naming why it cannot confine."""
    support = landlock_support()
    if not support.enforceable:
        raise ConfinementUnavailable(f"confine = true cannot be enforced here: {support.reason}")
    return support


@dataclass(frozen=True, slots=True)
class Confinement:
    """A run's file-system policy (``confine = true``): what it may write and read beyond
    its workspace, its private ``TMPDIR`` and the system."""

    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()


def program_prefixes(program: str, path: str | None) -> list[Path]:
    """Where the program is installed: the folder above its ``bin`` (as named and as
    resolved), so that an interpreter finds its libraries (a venv, ``/usr/local``)."""
    found = program if os.sep in program else shutil.which(program, path=path or os.defpath)
    if found is None:
        return []
    named = Path(os.path.abspath(found))
    return list(dict.fromkeys([named.parent.parent, Path(os.path.realpath(named)).parent.parent]))


def landlock_steps(confinement: Confinement, *, tmpdir: Path, program_dirs: Iterable[Path]) -> list[str]:
    """The shim's ``landlock=`` step and its ``rule=`` steps."""
    abi = check_confinement().abi
    assert abi is not None
    handled = handled_rights(abi)
    rules: list[tuple[int, str]] = [(handled, "."), (handled, str(tmpdir))]
    rules += [(handled, str(path)) for path in confinement.writable]
    rules += [(READ, path) for path in SYSTEM_READ]
    rules += [(READ, str(path)) for path in (*confinement.readable, *program_dirs)]
    rules += [(READ_DIR, "/dev"), *((DEVICE, device) for device in DEVICES)]
    steps = [f"landlock={handled}:{scopes(abi)}"]
    steps += [f"rule={rights & handled}:{path}" for rights, path in rules]
    return steps


# -- capabilities of a root child -----------------------------------------------------------

CAPABILITIES = {
    "chown": 0, "dac_override": 1, "dac_read_search": 2, "fowner": 3, "fsetid": 4, "kill": 5,
    "setgid": 6, "setuid": 7, "setpcap": 8, "linux_immutable": 9, "net_bind_service": 10,
    "net_broadcast": 11, "net_admin": 12, "net_raw": 13, "ipc_lock": 14, "ipc_owner": 15,
    "sys_module": 16, "sys_rawio": 17, "sys_chroot": 18, "sys_ptrace": 19, "sys_pacct": 20,
    "sys_admin": 21, "sys_boot": 22, "sys_nice": 23, "sys_resource": 24, "sys_time": 25,
    "sys_tty_config": 26, "mknod": 27, "lease": 28, "audit_write": 29, "audit_control": 30,
    "setfcap": 31, "mac_override": 32, "mac_admin": 33, "syslog": 34, "wake_alarm": 35,
    "block_suspend": 36, "audit_read": 37, "perfmon": 38, "bpf": 39, "checkpoint_restore": 40,
}  # fmt: skip

KEPT_CAPABILITIES = frozenset(
    {"chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
     "net_bind_service", "sys_chroot", "audit_write", "setfcap"}
)  # fmt: skip
"""What a root child keeps: a root user's ordinary file and process work (Docker's default
set, less ``mknod`` and ``net_raw``).  Everything else goes, among them ``sys_admin``
(mount, unshare, setns: it would undo the cgroup view), ``sys_ptrace`` (``/proc/<pid>/root``
of the host's processes would lead back to the host's cgroup mounts),
``dac_read_search`` (``open_by_handle_at`` walks out of any mount), ``mknod`` and
``sys_rawio`` (the raw disk), ``sys_module``, ``bpf``, ``perfmon``, ``net_admin``,
``sys_resource`` (rlimits past the hard limit), ``sys_time`` and ``sys_boot``."""


def capability_name(value: str) -> str:
    """``"CAP_NET_RAW"`` / ``"net_raw"`` -> ``"net_raw"``; ValueError for an unknown name."""
    name = value.strip().lower().removeprefix("cap_")
    if name not in CAPABILITIES:
        raise ValueError(f"{value!r} is not a Linux capability (e.g. net_raw, sys_ptrace)")
    return name


@functools.cache  # the kernel's own constant: read once, not at every spawn
def _last_capability() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return max(CAPABILITIES.values())


def dropped_capabilities(keep: Iterable[str] = ()) -> list[int]:
    """The capability numbers a root child's bounding set loses (every one this kernel has
    but :data:`KEPT_CAPABILITIES` and ``keep``)."""
    kept = {CAPABILITIES[name] for name in (*KEPT_CAPABILITIES, *keep)}
    return [number for number in range(_last_capability() + 1) if number not in kept]


def is_root() -> bool:
    """Whether this supervisor is root with the machine's powers (``CAP_SYS_ADMIN``): then its
    child must be made not to be.  A root supervisor that is itself a run's child (a root
    child: its bounding set has no ``CAP_SYS_ADMIN``) can neither make the namespaces and
    mounts of a root child's view nor needs to: it starts its children as a non-root one does."""
    return os.geteuid() == 0 and has_sys_admin()


_CAP_SYS_ADMIN = 21


@functools.cache
def has_sys_admin() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


# -- the cgroup view --------------------------------------------------------------------------


_parsed: tuple[str, tuple[tuple[str, str, str], ...]] | None = None
"""The last table :func:`_mounts` parsed, and what it found in it."""


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, file-system type, super options) of every cgroup mount, as seen here
    (the table read again only when it changed, and parsed again only then)."""
    global _parsed
    try:
        text = mount_table()
    except OSError:
        return []
    parsed = _parsed
    if parsed is not None and parsed[0] is text:
        return list(parsed[1])
    found: dict[str, tuple[str, str, str]] = {}
    for line in text.splitlines():
        if " - cgroup" not in line:  # the file-system type follows " - ": skip the rest cheaply
            continue
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found[fields[4]] = (fields[4], tail[0], tail[2])
    mounts = tuple(found.values())
    _parsed = (text, mounts)
    return list(mounts)


@functools.cache
def _controller_names() -> frozenset[str]:
    try:
        text = Path("/proc/cgroups").read_text()
    except OSError:
        return frozenset()
    return frozenset(line.split()[0] for line in text.splitlines() if line and not line.startswith("#"))


READ_ONLY = ("/sys", "/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
"""Read-only in a root child's mount namespace (as a container runtime mounts them): a root
user writes the kernel's settings there (``kernel.core_pattern`` runs a program as the
host's root; ``/sys/kernel/uevent_helper`` too)."""


PRIVATE_SHM = "/dev/shm"
"""A tmpfs of the run's own in a root child's mount namespace (POSIX shared memory lives there)."""


def view_steps(groups: Sequence[Path] | None) -> list[str]:
    """The shim's ``view=`` steps: each cgroup mount shows the run's own group (a fresh mount
    made in its cgroup namespace) where ``groups`` (the groups it enters) has one in that
    hierarchy, and is hidden otherwise (``groups`` None: process-tree, hide them all).
    First, :data:`READ_ONLY` goes read-only (the fresh cgroup mounts stay writable: the
    child may make groups below its own).  Last, :data:`PRIVATE_SHM` is a tmpfs of the run's
    own: what it leaves in shared memory goes with its mount namespace (docs/limits.md).

    With no groups (every process-tree spawn as root) the steps depend on the mounts only:
    the last ones are reused while the mounts are the same."""
    global _hidden_view
    mounts = _mounts()
    hidden = _hidden_view
    if groups is None and hidden is not None and hidden[0] == mounts:
        return list(hidden[1])
    steps = [f"ro={path}" for path in READ_ONLY]
    # as strings: pathlib's ``parents`` builds a path per ancestor, per mount and group (the
    # cgroup mode's largest share of a run's parent CPU); both sides are normalised first
    entered = [str(group) for group in groups] if groups is not None else None
    for point, kind, options in mounts:
        top = os.path.normpath(point)  # as ``Path`` would have it, without building one
        inside = entered is not None and any(_at_or_below(group, top) for group in entered)
        if not inside:
            steps.append(f"view=hide::{point}")
        elif kind == "cgroup2":
            steps.append(f"view=cgroup2::{point}")
        else:
            names = _controller_names()
            chosen = [o for o in options.split(",") if o in names or o.startswith("name=")]
            steps.append(f"view=cgroup:{','.join(chosen)}:{point}")
    steps.append(f"shm={PRIVATE_SHM}")
    if groups is None:
        _hidden_view = (mounts, tuple(steps))
    return steps


_hidden_view: tuple[list[tuple[str, str, str]], tuple[str, ...]] | None = None
"""The mounts :func:`view_steps` last hid them all for, and the steps it gave."""


def _at_or_below(path: str, top: str) -> bool:
    """Whether normalised ``path`` is ``top`` or below it (``Path(top) in Path(path).parents``)."""
    return path == top or path.startswith(top if top.endswith("/") else top + "/")


def shim_python() -> str:
    return sys.executable or shutil.which("python3") or "python3"


@functools.cache
def shim_file() -> str:
    """The shim's compiled file where it is current (made now if it can be), else its source.

    A script given to the interpreter is compiled at every start (~2-4 ms for the shim),
    a ``.pyc`` is not; this process checks once that the ``.pyc`` was compiled from the
    source as it is now (the header's magic, mtime and size), so a stale one never runs.
    """
    cached = Path(importlib.util.cache_from_source(str(SHIM)))
    try:
        source = SHIM.stat()
        if not _current(cached, source):
            py_compile.compile(str(SHIM), cfile=str(cached), doraise=True)
        if _current(cached, source):
            return str(cached)
    except (OSError, py_compile.PyCompileError):
        pass
    return str(SHIM)


def _current(cached: Path, source: os.stat_result) -> bool:
    try:
        with open(cached, "rb") as f:
            header = f.read(16)
    except OSError:
        return False
    flags = int.from_bytes(header[4:8], "little")
    return (
        header[:4] == importlib.util.MAGIC_NUMBER
        and flags == 0
        and int.from_bytes(header[8:12], "little") == int(source.st_mtime) & 0xFFFFFFFF
        and int.from_bytes(header[12:16], "little") == source.st_size & 0xFFFFFFFF
    )


def shim_command(steps: Sequence[str], argv: Sequence[str]) -> list[str]:
    """The argv that runs the shim's ``steps`` and then ``argv``: the compiled shim where this
    process has one (checked now), else the Python one."""
    compiled = compiled_shim()
    if compiled is not None:
        return [compiled, *steps, "--", *argv]
    return [shim_python(), "-I", "-S", shim_file(), *steps, "--", *argv]


def root_steps(keep: Iterable[str]) -> list[str]:
    return [_drop_step(frozenset(keep))] if is_root() else []


@functools.lru_cache(maxsize=64)
def _drop_step(keep: frozenset[str]) -> str:
    """The shim's ``drop=`` step for ``keep``: the same for every spawn that keeps the same
    names (the kernel's last capability is read once), so built once per set."""
    return f"drop={','.join(str(n) for n in dropped_capabilities(keep))}"


def confinement_lines() -> list[str]:
    """``subagents doctor``: what this host can do for ``confine`` and a root child."""
    support = landlock_support()
    if support.enforceable:
        scoped = "signals and abstract sockets scoped" if scopes(support.abi or 0) else "no scoping"
        line = f"confine: available ({support.reason}; {scoped})"
    else:
        line = f"confine: unavailable ({support.reason})"
    lines = [line]
    if is_root():
        kept = ", ".join(sorted(KEPT_CAPABILITIES))
        lines.append(f"root child: capabilities bounded to {kept}; cgroup view of its own group")
    return lines
