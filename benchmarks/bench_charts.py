"""What the charts cost a run.  Run: ``python -m benchmarks.bench_charts [cgroup|process-tree] [N]``.

1. Micro: building the ACP lifecycle chart and the teardown ladder (with an audit trail, as a
   run does), and one transition, in CPU microseconds.
2. In a whole run: parent CPU per example-agent run with python-statemachine's engine, and
   with every ``send`` replaced by a table lookup (an ablation, here only: it shows the
   engine's share of a run), interleaved in one process, ``BENCH_ROUNDS`` rounds (default 4)
   of 40 serial runs, or 100 runs ``N`` at once.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from statemachine import StateChart
from statemachine.exceptions import TransitionNotAllowed

from benchmarks.profile_runs import runs
from machines import AuditTrail, CommonEvent, TeardownLadder
from machines.acp import AcpEvent, AcpLifecycle
from supervisor.process import ContainmentMode

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "4"))
HAPPY = (
    AcpEvent.INITIALIZE_ANSWERED,
    AcpEvent.SESSION_CREATED,
    AcpEvent.STOP_REASON_RECEIVED,
    CommonEvent.DISPOSE_REQUESTED,
    CommonEvent.TREE_GONE,
)


def cpu_us(action: Callable[[], object], times: int = 500) -> float:
    for _ in range(20):
        action()
    started = time.process_time()
    for _ in range(times):
        action()
    return (time.process_time() - started) / times * 1e6


def micro() -> None:
    build = cpu_us(lambda: AcpLifecycle(listeners=[AuditTrail("run")]))
    ladder = cpu_us(lambda: TeardownLadder(listeners=[AuditTrail("run")]))
    machines = iter([AcpLifecycle(listeners=[AuditTrail("run")]) for _ in range(520)])

    def five() -> None:
        machine = next(machines)
        for event in HAPPY:
            machine.send(event)

    send = cpu_us(five) / len(HAPPY)
    print(f"build the ACP lifecycle chart   {build:8.0f} us")
    print(f"build the teardown ladder       {ladder:8.0f} us")
    print(f"one transition (send)           {send:8.0f} us  (a run sends 7)")


_engine_send = StateChart.send


def _table_send(self: Any, event: Any, *args: Any, **kwargs: Any) -> None:
    """The ablation: the transition found by a lookup, the relay told, no engine."""
    (state,) = self.configuration
    for transition in state.transitions:
        if transition.match(str(event)):
            self.current_state_value = transition.target.value
            self._transition_happened(str(event), state, transition.target)
            return
    raise TransitionNotAllowed(event, self.configuration)


def in_a_run(mode: ContainmentMode, concurrent: int) -> None:
    count = 40 if concurrent == 1 else 100
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        anyio.run(runs, 5, mode, cwd, 1, backend="asyncio")
        engine: list[float] = []
        lookup: list[float] = []
        try:
            for index in range(ROUNDS):
                for ablated in (False, True) if index % 2 else (True, False):
                    StateChart.send = _table_send if ablated else _engine_send  # type: ignore[method-assign]
                    taken = anyio.run(runs, count, mode, cwd, concurrent, backend="asyncio")
                    (lookup if ablated else engine).append(taken)
        finally:
            StateChart.send = _engine_send  # type: ignore[method-assign]
    with_engine, without = statistics.median(engine) * 1000, statistics.median(lookup) * 1000
    print(
        f"{mode.value}, N = {concurrent}: parent CPU per run {with_engine:.2f} ms with the engine, ", end=""
    )
    print(
        f"{without:.2f} ms with sends as a lookup: the engine is {(with_engine - without) / with_engine:.0%}"
    )


def main(argv: list[str]) -> None:
    mode = ContainmentMode(argv[1]) if len(argv) > 1 else ContainmentMode.PROCESS_TREE
    concurrent = int(argv[2]) if len(argv) > 2 else 1
    print("load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    micro()
    in_a_run(mode, concurrent)
    print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main(sys.argv)
