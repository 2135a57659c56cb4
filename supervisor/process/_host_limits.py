"""What this host can enforce, and the host ceiling: one limit over all the runs of this
process (a limit that cannot be enforced is a configuration error, never silently unlimited).

Per-run limits alone let N runs overcommit the host together.  The ceiling is set on
this process's *host group* (``subagents-<pid>-<start>``, the parent of every run's
leaf) in the hierarchy that carries the controller, so the kernel enforces it over the
sum of all runs: a run that pushes the sum past it is the one the out-of-memory killer
picks (its whole tree goes; the others keep running), or the one whose fork is refused.
The supervising process is not in the host group, so it is never the victim.

``subagents batch`` and ``subagents mcp`` set it from ``--max-memory`` and
``--max-pids``; an embedder calls :func:`set_host_ceiling` before starting runs.
"""

from __future__ import annotations

import logging
from pathlib import Path

from supervisor._errors import ConfigurationError
from supervisor._public import home
from supervisor.process import (
    HOST_GROUPS,
    CgroupContainment,
    Containment,
    Limits,
    ProcessTreeContainment,
    check_pids,
    detect_containment,
    host_group_name,
    limit_lines,
    limit_support,
    parse_memory,
)
from supervisor.process._keeper import register_groups
from supervisor.process._limit_values import MEMORY, PIDS, LimitRefused

log = logging.getLogger("supervisor")


def set_host_ceiling(
    *, memory_max: int | str | None = None, pids_max: int | None = None, cgroup_root: Path | None = None
) -> None:
    """Put one ceiling over every cgroup-mode run of this process, now and later.

    ``memory_max`` is bytes or a size with a binary unit (``"4G"``); ``pids_max`` counts
    processes and threads; None lifts that ceiling.  ``cgroup_root`` is the v2 group
    runs go under when the providers configure one (default: this process's own).
    Raises :class:`~supervisor.ConfigurationError` when a value is bad or the ceiling
    cannot be enforced here (the text says why, or which file the kernel refused).
    A run in ``process-tree`` containment cannot be under it (the kernel keeps no group
    of it): while a ceiling is set, building one is a :class:`~supervisor.ConfigurationError`
    (:func:`refuse_uncovered`), never a run the ceiling silently does not bound.
    """
    try:
        memory = None if memory_max is None else parse_memory(memory_max)
        if pids_max is not None and (isinstance(pids_max, bool) or not isinstance(pids_max, int)):
            raise ValueError("pids_max: must be an integer")
        pids = None if pids_max is None else check_pids(pids_max)
    except ValueError as exc:
        raise ConfigurationError(f"host ceiling: {exc}") from None
    ceiling = Limits(memory_max=memory, pids_max=pids)
    found = detect_containment(cgroup_root)
    if found.cgroup_base is None:
        if ceiling.controllers:
            raise ConfigurationError(
                f"host ceiling: cannot be enforced: cgroup containment is not available here ({found.reason})"
            )
        return
    support = limit_support(found.cgroup_base)
    for controller, what in ((MEMORY, "memory"), (PIDS, "processes")):
        if controller in ceiling.controllers and controller not in support.where:
            raise ConfigurationError(
                f"host ceiling: the {what} ceiling cannot be enforced here: {support.why_not[controller]}"
            )
    try:
        # The host groups that carry a ceiling are made now, so a refusal is heard now.
        # Only where the ceiling's controllers live: a group in another hierarchy (cgroup v1 cpu)
        # would be under no run's leaf, so the keeper never learnt of it.
        groups = [CgroupContainment(found.cgroup_base).host_group]
        groups += [
            HOST_GROUPS.group(hierarchy, host_group_name())
            for hierarchy in support.v1
            if hierarchy.controllers & {MEMORY, PIDS}
        ]
        HOST_GROUPS.set_ceiling(ceiling)
        log.info("host ceiling %s on %s", ceiling, ", ".join(str(group) for group in groups))
    except LimitRefused as exc:
        raise ConfigurationError(f"host ceiling: {exc.filename} refused ({exc.strerror})") from exc
    register_groups(groups)  # the keeper removes them if this process dies before any run


def uncovered_reason(tree: Containment) -> str | None:
    """Why a run in ``tree`` would escape the host ceiling now set, or None when it would not
    (no ceiling, or a run in a cgroup under the host group)."""
    if not HOST_GROUPS.ceiling.controllers or not isinstance(tree, ProcessTreeContainment):
        return None
    return "the host ceiling cannot be enforced for runs in process-tree containment"


def refuse_uncovered(tree: Containment, provider_name: str) -> None:
    """Raise :class:`~supervisor.ConfigurationError` for a run the host ceiling cannot bound
    (a limit that cannot be enforced is a configuration error, never silently unlimited)."""
    reason = uncovered_reason(tree)
    if reason is not None:
        raise ConfigurationError(f'subagent provider "{provider_name}": {reason}')


def host_limit_lines() -> list[str]:
    """Which limits this host can enforce and how, one line each (``subagents doctor``)."""
    return limit_lines(limit_support(detect_containment().cgroup_base))


home("supervisor", set_host_ceiling)
