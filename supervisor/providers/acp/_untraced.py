"""Importing the ACP SDK with its own spans switched off.

The SDK opens spans of its own whose ``method`` attribute is whatever method name the
child sent; they are switched off whenever the SDK is imported, so child text never
reaches a trace through them, whatever tracer provider the embedding process has.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


def import_acp_untraced() -> ModuleType:
    """Import the ACP SDK with its own spans switched off; return the ``acp`` module.

    The SDK's ``acp.request`` / ``acp.notification`` spans carry the method name the
    child sent, and would reach any global tracer provider.  When OpenTelemetry is not
    loaded yet, the SDK's optional import of it is refused for the moment of the SDK's
    import (so a run without telemetry never loads it); either way the SDK's tracer is
    then switched off.
    """
    if "acp" not in sys.modules:
        refused = [name for name in ("opentelemetry", "logfire") if name not in sys.modules]
        for name in refused:
            sys.modules[name] = None  # type: ignore[assignment]  # makes that import fail
        try:
            importlib.import_module("acp")
        finally:
            for name in refused:
                if sys.modules.get(name, ...) is None:
                    del sys.modules[name]
    # once imported (every run after the first), read from ``sys.modules``: the import
    # system's look-up of a loaded module was most of this function's cost per run
    sdk_telemetry = sys.modules.get("acp.telemetry") or importlib.import_module("acp.telemetry")
    for switch in ("TRACER", "logfire_span"):  # the SDK opens spans only when either is set
        setattr(sdk_telemetry, switch, None)
    return sys.modules.get("acp") or importlib.import_module("acp")
