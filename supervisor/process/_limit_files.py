"""The cgroup files a run's limits are written to and its counters read from.

* v2: ``memory.max``, ``memory.swap.max`` (0: a memory limit is not stretched by
  swap), ``memory.oom.group`` (1: an out-of-memory kill takes the whole leaf),
  ``pids.max``, ``cpu.max``; read back ``cpu.stat`` (``usage_usec``, present in every
  v2 group), ``memory.peak``, ``pids.peak``, ``memory.events`` (``oom_kill``),
  ``pids.events.local`` (``max``: forks refused in the leaf).
* v1: ``memory.limit_in_bytes`` and, with swap accounting, ``memory.memsw.limit_in_bytes``;
  ``pids.max``; ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``; read back
  ``memory.max_usage_in_bytes``, ``memory.oom_control`` (``oom_kill``), ``pids.peak``,
  ``pids.events`` (``max``: forks refused in the leaf, whichever limit refused them).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from supervisor.process._keeper_main import read_bytes
from supervisor.process._limit_values import CPU_PERIOD_US, refused


def read_text(path: Path) -> str:
    """A cgroup or ``/proc`` file's whole text; raises ``OSError``.

    Unbuffered reads into bytes, decoded once: a text-mode ``open`` builds a buffered reader
    and a decoder for a file of a few dozen bytes (8 us against 3 us per read here, and a
    run reads about ten of them)."""
    return read_bytes(str(path)).decode(errors="replace")


def read_file(path: Path) -> str | None:
    try:
        return read_text(path)
    except OSError:
        return None


def write_file(path: Path, value: str) -> None:
    """Write one cgroup file; a refusal is a :class:`LimitRefused` naming the file."""
    try:
        path.write_text(value)
    except OSError as exc:
        raise refused(exc, path) from exc


def memory_files(group: Path, version: int, size: int | None) -> None:
    """A memory limit (None: lift it) and, where swap is accounted, the same limit on swap."""
    if version == 2:
        write_file(group / "memory.max", "max" if size is None else str(size))
        if (group / "memory.swap.max").exists():
            write_file(group / "memory.swap.max", "max" if size is None else "0")
        return
    value = "-1" if size is None else str(size)
    memsw = group / "memory.memsw.limit_in_bytes"
    if memsw.exists() and size is None:  # raise memory+swap first: it may never be below memory
        write_file(memsw, value)
    write_file(group / "memory.limit_in_bytes", value)
    if memsw.exists() and size is not None:
        write_file(memsw, value)


def pids_file(group: Path, count: int | None) -> None:
    write_file(group / "pids.max", "max" if count is None else str(count))


def cpu_files(group: Path, version: int, cpus: float) -> None:
    quota = max(1000, round(cpus * CPU_PERIOD_US))
    if version == 2:
        write_file(group / "cpu.max", f"{quota} {CPU_PERIOD_US}")
    else:
        write_file(group / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        write_file(group / "cpu.cfs_quota_us", str(quota))


def stat_value(path: Path, key: str) -> int | None:
    """``key``'s number in a flat keyed file (``cpu.stat``, ``memory.events``), or None."""
    for line in (read_file(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            with contextlib.suppress(ValueError):
                return int(value)
    return None


def subtree(group: Path, below: str = "") -> list[Path]:
    """``group`` and every group below it, deepest first ([] if ``group`` is gone).

    A cgroup directory's link count is 2 plus its subdirectories (cgroup file systems keep
    it so, in v1 and v2), so a group with none is not listed, and one whose only subdirectory
    is the ``below`` the run made is not either: listing a group reads every one of its
    files' names (dozens per group), a ``stat`` reads one number.  Any other count (more
    groups, or a file system that does not count them: 1) lists it.
    """
    try:
        links = os.stat(group).st_nlink
    except OSError:
        return []
    if links == 2:
        return [group]
    if links == 3 and below:
        only = group / below
        with contextlib.suppress(OSError):
            if os.stat(only).st_nlink == 2:
                return [only, group]
    found: list[Path] = []
    try:
        with os.scandir(group) as entries:
            subdirectories = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return [group]
    for directory in subdirectories:
        found += subtree(directory)
    return [*found, group]


def remove_group(group: Path, below: str = "") -> bool:
    """Remove ``group`` and the group ``below`` it (if any): True once it is gone.  False when
    it will not go that way (more groups below it, or members): walk :func:`subtree` then.
    Two ``rmdir`` calls where a walk would first ``stat`` each group."""
    try:
        if below:
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(group / below)
        os.rmdir(group)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def subtree_sum(group: Path, name: str, key: str, below: str = "") -> int:
    """``key`` of ``name`` summed over ``group`` and the groups below it.

    cgroup v1 counts an out-of-memory kill in the victim's own group and a refused fork
    in the forking one (neither is passed up): a root child sits in a group below its
    run's leaf (``below``), and a nested supervisor makes more."""
    return sum(stat_value(directory / name, key) or 0 for directory in subtree(group, below))


def read_number(path: Path) -> int | None:
    text = (read_file(path) or "").strip()
    if text.isascii() and text.isdigit():
        return int(text)
    return None
