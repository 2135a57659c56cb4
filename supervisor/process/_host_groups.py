"""This process's host groups: the parent of every run's leaf in each hierarchy, and
the host ceiling set on them."""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from supervisor.process._limit_files import memory_files, pids_file, write_file
from supervisor.process._limit_support import Hierarchy
from supervisor.process._limit_values import MEMORY, NO_LIMITS, PIDS, Limits, refused


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
                raise refused(exc, path) from exc
            atexit.register(_remove_quietly, path)
            enable = " ".join(f"+{c}" for c in v2_controllers)
            if hierarchy.version == 2 and enable:
                write_file(path / "cgroup.subtree_control", enable)
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
            memory_files(path, hierarchy.version, ceiling.memory_max)
        if PIDS in hierarchy.controllers and (clear or ceiling.pids_max is not None):
            pids_file(path, ceiling.pids_max)

    def groups(self) -> list[Path]:
        with self._lock:
            return list(self._groups)

    def forget(self) -> None:
        """A forked child is another host: it makes groups of its own."""
        self._lock = threading.Lock()
        self._groups = {}


HOST_GROUPS = HostGroups()
os.register_at_fork(after_in_child=HOST_GROUPS.forget)
