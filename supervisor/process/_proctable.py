"""One shared read of the process table, for every run of the fallback mode.

With the child subreaper on, the read walks only this process's descendants (every
orphan of a run comes back to us, so nothing of a run can be elsewhere); without it,
it reads all of ``/proc`` (an escaped daemon is then a child of PID 1).

Reading all of ``/proc`` costs time proportional to the machine's process count, so
it is done at most once at a time, in a worker thread (the event loop never blocks
on it), and every run that asks while a read is under way is served by the *next*
read: an answer always comes from a read that started after the question, so it is
an observation taken after whatever the asker did just before (a signal, an exit).

Environments are read once per process (keyed by pid and start time), not once per
read: the run tag a process was born with is remembered even after it clears its
environment or is re-read as a zombie.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from supervisor.process._env import RUN_TAG_VARIABLE
from supervisor.process._fresh import FreshReads
from supervisor.process._keeper_main import read_bytes

_TAG_PREFIX = RUN_TAG_VARIABLE.encode() + b"="
# Listings of /proc per read at most (a machine forking without pause never settles).
_MAX_LISTINGS = 50


@dataclass(frozen=True, slots=True)
class Entry:
    pid: int
    ppid: int
    pgrp: int
    sid: int
    state: str
    start: int
    tag: str | None

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")


@dataclass(slots=True)
class Table:
    """One observation of the process table, indexed for attribution."""

    entries: dict[int, Entry] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    by_tag: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    by_group: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))

    def same(self, pid: int, start: int) -> bool:
        entry = self.entries.get(pid)
        return entry is not None and entry.start == start


def _stat(pid: int) -> Entry | None:
    try:
        raw = read_bytes(f"/proc/{pid}/stat")
    except OSError:
        return None
    try:
        fields = raw[raw.rindex(b")") + 2 :].split()
        return Entry(
            pid=pid,
            state=fields[0].decode(),
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            sid=int(fields[3]),
            start=int(fields[19]),
            tag=None,
        )
    except (ValueError, IndexError):
        return None


def _tag(pid: int) -> str | None:
    try:
        raw = read_bytes(f"/proc/{pid}/environ")
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(_TAG_PREFIX):
            return item[len(_TAG_PREFIX) :].decode(errors="replace")
    return None


def _pids() -> set[int]:
    try:
        return {int(name) for name in os.listdir("/proc") if name.isdigit()}
    except OSError:
        return set()


def read_table(tags: dict[tuple[int, int], str | None]) -> Table:
    """Read ``/proc`` once.  ``tags`` is the per-process tag memory, updated in place.

    The read is complete as of its last directory listing: ``/proc`` is listed again
    after the entries are read, and the new pids are read too, until a listing shows
    nothing new.  So every process alive at that moment is in the table, and a chain
    that forks a successor and exits cannot slip between the listing and the reads.
    """
    table = Table()
    seen: set[tuple[int, int]] = set()
    listed: set[int] = set()
    todo = _pids()
    for _ in range(_MAX_LISTINGS):
        if not todo:
            break
        listed |= todo
        for pid in sorted(todo):
            entry = _stat(pid)
            if entry is not None:
                _add(table, entry, tags, seen)
        todo = _pids() - listed
    for key in [k for k in tags if k not in seen]:
        del tags[key]
    return table


def _add(
    table: Table, entry: Entry, tags: dict[tuple[int, int], str | None], seen: set[tuple[int, int]]
) -> None:
    key = (entry.pid, entry.start)
    seen.add(key)
    if key not in tags:
        tags[key] = None if entry.zombie else _tag(entry.pid)
    tag = tags[key]
    if tag is not None:
        entry = Entry(entry.pid, entry.ppid, entry.pgrp, entry.sid, entry.state, entry.start, tag)
        table.by_tag[tag].append(entry.pid)
    table.entries[entry.pid] = entry
    table.children[entry.ppid].append(entry.pid)
    table.by_group[entry.sid].append(entry.pid)
    if entry.pgrp != entry.sid:
        table.by_group[entry.pgrp].append(entry.pid)


def _has_children_files() -> bool:
    """Whether this kernel lists a thread's children (``CONFIG_PROC_CHILDREN``).

    Without it every children file is missing, a walk of our descendants would find none,
    and a run would look gone while its processes live: the whole table is read instead."""
    me = os.getpid()
    return os.path.exists(f"/proc/{me}/task/{me}/children")


CHILDREN_FILES = _has_children_files()


def children_of(pid: int) -> list[int]:
    """The children of ``pid`` (of every thread), or [] if it is gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            found += [int(word) for word in read_bytes(f"/proc/{pid}/task/{tid}/children").split()]
        except (OSError, ValueError):
            continue
    return found


def settled_walk(roots: Callable[[], list[int]], walks: int = _MAX_LISTINGS) -> Iterator[int]:
    """Each process in the trees below ``roots()``, once, walking again (with ``roots``
    listed again) until a walk finds nothing the previous ones had not: a process
    re-parented during a walk (to a root, or to a walked process that is itself a
    subreaper) is found by the next one.  At most ``walks`` walks."""
    yielded: set[int] = set()
    for _ in range(walks):
        before = len(yielded)
        stack = roots()
        walked: set[int] = set()
        while stack:
            pid = stack.pop()
            if pid in walked:
                continue
            walked.add(pid)
            if pid not in yielded:
                yielded.add(pid)
                yield pid
            stack += children_of(pid)
        if len(yielded) == before:
            return


def own_children() -> list[int]:
    """This process's children, of every thread (one listing and a file per thread)."""
    return children_of(os.getpid())


def read_descendants(tags: dict[tuple[int, int], str | None]) -> Table:
    """Read only this process's descendants (cost: their number, not the machine's).

    Complete only while this process is the child subreaper: then every orphan of a
    descendant is re-parented to a descendant or to us, never out of the tree (and
    :func:`settled_walk` finds one re-parented during a walk).
    """
    table = Table()
    seen: set[tuple[int, int]] = set()
    me = os.getpid()
    for pid in settled_walk(lambda: children_of(me)):
        entry = _stat(pid)
        if entry is not None:
            _add(table, entry, tags, seen)
    for key in [k for k in tags if k not in seen]:
        del tags[key]
    return table


class SharedTable:
    """Fresh observations of the process table, shared by every caller of one moment."""

    def __init__(self) -> None:
        self._tags: dict[tuple[int, int], str | None] = {}
        self._reads = FreshReads(self._read, Table())
        # Whether a walk of our own descendants sees everything (the subreaper is on).
        self.descendants_only: Callable[[], bool] = lambda: False

    def _read(self) -> Table:
        read = read_descendants if CHILDREN_FILES and self.descendants_only() else read_table
        return read(self._tags)

    async def fresh(self) -> Table:
        """A table from a read that started after this call (possibly shared with others)."""
        return await self._reads.fresh()


TABLE = SharedTable()
