"""The OpenTelemetry side of telemetry: imported only once telemetry is turned on.

One turn of a run is one span ``invoke_agent <provider name>`` of kind CLIENT (the
GenAI conventions' kind for an agent invoked outside the caller's process); a one-shot
run is one turn.  The first turn's span opens when the run starts; a conversation's
next turn ends it and opens its own (in the context current at the send, so a turn
nests under whatever span its caller has open); the last turn's span ends once the run
is disposed, or once its start failed and was rolled back, so it carries the teardown
and the process facts.  Every span of a run shares ``gen_ai.conversation.id``: the run
id, never the child's session id.  Every audit transition (lifecycle and teardown
ladder) is an event of the span open at the time, named for the transition's event.
Only closed facts go in: names, ids, the stop reason, the usage numbers, the turn's
final tool-call counts by closed kind and permission requests by decision, the failure
line's category, the process outcome.  Never the task, the output or anything the
child wrote.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from machines import CommonEvent, Transition, TransitionSink
from supervisor._errors import ConfigurationError, StartAborted, StartFailed, TeardownFailed
from supervisor._seam import StopReason, SubagentResult
from supervisor._version import package_version
from supervisor.common._clean import clean_text
from supervisor.telemetry._facts import RunFacts, transition_attributes

INSTRUMENTATION_NAME = "subagent-supervisor"
OPERATION = "invoke_agent"
TRACE_VARIABLES = ("TRACEPARENT", "TRACESTATE")

# Attribute names (documented in the README's Telemetry section).
OPERATION_NAME = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
PROVIDER_NAME = "gen_ai.provider.name"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TURN = "subagent.turn"
KIND = "subagent.kind"
STOP_REASON = "subagent.stop_reason"
CONTAINMENT = "subagent.containment"
QUIESCENT = "subagent.quiescent"
EXIT_CODE = "process.exit.code"
EXIT_SIGNAL = "subagent.exit.signal"
ERROR_TYPE = "error.type"
RESOURCES = "subagent.resources."  # + cpu_s, memory_peak_bytes, pids_peak
TOOL_CALLS = "subagent.tool_calls."  # + a closed tool kind: the turn's final count
PERMISSIONS = "subagent.permissions."  # + allowed, denied
WORKSPACE = "subagent.workspace."  # + path, base, head, changed, files_changed, insertions, deletions, kept

CONTAINMENTS = frozenset({"cgroup", "process-tree"})
_PROPAGATOR = TraceContextTextMapPropagator()
EXPORT_TIMEOUT_SECONDS = 3.0


class RunSpan:
    """The span of one run (see the module docstring)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._span: trace.Span | None = None
        self._ended = False
        self._turn_ended_ns: int | None = None  # when the open span's turn went idle

    def sink(self, downstream: TransitionSink | None) -> TransitionSink:
        def record(entry: Transition) -> None:
            if self._span is not None and not self._ended:
                now = time.time_ns()
                self._span.add_event(entry.event, transition_attributes(entry), timestamp=now)
                if entry.event == CommonEvent.TURN_ENDED:
                    self._turn_ended_ns = now
            if downstream is not None:
                downstream(entry)

        return record

    def begin(self, run: RunFacts) -> None:
        if self._span is None:
            self._span = self._start(run)

    def _start(self, run: RunFacts) -> trace.Span:
        """The span of the run's current turn, in the current context."""
        name = clean_text(run.provider_name)  # an embedder's name; OTLP must encode it as UTF-8
        self._ended = False
        self._turn_ended_ns = None
        return self._tracer.start_span(
            f"{OPERATION} {name}",
            kind=SpanKind.CLIENT,
            attributes={
                OPERATION_NAME: OPERATION,
                PROVIDER_NAME: clean_text(run.gen_ai_provider),
                AGENT_NAME: name,
                AGENT_ID: run.id,
                CONVERSATION_ID: run.id,
                KIND: run.kind,
                TURN: run.turn,
            },
        )

    def next_turn(self, run: RunFacts, previous: SubagentResult | None) -> None:
        span = self._open()
        if span is None:
            return
        self._turn_facts(span, previous, run.failure_category)
        self._progress_facts(span, run)
        # A turn that went idle ends its span then, not at this send: a span's duration is its
        # turn's, never the idle time the parent took to send the next one.
        self._close(span, end_time=self._turn_ended_ns)
        self._span = self._start(run)

    def child_env(self, env: dict[str, str], *, explicit: Mapping[str, str | None]) -> dict[str, str]:
        if self._span is None:
            return env
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(self._span))
        out = dict(env)
        for name in TRACE_VARIABLES:
            if name in explicit:  # explicit configuration always wins
                continue
            out.pop(name, None)  # an inherited context must not pair with ours
            value = carrier.get(name.lower())
            if value:
                out[name] = value
        return out

    def start_failed(self, run: RunFacts, error: BaseException) -> None:
        span = self._open()
        if span is None:
            return
        self._process_facts(span, run)
        if isinstance(error, StartFailed):
            self._fail(span, run.failure_category or "unknown")
        elif isinstance(error, Exception) and not isinstance(error, StartAborted):
            self._fail(span, type(error).__qualname__)
        self._close(span)

    def end(
        self, run: RunFacts, result: SubagentResult | None, teardown_error: TeardownFailed | None
    ) -> None:
        span = self._open()
        if span is None:
            return
        self._process_facts(span, run)
        self._progress_facts(span, run)
        failed = self._turn_facts(span, result, run.failure_category)
        if not failed and teardown_error is not None:
            self._fail(span, run.teardown_category or "unknown")
        self._close(span)

    # -- helpers ---------------------------------------------------------------------------

    def _open(self) -> trace.Span | None:
        return None if self._span is None or self._ended else self._span

    def _close(self, span: trace.Span, end_time: int | None = None) -> None:
        self._ended = True
        span.end(end_time=end_time)

    @classmethod
    def _turn_facts(cls, span: trace.Span, result: SubagentResult | None, category: str | None) -> bool:
        """A settled turn's stop reason, usage and failure on its span; whether it failed."""
        if result is None:
            return False
        span.set_attribute(STOP_REASON, str(result.stop_reason))
        usage = result.usage
        if usage is not None:
            if usage.input_tokens is not None:
                span.set_attribute(INPUT_TOKENS, usage.input_tokens)
            if usage.output_tokens is not None:
                span.set_attribute(OUTPUT_TOKENS, usage.output_tokens)
        error_type = _result_error(result, category)
        if error_type is not None:
            cls._fail(span, error_type)
        return error_type is not None

    @staticmethod
    def _fail(span: trace.Span, error_type: str) -> None:
        span.set_attribute(ERROR_TYPE, error_type)
        span.set_status(Status(StatusCode.ERROR))

    @staticmethod
    def _progress_facts(span: trace.Span, run: RunFacts) -> None:
        """The turn's final progress counts (closed kinds and decisions, numbers)."""
        progress = getattr(run, "progress", None)  # a run built before progress existed has none
        if progress is None:
            return
        for kind, count in progress.tool_calls.items():
            span.set_attribute(TOOL_CALLS + kind, count)
        for decision, count in progress.permissions.items():
            span.set_attribute(PERMISSIONS + decision, count)

    @staticmethod
    def _process_facts(span: trace.Span, run: RunFacts) -> None:
        containment = getattr(run, "containment", None)
        containment = getattr(containment, "value", containment)
        if isinstance(containment, str) and containment in CONTAINMENTS:
            span.set_attribute(CONTAINMENT, containment)
        if run.quiescent is not None:
            span.set_attribute(QUIESCENT, run.quiescent)
        facts = run.exit_facts
        if facts is not None:
            if facts.exit_code is not None:
                span.set_attribute(EXIT_CODE, facts.exit_code)
            if facts.signal is not None:
                span.set_attribute(EXIT_SIGNAL, facts.signal)
        resources = run.resources
        if resources is not None:
            for name, value in resources.model_dump().items():
                if value is not None:
                    span.set_attribute(RESOURCES + name, value)
        workspace = getattr(run, "workspace", None)
        if workspace is not None:  # the supervisor's own path, commit ids and counts
            for name, value in workspace.model_dump().items():
                span.set_attribute(WORKSPACE + name, value)


