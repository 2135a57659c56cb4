"""The child's environment: the parent's, scrubbed of credentials, then explicit entries on top."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping

from supervisor._public import home

SENSITIVE_NAME = re.compile(r"KEY|PASSWORD|SECRET|TOKEN", re.IGNORECASE)
RUN_TAG_VARIABLE = "SUBAGENT_SUPERVISOR_RUN"
# ``<pid>:<start time>`` of the supervising process, set on every child at spawn.
HOST_TAG_VARIABLE = "SUBAGENT_SUPERVISOR_HOST"


def is_scrubbed(name: str) -> bool:
    """Ambient names never forwarded: credential-shaped ones and ``DSH_*``."""
    return bool(SENSITIVE_NAME.search(name)) or name.upper().startswith("DSH_")


@functools.lru_cache(maxsize=4096)
def _scrubbed(name: str) -> bool:
    """:func:`is_scrubbed`, remembered: every spawn asks it of every ambient name (a regex
    search each, about half of building a child's environment)."""
    return is_scrubbed(name)


def child_environment(
    explicit: Mapping[str, str | None],
    *,
    remove: Iterable[str] = (),
    run_tag: str,
    ambient: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Scrubbed ambient env, minus ``remove``, plus ``explicit`` (None deletes), plus the run tag.

    Explicit entries always win, credential-shaped or not: a child's own credentials
    come only from explicit configuration.  The run tag is set last so descendants can
    be attributed to their run even after they leave the process group.
    """
    removed = frozenset(remove)
    if ambient is None:
        env = _scrubbed_ambient(removed)
    else:
        env = {k: v for k, v in ambient.items() if not _scrubbed(k) and k not in removed}
    for name, value in explicit.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env[RUN_TAG_VARIABLE] = run_tag
    return env


# (``os.environ``'s raw content, the names removed, what was kept) of the last spawn.
_ambient: tuple[dict[bytes, bytes], frozenset[str], dict[str, str]] | None = None


def _scrubbed_ambient(removed: frozenset[str]) -> dict[str, str]:
    """``os.environ`` less the scrubbed and the ``removed`` names, as a new dict.

    Every spawn asks, and ``os.environ`` decodes each name and value as it is read (about
    20 us for 35 variables, several times that inside a run): while its raw content (a
    comparison of two dicts of bytes) and ``removed`` are those of the last spawn, that
    spawn's answer is copied instead.  Any change to ``os.environ`` (a set, a delete, a
    patch) changes the raw content, so it is read again."""
    global _ambient
    raw = getattr(os.environ, "_data", None)  # CPython's bytes store behind ``os.environ``
    memo = _ambient
    if memo is not None and memo[1] == removed and memo[0] == raw:
        return dict(memo[2])
    env = {k: v for k, v in os.environ.items() if not _scrubbed(k) and k not in removed}
    if isinstance(raw, dict):
        _ambient = (dict(raw), removed, env)
    return dict(env)


home("supervisor.provider", child_environment)
