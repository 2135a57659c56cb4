"""Where a warm claude-agent-acp child's first prompt spends more than a conversation's
second turn: the on-CPU time of each process, interleaved in one run (run: python -m
benchmarks.bench_warm_cpu).

Each round times a run on a warm child (from entering ``Registry.run`` to the first
answer) and a conversation's second turn (``send`` to result, on a child whose first
turn just ended), as ``bench_warm`` does, and reads, around each, the time every thread
of the adapter (``node dist/index.js``) and of its Claude Code CLI spent on a CPU
(``/proc/<pid>/task/<tid>/schedstat``, nanoseconds).  CPU time hardly moves with the
machine's load, where wall time does: it says which process does more work on a first
prompt, and how much.  What is neither process's CPU is the parent's, the pipes', the
mock's and waiting (the wall figure minus both).

``BENCH_TRACE=1`` also loads a small module into the adapter (``NODE_OPTIONS=--import``;
its SDK drops ``NODE_OPTIONS`` for the CLI) that writes the wall-clock time of every ACP
line in and out and every line to and from its CLI, and splits each turn at them: the
parent's side, the adapter's, the CLI's (to its model request, and from it to its
result).  The real adapter and CLI answer from the tests' mock model server on 127.0.0.1
(``npm ci`` in tests/).  ``BENCH_ROUNDS`` (default 10).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import psutil

from benchmarks.bench_conversation import TASK
from benchmarks.bench_warm import claude_agent_acp_registry
from supervisor import Registry, SubagentRequest

TRACER = """\
import { appendFileSync } from "node:fs";
import cp from "node:child_process";
import { syncBuiltinESMExports } from "node:module";
const out = process.env.BENCH_TRACE_FILE;
const log = (what, chunk) => {
  const now = (performance.timeOrigin + performance.now()) / 1000;
  for (const line of String(chunk).split("\\n")) {
    if (line) appendFileSync(out, `${now.toFixed(6)} ${what} ${line.slice(0, 120)}\\n`);
  }
};
const push = process.stdin.push.bind(process.stdin);
process.stdin.push = (chunk, ...rest) => { if (chunk) log("acp<", chunk); return push(chunk, ...rest); };
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, ...rest) => { log("acp>", chunk); return write(chunk, ...rest); };
const spawn = cp.spawn;
cp.spawn = function (...args) {
  const child = spawn.apply(this, args);
  const toCli = child.stdin.write.bind(child.stdin);
  child.stdin.write = (chunk, ...rest) => { log("cli<", chunk); return toCli(chunk, ...rest); };
  const fromCli = child.stdout.push.bind(child.stdout);
  child.stdout.push = (chunk, ...rest) => { if (chunk) log("cli>", chunk); return fromCli(chunk, ...rest); };
  return child;
};
syncBuiltinESMExports();
"""

# (name, the trace line that ends it: its direction and a piece of its text)
MARKS = (
    ("adapter reads the prompt", "acp<", '"session/prompt"'),
    ("adapter writes the user message to its CLI", "cli<", '"type":"user"'),
    ("CLI says it is running", "cli>", '"state":"running"'),
    ("CLI's result", "cli>", '"type":"result"'),
    ("adapter answers the prompt", "acp>", '"stopReason"'),
)


def _model_requests(server: Any) -> list[float]:
    """The wall-clock times the mock received each model request."""
    offset = time.time() - (time.monotonic() - server._t0)
    return sorted(offset + request.t for request in server.requests)


def _cpu(run_id: str) -> dict[str, float]:
    """Seconds on a CPU so far of every thread of the run's adapter and of its CLI."""
    spent = {"adapter": 0.0, "cli": 0.0}
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("SUBAGENT_SUPERVISOR_RUN") != run_id:
                continue
            # the CLI renames its process ("claude"); the adapter is the script node runs
            kind = "adapter" if any(arg.endswith("index.js") for arg in proc.cmdline()) else "cli"
            for tid in os.listdir(f"/proc/{proc.pid}/task"):
                with open(f"/proc/{proc.pid}/task/{tid}/schedstat", encoding="ascii") as stat:
                    spent[kind] += int(stat.read().split()[0]) / 1e9
        except (psutil.Error, OSError):
            continue
    return spent


def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {kind: after[kind] - before[kind] for kind in before}


def _ready_id(registry: Registry) -> str:
    assert registry._warm is not None
    (slot,) = registry._warm._slots.values()
    return slot.ready[0].id


class Turn:
    """One timed turn: wall seconds, CPU seconds by process, and its span for the trace."""

    def __init__(self, started: float, ended: float, cpu: dict[str, float]) -> None:
        self.started, self.ended, self.cpu = started, ended, cpu