def _result_error(result: SubagentResult | None, category: str | None) -> str | None:
    """``error.type`` for a settled result, or None when it is not a failure.

    A failure is what a job settles as ``failed``: anything but ``completed`` and an
    ``aborted`` without a diagnostic (a cancellation).  Its type is the failure line's
    category, else the stop reason itself (a refusal, a token limit).
    """
    if result is None or result.stop_reason == StopReason.COMPLETED:
        return None
    if result.stop_reason == StopReason.ABORTED and result.diagnostic is None:
        return None
    return category or str(result.stop_reason)


# -- process-wide set-up ---------------------------------------------------------------------


def tracer_from(provider: Any) -> trace.Tracer:
    tracer: trace.Tracer = provider.get_tracer(INSTRUMENTATION_NAME, package_version())
    return tracer


def export_timeout(env: Mapping[str, str]) -> float:
    """Seconds one export may take: the standard variables (read as the exporter reads
    them), else :data:`EXPORT_TIMEOUT_SECONDS`.  The flush at exit is bounded by it too."""
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        raw = env.get(variable, "").strip()
        if raw:
            try:
                value = float(raw)
            except ValueError:
                continue
            if value > 0 and value != float("inf"):
                return value
    return EXPORT_TIMEOUT_SECONDS


def shutdown_within(provider: Any, seconds: float) -> bool:
    """Flush and shut ``provider`` down, waiting at most ``seconds`` in all; True if it finished.

    The SDK bounds each read of an export by the timeout, not the export, and waits up to
    30 s for its worker at shutdown: a collector that trickles its answer a byte at a
    time holds the exit for that long.  So the shutdown runs in a daemon thread and the
    command waits for it at most the export timeout; an export still running then is
    abandoned (the thread dies with the process).
    """
    done = threading.Event()

    def shut() -> None:
        try:
            provider.shutdown()
        finally:
            done.set()

    threading.Thread(target=shut, name="subagents-otel-shutdown", daemon=True).start()
    return done.wait(seconds)


