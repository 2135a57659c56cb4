"""A supervising host for the cold-resume tests: a conversation's turns, then wait or exit.

Usage: ``resume_host.py SPEC_JSON``.  The spec names a provider kind and its config keys,
the workspace, the first task and optionally a session plan and more tasks::

    {"kind": "acp", "config": {...}, "cwd": "/abs", "task": "turn 1", "sends": ["turn 2"],
     "session": {"run_id": ..., "resume": ..., "turns_before": 1, "keep": true}, "end": "hang"}

It runs the conversation through the public API (``Registry.run(..., conversation=True,
session=...)``) and, after each turn, prints one JSON line on stdout: ``{"run_id",
"agent_session_id", "turn", "keeper", "child", "output", "stop_reason"}``.  With ``"end":
"hang"`` it then waits forever, so the test can SIGKILL it (and the keeper ends its run,
as when a host dies); with ``"exit"`` it leaves the run's ``async with`` and exits 0.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

from supervisor import Registry, SessionPlan, SubagentRequest, SubagentResult
from supervisor._kinds import create_provider, kind
from supervisor.process import keeper_pid


def line(run: Any, result: SubagentResult | None) -> None:
    facts = {
        "run_id": run.id,
        "agent_session_id": run.agent_session_id,
        "turn": run.turn,
        "keeper": keeper_pid(),
        "child": None if run.process is None else run.process.pid,
        "output": None if result is None else result.output,
        "stop_reason": None if result is None else str(result.stop_reason),
    }
    sys.stdout.write(json.dumps(facts) + "\n")
    sys.stdout.flush()


async def main(spec: dict[str, Any]) -> None:
    config = kind(spec["kind"]).config.model_validate(spec["config"])
    registry = Registry()
    registry.register(create_provider(spec["kind"], config))
    plan = SessionPlan(**spec["session"]) if spec.get("session") else None
    request = SubagentRequest(task=spec["task"], parent_cwd=spec["cwd"])
    async with registry.run(spec["kind"], request, conversation=True, session=plan) as run:
        line(run, None if plan is not None and plan.resume is not None else await run.result())
        for task in spec.get("sends", []):
            line(run, await run.send(task))
        if spec.get("end", "exit") == "hang":
            await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, json.loads(sys.argv[1]), backend="asyncio")
