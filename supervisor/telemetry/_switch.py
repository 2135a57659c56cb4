"""Telemetry switch: OpenTelemetry when enabled, nothing at all (not even an import) when not.

Theory of operation
-------------------
Telemetry is off unless one of three things turns it on:

* a ``subagents`` command calls :func:`configure_from_cli` with ``--otel`` given, or
  with the standard ``OTEL_TRACES_EXPORTER`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``
  environment set: an SDK tracer provider with a batch processor is built for the
  command and flushed by :func:`shutdown`;
* an embedder calls :func:`use` with a tracer provider of its own (never installed
  globally by this package).

While off, every run gets :data:`NOOP`, whose hooks cost one method call each and
import nothing; the OpenTelemetry packages are imported only by ``_otel`` once
telemetry is turned on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from machines import TransitionSink
from supervisor._errors import ConfigurationError
from supervisor._public import home
from supervisor.telemetry._facts import RunFacts

if TYPE_CHECKING:
    from supervisor._errors import TeardownFailed
    from supervisor._seam import SubagentResult

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
MISSING_EXTRA = "--otel needs the otel extra: pip install 'subagent-supervisor[otel]'"


class RunTelemetry(Protocol):
    """What a run calls; the no-op and the span implementation share it."""

    def sink(self, downstream: TransitionSink | None) -> TransitionSink | None:
        """The audit sink: span events first, then ``downstream``."""
        ...

    def begin(self, run: RunFacts) -> None:
        """Open the run's span (in the caller's context, so it nests under an active span)."""
        ...

    def child_env(self, env: dict[str, str], *, explicit: Mapping[str, str | None]) -> dict[str, str]:
        """``env`` plus ``TRACEPARENT`` of the run's span (an explicit config entry wins)."""
        ...

    def start_failed(self, run: RunFacts, error: BaseException) -> None:
        """End the span of a run whose start raised."""
        ...

    def next_turn(self, run: RunFacts, previous: SubagentResult | None) -> None:
        """A conversation's next turn begins (``run.turn`` is its number): end the span of
        the turn that settled with ``previous``, open the next turn's."""
        ...

    def end(
        self, run: RunFacts, result: SubagentResult | None, teardown_error: TeardownFailed | None
    ) -> None:
        """End the span of a disposed run."""
        ...


class _NoopRunTelemetry:
    def sink(self, downstream: TransitionSink | None) -> TransitionSink | None:
        return downstream

    def begin(self, run: RunFacts) -> None:
        pass

    def child_env(self, env: dict[str, str], *, explicit: Mapping[str, str | None]) -> dict[str, str]:
        return env

    def start_failed(self, run: RunFacts, error: BaseException) -> None:
        pass

    def next_turn(self, run: RunFacts, previous: SubagentResult | None) -> None:
        pass

    def end(
        self, run: RunFacts, result: SubagentResult | None, teardown_error: TeardownFailed | None
    ) -> None:
        pass


NOOP: RunTelemetry = _NoopRunTelemetry()


class _State:
    """The process-wide switch: the tracer runs use, and the provider we own (if any)."""

    tracer: Any = None  # opentelemetry.trace.Tracer once enabled
    owned_provider: Any = None  # an SDK TracerProvider built by configure_from_cli
    flush_timeout: float = 0.0  # the whole flush at shutdown waits at most this (seconds)
    attached: object = None  # the context token of an inherited TRACEPARENT


_state = _State()


def enabled() -> bool:
    """Whether runs started now get a span."""
    return _state.tracer is not None


def for_run() -> RunTelemetry:
    """The telemetry of a run created now: a span recorder, or :data:`NOOP`."""
    if _state.tracer is None:
        return NOOP
    from supervisor.telemetry import _otel

    return _otel.RunSpan(_state.tracer)


def use(tracer_provider: Any) -> None:
    """Give runs a tracer from ``tracer_provider`` (an embedder's); ``None`` turns telemetry off.

    The provider is used as given, never installed as the global one.  An embedder that
    already set a global provider passes ``opentelemetry.trace.get_tracer_provider()``.
    """
    if tracer_provider is None:
        _state.tracer = None
        return
    from supervisor.telemetry import _otel

    _state.tracer = _otel.tracer_from(tracer_provider)


