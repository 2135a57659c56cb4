"""The machine's own cgroup roots, as a test found them: snapshot, compare, restore.

A root child that writes the root of the cgroup v2 hierarchy or of a v1 hierarchy
breaks every later run on the machine (``cgroup.max.descendants`` 0: no group can be
made; a ``release_agent``: a command the kernel runs as the host's root).  A test of
root children takes a :func:`snapshot` before and :func:`check_unchanged` after: a
changed setting is written back and the test fails; a group left at a root by the test
fails it too.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

# Written to act, not to set: reading them says nothing about a setting.
_NOT_SETTINGS = frozenset(
    {"cgroup.procs", "cgroup.threads", "cgroup.kill", "cgroup.event_control", "cgroup.pressure", "tasks",
     "memory.force_empty", "memory.reclaim", "memory.pressure_level"}
)  # fmt: skip


def roots() -> list[Path]:
    """Every cgroup mount's root directory (v2 and each v1 hierarchy), as this process sees them."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        tail = right.split()
        if tail and tail[0] in ("cgroup", "cgroup2"):
            found.append(Path(left.split()[4]))
    return sorted(set(found))


@dataclass(frozen=True)
class RootsSnapshot:
    settings: dict[Path, str]
    groups: dict[Path, frozenset[str]]


def _settings(root: Path) -> dict[Path, str]:
    found = {}
    for entry in root.iterdir():
        if entry.is_dir() or entry.name in _NOT_SETTINGS or entry.name.endswith(".pressure"):
            continue
        if "usage" in entry.name or "failcnt" in entry.name:
            continue  # a counter that a write resets
        if not entry.stat().st_mode & 0o200:
            continue  # read-only: a counter or a list, not a setting
        with contextlib.suppress(OSError):
            found[entry] = entry.read_text()
    return found


def snapshot() -> RootsSnapshot:
    settings: dict[Path, str] = {}
    groups: dict[Path, frozenset[str]] = {}
    for root in roots():
        settings.update(_settings(root))
        groups[root] = frozenset(entry.name for entry in root.iterdir() if entry.is_dir())
    return RootsSnapshot(settings, groups)


def check_unchanged(before: RootsSnapshot) -> list[str]:
    """What changed since ``before`` (settings written back, the test's own groups removed):
    one line each, empty when the roots are as they were.

    Groups that other supervisors on the machine make and remove while the test runs
    (``subagents-<pid>-<start>``) are theirs, not a change of this test's.
    """
    changes = []
    for path, value in before.settings.items():
        with contextlib.suppress(OSError):
            now = path.read_text()
            if now != value:
                changes.append(f"{path}: {value.strip()!r} -> {now.strip()!r}")
                with contextlib.suppress(OSError):
                    path.write_text(value.strip() or "\n")
    for root, names in before.groups.items():
        for entry in root.iterdir():
            if entry.is_dir() and entry.name not in names and not entry.name.startswith("subagents-"):
                changes.append(f"{entry}: a group left at a root")
                with contextlib.suppress(OSError):
                    entry.rmdir()
    return changes
