"""``subagents doctor``: what this machine and this install can do, one line per fact.

The lines: the containment available (and why cgroup mode is not), the limits this
host can enforce and how (``supervisor.process._host_limits``), ``confine`` (the Landlock ABI, or
why not) and what a root child keeps, the kernel,
Python, which package the import name ``supervisor`` is, the child subreaper, one
line per installed provider kind (its own readiness check), and a real run of the
example agent.  The status is 0 when that run completed: the base install works here.
No kind is named here: each one answers for itself.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import anyio

import supervisor
from supervisor._kinds import PROVIDERS_GROUP, example_config, example_kind, loaded_kinds
from supervisor._registry import build_run
from supervisor._seam import StopReason, SubagentRequest
from supervisor._version import DISTRIBUTION, package_version
from supervisor.fronts._sequence import supervise
from supervisor.process import confinement_lines, detect_containment
from supervisor.process._host_limits import host_limit_lines

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
EXAMPLE_TIMEOUT_SECONDS = 60.0


def containment_line() -> str:
    found = detect_containment()
    if found.cgroup_base is not None:
        return f"containment: cgroup (run leaves under {found.cgroup_base})"
    return f"containment: process-tree (cgroup unavailable: {found.reason})"


def package_line(package: ModuleType = supervisor) -> str:
    """Which package the import name ``supervisor`` is here.

    supervisord's Python package is imported as ``supervisor`` too: installed into one
    environment, the two share one ``site-packages/supervisor`` directory and overwrite
    each other's files.  This one declares the entry-point group of provider kinds and
    ships no ``supervisord.py``; anything else means the two were mixed.
    """
    where = Path(package.__file__ or "?").parent
    ours = getattr(package, "PROVIDERS_GROUP", None) == PROVIDERS_GROUP
    if not ours or (where / "supervisord.py").exists():
        return (
            f"package: supervisord shares the import name `supervisor` here ({where}); "
            f"it and {DISTRIBUTION} cannot share one environment"
        )
    return f"package: {DISTRIBUTION} {package_version()} (import supervisor: {where})"


def subreaper_line() -> str:
    """Whether ``PR_SET_CHILD_SUBREAPER`` takes (set, read back, restored)."""
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        before = ctypes.c_int(0)
        if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0) != 0:
            return "subreaper: unavailable (prctl refused)"
        if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return "subreaper: unavailable (prctl refused)"
        after = ctypes.c_int(0)
        prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(after), 0, 0, 0)
        prctl(_PR_SET_CHILD_SUBREAPER, before.value, 0, 0, 0)
    except (OSError, AttributeError):
        return "subreaper: unavailable (no prctl)"
    return "subreaper: available" if after.value == 1 else "subreaper: unavailable (not kept)"


def provider_lines() -> list[str]:
    """``provider <kind>: found|missing (<detail>)``, one line per installed kind, in order."""
    lines = []
    for name, kind in loaded_kinds():
        if kind is None:
            lines.append(f"provider {name}: missing (its module could not be imported)")
            continue
        if kind.ready is None:
            lines.append(f"provider {name}: installed (the kind has no readiness check)")
            continue
        try:
            readiness = kind.ready()
        except Exception as exc:
            lines.append(f"provider {name}: missing (its readiness check failed: {type(exc).__name__})")
            continue
        lines.append(f"provider {name}: {'found' if readiness.ok else 'missing'} ({readiness.detail})")
    return lines


async def _run_example() -> str | None:
    found = example_kind()
    if found is None:
        return None
    name, kind = found
    provider = kind.provider(example_config(kind, stderr="discard"), name)
    run = build_run(provider, SubagentRequest(task="doctor", parent_cwd=Path.cwd()))
    with anyio.move_on_after(EXAMPLE_TIMEOUT_SECONDS):
        return (await supervise(run)).stop_reason
    return None


def example_line() -> tuple[str, bool]:
    if example_kind() is None:
        return "example agent: none (no installed kind ships one)", False
    stop = anyio.run(_run_example, backend="asyncio")
    if stop == StopReason.COMPLETED:
        return "example agent: ran (completed)", True
    return f"example agent: did not complete ({stop or 'no result'})", False


def doctor(write: Callable[[str], object]) -> int:
    """Print the facts through ``write``; 0 when the example agent ran to completion."""
    write(containment_line())
    for line in host_limit_lines():
        write(line)
    for line in confinement_lines():
        write(line)
    write(f"kernel: {platform.system()} {os.uname().release}")
    write(f"python: {platform.python_version()} ({sys.executable})")
    write(package_line())
    write(subreaper_line())
    for line in provider_lines():
        write(line)
    line, ok = example_line()
    write(line)
    return 0 if ok else 1
