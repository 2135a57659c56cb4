"""Parent CPU of a whole run with telemetry on against off, interleaved in one process
(run: python -m benchmarks.bench_otel).

A run is the built-in example agent from start to quiescence through ``Registry.run``.
"On" is the SDK's tracer provider with a ``BatchSpanProcessor`` in front of an exporter
that drops the spans (so the figure is the supervisor's and the SDK's cost, not a
network's); each "on" run includes a ``force_flush`` inside its measured window, so the
batch thread's export work is charged to the run that caused it.  CPU is the parent
process's (``time.process_time``: every thread), the child's is not counted.  Runs
alternate off/on, and which goes first flips every pair.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from benchmarks._stats import summary
from supervisor import Registry, SubagentRequest, telemetry
from supervisor.providers.acp import Provider, example_agent_config


class DropExporter(SpanExporter):
    """Accepts and forgets every span."""

    def __init__(self) -> None:
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exported += len(spans)
        return SpanExportResult.SUCCESS


async def one_run(registry: Registry, cwd: Path, provider: TracerProvider | None) -> float:
    telemetry.use(provider)
    started = time.process_time()
    async with registry.run("acp", SubagentRequest(task="hello", parent_cwd=cwd)) as run:
        await run.result()
    if provider is not None:
        provider.force_flush()
    elapsed = time.process_time() - started
    telemetry.use(None)
    return elapsed


async def main() -> None:
    pairs = int(os.environ.get("BENCH_PAIRS", "60"))
    cwd = Path.cwd()
    registry = Registry()
    registry.register(Provider(example_agent_config()))
    exporter = DropExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    for _ in range(3):  # warm both paths (imports, page cache)
        await one_run(registry, cwd, None)
        await one_run(registry, cwd, provider)
    off: list[float] = []
    on: list[float] = []
    for index in range(pairs):
        order = (None, provider) if index % 2 == 0 else (provider, None)
        for choice in order:
            (on if choice is not None else off).append(await one_run(registry, cwd, choice))
    provider.shutdown()
    assert exporter.exported == pairs + 3, exporter.exported
    print(summary("parent CPU per run, telemetry off", off))
    print(summary("parent CPU per run, telemetry on (batch, drop)", on))
    ratio = statistics.median(on) / statistics.median(off)
    total = sum(on) / sum(off)
    print(f"{'ratio of medians (on / off)':<48} {ratio:.3f}")
    print(f"{'ratio of totals (on / off)':<48} {total:.3f}")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
