"""The real ``codex app-server`` joins our trace: it runs with the ``TRACEPARENT`` of the run's span.

Read from ``/proc/<pid>/environ`` of the live app-server while the run is published:
the environment the child process actually received.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from supervisor import Registry, StopReason, telemetry
from tests.conftest import internals
from tests.mockmodel import MockModelServer, Text
from tests.support.codex import provider, request
from tests.support.peers import PeerLaunch

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]


@contextmanager
def traced() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.use(tracer_provider)
    try:
        yield exporter
    finally:
        telemetry.use(None)
        tracer_provider.shutdown()


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.decode("utf-8", "replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


async def test_the_real_app_server_runs_with_the_traceparent_of_our_span(
    mock: MockModelServer, launch: PeerLaunch
) -> None:
    mock.script(Text("traced"))
    registry = Registry()
    registry.register(provider(launch))
    with traced() as exporter:
        async with registry.run("codex", request(launch.cwd)) as run:
            process = internals(run).process
            assert process is not None
            seen = environ_of(process.pid)  # the live app-server, published, not yet disposed
            result = await run.result()
    assert result.stop_reason == StopReason.COMPLETED
    (span,) = exporter.get_finished_spans()
    assert span.name == "invoke_agent codex"
    context = span.get_span_context()
    assert context is not None
    assert (
        seen["TRACEPARENT"]
        == f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    )
    assert "TRACESTATE" not in seen
    assert dict(span.attributes or {})["subagent.kind"] == "codex"
