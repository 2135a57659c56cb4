"""Small helpers: percentiles and a table printer for the benchmark scripts."""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(name: str, values: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    scaled = [v * scale for v in values]
    return (
        f"{name:<48} n={len(values):<4} median={statistics.median(scaled):8.2f}{unit} "
        f"p95={percentile(scaled, 95):8.2f}{unit} max={max(scaled):8.2f}{unit}"
    )
