"""A cold resume against a new conversation, interleaved in one run
(run: python -m benchmarks.bench_resume [N]).

Each round times, for the built-in example agent, from entering ``Registry.run`` to the
first answer: a new conversation (spawn, handshake, ``session/new``, the first turn); a
cold resume with ``session/resume`` (spawn, handshake, ``session/resume``, published
idle, then one ``send``); and one with ``session/load`` (the same, the session's history
replayed and swallowed).  The resumed session has six turns behind it.  Disposal is
untimed.  The ratios are against the new conversation of the same run.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from benchmarks._stats import summary
from supervisor import Registry, SessionPlan, SubagentRequest
from supervisor.providers.acp import Provider, example_agent_config

TASK = "say hello"
KINDS = ("new", "resume", "load")


def registry(sessions: Path, offer: str) -> Registry:
    env: dict[str, str | None] = {"SUBAGENT_EXAMPLE_SESSIONS": str(sessions), "SUBAGENT_EXAMPLE_OFFER": offer}
    found = Registry()
    found.register(Provider(example_agent_config(env=env)))
    return found


async def timed(registry: Registry, cwd: Path, plan: SessionPlan | None) -> float:
    request = SubagentRequest(task=TASK, parent_cwd=cwd)
    started = time.perf_counter()
    async with registry.run("acp", request, conversation=True, session=plan) as run:
        result = await run.result() if plan is None else await run.send(TASK)
        elapsed = time.perf_counter() - started
    assert result.stop_reason == "completed", result
    return elapsed


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as cwd_dir, tempfile.TemporaryDirectory() as sessions_dir:
        cwd, sessions = Path(cwd_dir), Path(sessions_dir)
        by_offer = {"resume": registry(sessions, "resume,load"), "load": registry(sessions, "load")}
        first = SubagentRequest(task=f"{TASK}\n@usage", parent_cwd=cwd)
        async with by_offer["resume"].run("acp", first, conversation=True) as run:
            await run.result()
            for _ in range(5):
                await run.send(f"{TASK}\n@usage")
            run_id, session_id = run.id, run.agent_session_id
        plan = SessionPlan(run_id=run_id, resume=session_id, turns_before=6)
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for _ in range(rounds):
            times["new"].append(await timed(by_offer["resume"], cwd, None))
            times["resume"].append(await timed(by_offer["resume"], cwd, plan))
            times["load"].append(await timed(by_offer["load"], cwd, plan))
    for kind in KINDS:
        print(summary(f"{kind}: start to first answer", times[kind]))
    base = statistics.median(times["new"])
    for kind in KINDS[1:]:
        print(f"{kind} / new (medians): {statistics.median(times[kind]) / base:.2f}")


if __name__ == "__main__":
    anyio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 20, backend="asyncio")