def sdk_provider(exporters: list[str], env: Mapping[str, str]) -> Any:
    """An SDK tracer provider exporting with ``exporters`` through batch processors.

    It is not shut down at interpreter exit by the SDK (that shutdown is unbounded): the
    command calls :func:`shutdown_within`."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(variable, "").strip()
        if protocol and protocol != "http/protobuf":
            raise ConfigurationError(f"{variable}: only http/protobuf is supported")
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(
        resource=Resource.create({} if named else {SERVICE_NAME: "subagents"}), shutdown_on_exit=False
    )
    for name in dict.fromkeys(exporters):
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            timeout_set = any(
                env.get(v) for v in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
            )
            # An unreachable collector delays the command's exit by at most this (the standard is 10 s).
            exporter = OTLPSpanExporter() if timeout_set else OTLPSpanExporter(timeout=EXPORT_TIMEOUT_SECONDS)
        elif name == "console":
            exporter = ConsoleSpanExporter(out=sys.stderr)
        else:
            raise ConfigurationError(
                f"OTEL_TRACES_EXPORTER: unsupported exporter {name!r} (supported: otlp, console, none)"
            )
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def attach_traceparent(env: Mapping[str, str]) -> object:
    """Make a W3C ``TRACEPARENT`` from the environment the current parent; a detach token."""
    parent = env.get("TRACEPARENT", "").strip()
    if not parent:
        return None
    carrier = {"traceparent": parent, "tracestate": env.get("TRACESTATE", "")}
    return attach_carrier(carrier)


def attach_carrier(carrier: Mapping[str, str]) -> object:
    extracted = _PROPAGATOR.extract(dict(carrier))
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return otel_context.attach(extracted)


def detach(token: object) -> None:
    if token is not None:
        otel_context.detach(token)  # type: ignore[arg-type]


def recording() -> bool:
    """Whether the current span records (a real span, not the API's no-op one)."""
    return trace.get_current_span().is_recording()


def inject() -> dict[str, str]:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


@contextmanager
def parent_span(tracer: trace.Tracer, name: str) -> Iterator[None]:
    """A current INTERNAL span; a failure records the exception's class name, never its text."""
    span = tracer.start_span(name, kind=SpanKind.INTERNAL)
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    except Exception as exc:
        span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
        span.set_status(Status(StatusCode.ERROR))
        raise
    finally:
        otel_context.detach(token)
        span.end()
