"""OpenTelemetry traces of supervised runs (extra ``otel``).

Off unless turned on; while off nothing here imports OpenTelemetry.

* Embedders: ``telemetry.use(tracer_provider)`` (your provider, used as given, never
  installed globally); runs started inside one of your active spans nest under it.
* Commands: ``telemetry.configure_from_cli(enabled)`` at start (``--otel`` or the
  standard ``OTEL_*`` environment), ``telemetry.shutdown()`` before exit.
* ``telemetry.span(name)`` opens a parent span (a batch, an MCP call);
  ``telemetry.inject()`` / ``telemetry.attached(carrier)`` carry the trace to another
  process (a Ray worker).
"""

from __future__ import annotations

from supervisor.telemetry._switch import attached as attached
from supervisor.telemetry._switch import configure_from_cli as configure_from_cli
from supervisor.telemetry._switch import enabled as enabled
from supervisor.telemetry._switch import inject as inject
from supervisor.telemetry._switch import shutdown as shutdown
from supervisor.telemetry._switch import span as span
from supervisor.telemetry._switch import use as use

__all__ = ("attached", "configure_from_cli", "enabled", "inject", "shutdown", "span", "use")
