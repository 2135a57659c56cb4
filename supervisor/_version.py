"""The one package-version lookup (``--version``, handshakes' ``clientInfo``, the MCP
server's ``serverInfo``, the tracer's instrumentation version, ``doctor``).

This distribution's own version is written here, once (``pyproject.toml`` reads it as its
dynamic version), so ``subagents --version`` needs no ``importlib.metadata`` (tens of ms
of imports); other distributions' versions are looked up in their metadata.
"""

from __future__ import annotations

__version__ = "0.4.0"

DISTRIBUTION = "subagent-supervisor"
UNKNOWN = "0.0.0"
"""What :func:`distribution_version` callers report for a distribution that is not installed."""


def distribution_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def package_version() -> str:
    """This distribution's version."""
    return __version__