async def _warm_turn(registry: Registry, name: str, cwd: Path) -> Turn:
    await registry.prestart(name, 1, cwd=cwd)  # untimed: a warm child is ready
    run_id = _ready_id(registry)
    before = _cpu(run_id)
    request = SubagentRequest(task=TASK, parent_cwd=cwd)
    started = time.time()
    async with registry.run(name, request) as run:
        result = await run.result()
        ended = time.time()
        after = _cpu(run_id)
    assert result.stop_reason == "completed", result
    assert run.id == run_id, "the run did not take the warm child"
    await registry.prestart(name, 1, cwd=cwd)  # untimed: the refill is ready
    return Turn(started, ended, _spent(before, after))


async def _second_turn(registry: Registry, name: str, cwd: Path) -> Turn:
    async with registry.run(name, SubagentRequest(task=TASK, parent_cwd=cwd), conversation=True) as run:
        first = await run.result()
        assert first.stop_reason == "completed", first
        before = _cpu(run.id)
        started = time.time()
        second = await run.send(TASK)
        ended = time.time()
        after = _cpu(run.id)
    assert second.stop_reason == "completed", second
    return Turn(started, ended, _spent(before, after))


def _trace(path: Path) -> list[tuple[float, str, str]]:
    lines = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stamp, what, text = line.split(" ", 2)
        lines.append((float(stamp), what, text))
    return sorted(lines)


def _split(turn: Turn, trace: list[tuple[float, str, str]], model_times: list[float]) -> dict[str, float]:
    """A turn's steps in seconds: from the parent's start to each mark, then to its result."""
    inside = [entry for entry in trace if turn.started <= entry[0] <= turn.ended]
    steps: dict[str, float] = {}
    last, label = turn.started, "parent's start"
    for name, what, text in MARKS:
        stamp = next((t for t, w, line in inside if w == what and text in line and t >= last), None)
        if stamp is None:
            return {}
        if name == "CLI's result":  # the CLI's model request falls between
            request = next((t for t in model_times if last <= t <= stamp), None)
            if request is not None:
                steps[f"{label} -> CLI's model request"] = request - last
                last, label = request, "CLI's model request"
        steps[f"{label} -> {name}"] = stamp - last
        last, label = stamp, name
    steps[f"{label} -> the parent has the result"] = turn.ended - last
    return steps


def _print(name: str, turns: list[Turn]) -> None:
    wall = statistics.median(t.ended - t.started for t in turns) * 1e3
    adapter = statistics.median(t.cpu["adapter"] for t in turns) * 1e3
    cli = statistics.median(t.cpu["cli"] for t in turns) * 1e3
    print(f"{name:<40} wall {wall:7.1f} ms   CPU: adapter {adapter:6.1f} ms, CLI {cli:6.1f} ms")


async def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "10"))
    tracing = os.environ.get("BENCH_TRACE") == "1"
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        extra: dict[str, str] = {}
        if tracing:
            (folder / "tracer.mjs").write_text(TRACER, encoding="utf-8")
            extra = {
                "NODE_OPTIONS": f"--import={folder / 'tracer.mjs'}",
                "BENCH_TRACE_FILE": str(folder / "trace"),
            }
        plain, cwd, server = claude_agent_acp_registry(stack, extra)
        name = "acp"
        warmed = Registry()  # the same provider: only this registry keeps warm children
        warmed.register(plain.get(name))
        warm: list[Turn] = []
        second: list[Turn] = []
        async with warmed:
            await _warm_turn(warmed, name, cwd)  # warm every path once
            await _second_turn(plain, name, cwd)
            for _ in range(rounds):
                warm.append(await _warm_turn(warmed, name, cwd))
                second.append(await _second_turn(plain, name, cwd))
        load = os.getloadavg()[0]
        print(f"real claude-agent-acp (acp), task {TASK!r}, {rounds} interleaved rounds, load {load:.1f}")
        _print("warm: Registry.run to the first answer", warm)
        _print("conversation: second turn", second)
        if tracing:
            trace = _trace(folder / "trace")
            mock = _model_requests(server)
            for kind, turns in (("warm", warm), ("second turn", second)):
                steps: dict[str, list[float]] = defaultdict(list)
                for turn in turns:
                    for step, seconds in _split(turn, trace, mock).items():
                        steps[step].append(seconds)
                print(f"{kind}, median of each step:")
                for step, values in steps.items():
                    print(f"  {step:<72} {statistics.median(values) * 1e3:7.1f} ms (n={len(values)})")


if __name__ == "__main__":
    anyio.run(main, backend="asyncio")
