"""The one client version every handshake reports (``clientInfo.version``)."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version


@functools.cache
def client_version() -> str:
    """This distribution's version; ``0.0.0`` when it runs from a source tree."""
    try:
        return version("subagent-supervisor")
    except PackageNotFoundError:
        return "0.0.0"
