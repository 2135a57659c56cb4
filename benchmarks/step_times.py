"""Where the parent's CPU per run goes, part by part: each part's own steps, timed.

Run: ``python -m benchmarks.step_times [RUNS] [cgroup|process-tree] [N]`` (default 100 runs,
the best containment available, one at a time).

cProfile charges every Python call its own overhead, so code made of many small calls looks
several times dearer than it is.  Here each part of a run (a coroutine or a function of the
list below) is wrapped once: ``time.thread_time`` around each of its steps (a coroutine's
every ``send``), so a part is charged with the CPU its own thread spent in it, what it calls
included, and nothing of the event loop's other work while it waits.  Nested parts are
included in their callers'.  The shared reads of the worker threads (the process table, the
cgroup-namespace census) are timed the same way, in their thread.  Printed: the event loop's
thread and the whole process per run, then each part's CPU and calls per run.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import tempfile
import time
import types
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from typing import Any

import anyio

from benchmarks.profile_runs import runs
from supervisor.process import ContainmentMode

PARTS = (
    "supervisor._registry:Registry.acquire_run",
    "supervisor.run._start:Start.start",
    "supervisor.providers.acp._run:AcpRun.handshake",
    "supervisor.run._base:ProviderRun.spawn_spec",
    "supervisor.process._managed:ManagedProcess.spawn",
    "asyncio.base_events:BaseEventLoop.subprocess_exec",
    "supervisor.process._managed:ManagedProcess._manage",
    "acp:connect_to_agent",
    "acp.client.connection:request_model",
    "supervisor.run._turns:Turns.drive_and_settle",
    "acp.connection:Connection._receive_loop",
    "supervisor.providers.acp._client:UnattendedClient.take_update",
    "supervisor.run._teardown:Teardown.dispose",
    "supervisor.process._managed:ManagedProcess.teardown",
    "supervisor.process._tree:TreeEnclosure.look",
    "supervisor.process._cgroup:CgroupContainment.enclose",
    "supervisor.process._cgroup:CgroupEnclosure.program_running",
    "supervisor.process._cgroup:CgroupEnclosure.limit_hit",
    "supervisor.process._cgroup:CgroupEnclosure.wait_empty",
    "supervisor.process._cgroup:CgroupEnclosure.release",
)

spent: dict[str, float] = defaultdict(float)
calls: Counter[str] = Counter()


@types.coroutine
def _timed(coro: Coroutine[Any, Any, Any], key: str) -> Generator[Any, Any, Any]:
    calls[key] += 1
    value: Any = None
    error: BaseException | None = None
    while True:
        started = time.thread_time()
        try:
            yielded = coro.throw(error) if error is not None else coro.send(value)
        except StopIteration as stop:
            spent[key] += time.thread_time() - started
            return stop.value
        except BaseException:
            spent[key] += time.thread_time() - started
            raise
        spent[key] += time.thread_time() - started
        try:
            value, error = (yield yielded), None
        except BaseException as exc:  # thrown in (a cancellation): pass it on
            value, error = None, exc


def _wrap(key: str, func: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def timed_coroutine(*args: Any, **kwargs: Any) -> Any:
            return await _timed(func(*args, **kwargs), key)

        return timed_coroutine

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        calls[key] += 1
        started = time.thread_time()
        try:
            return func(*args, **kwargs)
        finally:
            spent[key] += time.thread_time() - started

    return timed


def patch(part: str) -> str:
    """Wrap ``module:Owner.name`` (or ``module:name``) in place; its short name."""
    module_name, _, path = part.partition(":")
    owner: Any = importlib.import_module(module_name)
    *outer, name = path.split(".")
    for attribute in outer:
        owner = getattr(owner, attribute)
    raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    kind = type(raw) if isinstance(raw, classmethod | staticmethod) else None
    func = raw.__func__ if kind is not None else raw
    wrapped: Any = _wrap(path, func)
    setattr(owner, name, kind(wrapped) if kind is not None else wrapped)
    return path


def patch_shared_reads() -> list[str]:
    from supervisor.process._escapes import CENSUS
    from supervisor.process._proctable import TABLE

    CENSUS._read = _wrap("the namespace census (worker thread)", CENSUS._read)
    TABLE._reads._read = _wrap("the process-table walk (worker thread)", TABLE._reads._read)
    return ["the namespace census (worker thread)", "the process-table walk (worker thread)"]


def main(argv: list[str]) -> None:
    count = int(argv[1]) if len(argv) > 1 else 100
    mode = ContainmentMode(argv[2]) if len(argv) > 2 else ContainmentMode.AUTO
    concurrent = int(argv[3]) if len(argv) > 3 else 1
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        anyio.run(runs, 5, mode, cwd, backend="asyncio")  # warm-up: imports, schema builds
        names = [patch(part) for part in PARTS] + patch_shared_reads()
        anyio.run(runs, 5, mode, cwd, backend="asyncio")
        spent.clear()
        calls.clear()
        loop, process = time.thread_time(), time.process_time()
        anyio.run(runs, count, mode, cwd, concurrent, backend="asyncio")
        loop, process = time.thread_time() - loop, time.process_time() - process
    print(f"{count} runs ({mode.value}, {concurrent} at once)")
    loop_ms, process_ms = loop / count * 1000, process / count * 1000
    print(f"per run: event loop's thread {loop_ms:.3f} ms, the process {process_ms:.3f} ms")
    for name in names:
        if calls[name]:
            print(f"{spent[name] / count * 1000:8.3f} ms {calls[name] / count:6.2f}x  {name}")


if __name__ == "__main__":
    main(sys.argv)
