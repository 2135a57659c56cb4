"""Load as a correctness test: 50 concurrent runs of the built-in example agent.

No timing is asserted.  Every run completes with its own answer, every run is disposed
to quiescence (no process on the machine carries any of the run tags afterwards), and
the parent holds exactly as many file descriptors as before.  All 50 are held published
at once (each waits for the others before leaving its block), so the test really has 50
children alive together.  The timed version with 200 runs and the 2,000-run soak is
``benchmarks/bench_load.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from supervisor import Registry, StopReason, SubagentRequest, SubagentResult
from supervisor.providers.acp import Provider, example_agent_config
from tests.conftest import internals
from tests.support.reliability import assert_audit_consistent, assert_quiescent, tagged

pytestmark = pytest.mark.anyio

RUNS = 50


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_fifty_concurrent_example_runs(tmp_path: Path) -> None:
    registry = Registry()
    registry.register(Provider(example_agent_config(stderr="log")))
    async with registry.run("acp", SubagentRequest(task="warm up", parent_cwd=tmp_path)) as run:
        await run.result()  # imports and first-use allocations happen before the baseline
    fds_before = open_fds()
    results: dict[int, SubagentResult] = {}
    runs = []
    all_settled = anyio.Event()
    alive_together: list[int] = []

    async def one(i: int) -> None:
        request = SubagentRequest(task=f"task number {i}", parent_cwd=tmp_path)
        async with registry.run("acp", request) as run:
            runs.append(run)
            results[i] = await run.result()
            if len(results) == RUNS:
                alive_together.append(
                    sum(
                        1
                        for r in runs
                        if internals(r).process is not None and internals(r).exit_facts is None
                    )
                )
                all_settled.set()
            await all_settled.wait()

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for i in range(RUNS):
                tg.start_soon(one, i)

    assert results == {
        i: SubagentResult(output=f"Hello! You asked: task number {i}", stop_reason=StopReason.COMPLETED)
        for i in range(RUNS)
    }
    assert alive_together == [RUNS]  # every child was alive at once
    assert len({run.id for run in runs}) == RUNS
    for run in runs:
        assert_quiescent(run)
        assert_audit_consistent(run)
        assert run.exit_facts is not None
        assert run.exit_facts.exit_code == 0  # each left at stdin EOF: no signal was needed
    assert [p for run in runs for p in tagged(run.id)] == []
    assert open_fds() == fds_before