def wanted_by_environment(environ: Mapping[str, str]) -> bool:
    """Whether the standard OpenTelemetry environment asks for traces."""
    return bool(environ.get("OTEL_TRACES_EXPORTER", "").strip()) or any(
        environ.get(name, "").strip() for name in ENDPOINT_VARIABLES
    )


def configure_from_cli(enabled: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    """Turn telemetry on for a ``subagents`` command; return whether it is on.

    On with ``enabled`` (the ``--otel`` flag) or the standard environment; off when
    ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``.  Exporters:
    ``otlp`` (the default, OTLP over HTTP/protobuf, configured by the standard
    ``OTEL_EXPORTER_OTLP_*`` variables) and ``console`` (on stderr).  A W3C
    ``TRACEPARENT`` in the environment becomes the parent of everything the command
    traces.  Call :func:`shutdown` before the command exits to flush the spans.

    Raises :class:`ConfigurationError` when ``--otel`` is given without the ``otel``
    extra, or when the exporter named is not supported.  Without ``--otel``, a missing
    extra just leaves telemetry off: the variables may be meant for other tools.
    """
    env = os.environ if environ is None else environ
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or exporters == ["none"]:
        return False
    if not (enabled or wanted_by_environment(env)):
        return False
    try:
        from supervisor.telemetry import _otel
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("opentelemetry"):
            raise
        if enabled:
            raise ConfigurationError(MISSING_EXTRA) from None
        return False
    provider = _otel.sdk_provider(exporters or ["otlp"], env)
    shutdown()
    _state.owned_provider = provider
    _state.flush_timeout = _otel.export_timeout(env)
    _state.tracer = _otel.tracer_from(provider)
    _state.attached = _otel.attach_traceparent(env)
    return True


def shutdown() -> None:
    """Flush and close the provider :func:`configure_from_cli` built; telemetry is then off.

    The whole flush is bounded by the export timeout (a collector that answers slowly, or
    a byte at a time, delays the command's exit by at most that); spans not exported by
    then are dropped.  An embedder's provider (:func:`use`) is left alone: the embedder
    owns it.
    """
    provider, _state.owned_provider = _state.owned_provider, None
    if provider is None:
        return
    _state.tracer = None
    from supervisor.telemetry import _otel

    _otel.detach(_state.attached)
    _state.attached = None
    _otel.shutdown_within(provider, _state.flush_timeout)


@contextmanager
def span(name: str) -> Iterator[None]:
    """A parent span (``subagents batch``, an MCP call) that runs started inside nest under.

    A no-op when telemetry is off.  An exception leaving the block marks the span as an
    error with ``error.type`` set to the exception's class name, never its message.
    """
    if _state.tracer is None:
        yield
        return
    from supervisor.telemetry import _otel

    with _otel.parent_span(_state.tracer, name):
        yield


def inject() -> dict[str, str]:
    """The current trace context as W3C headers (``traceparent``), to continue it elsewhere.

    Empty when telemetry is off.  A Ray driver sends this with each task; the worker
    continues the trace with :func:`attached`.
    """
    if _state.tracer is None:
        return {}
    from supervisor.telemetry import _otel

    return _otel.inject()


@contextmanager
def attached(carrier: Mapping[str, str]) -> Iterator[None]:
    """Make the trace context in ``carrier`` (from :func:`inject`) current for the block."""
    if _state.tracer is None or not carrier:
        yield
        return
    from supervisor.telemetry import _otel

    token = _otel.attach_carrier(carrier)
    try:
        yield
    finally:
        _otel.detach(token)


@contextmanager
def continued(carrier: Mapping[str, str]) -> Iterator[None]:
    """Continue a caller's trace (W3C ``traceparent``/``tracestate`` in ``carrier``: an MCP
    request's ``params._meta``) for the block, unless a recording span is current already
    (a span the MCP SDK opened for the request under that same caller, when an embedder
    installed a global tracer provider).  A no-op when telemetry is off or the carrier
    holds no valid context."""
    if _state.tracer is None or not carrier.get("traceparent"):
        yield
        return
    from supervisor.telemetry import _otel

    if _otel.recording():
        yield
        return
    with attached(carrier):
        yield


home("supervisor.telemetry", attached, configure_from_cli, enabled, inject, shutdown, span, use)
