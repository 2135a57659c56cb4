"""The one package-version lookup (``--version``, handshakes' ``clientInfo``, the MCP
server's ``serverInfo``, the tracer's instrumentation version, ``doctor``)."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "subagent-supervisor"
UNKNOWN = "0.0.0"
"""What a source tree that was never installed reports."""


def distribution_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None when it is not installed."""
    try:
        return version(name)
    except PackageNotFoundError:
        return None


@functools.cache
def package_version() -> str:
    """This distribution's version (``0.0.0`` when it runs from a source tree)."""
    return distribution_version(DISTRIBUTION) or UNKNOWN
