"""Telemetry fixtures: an SDK tracer provider with the in-memory exporter, handed to ``use``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from supervisor import telemetry


@dataclass
class Traced:
    """A tracer provider (never installed globally) and what it exported."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def traced() -> Iterator[Traced]:
    """Telemetry on, through ``telemetry.use``, for the test."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use(provider)
    try:
        yield Traced(provider, exporter)
    finally:
        telemetry.use(None)
        provider.shutdown()
