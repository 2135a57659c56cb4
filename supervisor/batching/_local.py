"""Batches: many supervised runs, at most N at once, one record per finished run.

:func:`batch` is the public entry: items in, records out as runs finish, locally with
bounded concurrency (here) or one Ray task per run (``_ray``, imported only then).  A
run that a batch-wide abort cancelled is not finished: it yields no record (so a
resumed batch runs it again) and is only counted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from supervisor._abort import AbortSignal
from supervisor._errors import SubagentError
from supervisor._kinds import example_config, example_kind
from supervisor._public import home
from supervisor._registry import Registry, require_asyncio
from supervisor.batching._jobs import (
    BatchError,
    BatchEvents,
    BatchItem,
    BatchJob,
    Outcome,
    Resolver,
    run_job,
)
from supervisor.batching._warmer import Warmer
from supervisor.journal import _switch as _journal

# -- the batch -------------------------------------------------------------------------


@dataclass
class _Source:
    """Items handed out one at a time to the workers (lazily: a huge input is never held)."""

    items: Iterator[BatchJob | BatchError]
    abort: AbortSignal
    exhausted: bool = False
    skip: frozenset[str] = field(default_factory=frozenset)

    def next(self) -> BatchJob | BatchError | None:
        while not self.exhausted and not self.abort.aborted:
            item = next(self.items, None)
            if item is None:
                self.exhausted = True
                return None
            if item.id in self.skip:
                continue
            return item
        return None


def default_registry(*, stderr: str = "log") -> Registry:
    """A registry holding the example agent of the first installed kind that ships one
    (the built-in keyless ACP example agent, as ``acp``)."""
    found = example_kind()
    if found is None:
        raise ValueError("no installed provider kind ships an example agent: pass a registry")
    name, kind = found
    registry = Registry()
    registry.register(kind.provider(example_config(kind, stderr=stderr), name))
    return registry


Item = BatchItem | Mapping[str, Any] | str | bytes


def jobs_from(items: Iterable[Item], resolver: Resolver) -> Iterator[BatchJob | BatchError]:
    """Items as jobs; a ``str`` or ``bytes`` item is a JSONL line (blank lines are skipped, but
    counted; a ``bytes`` line that is not UTF-8 is an error record)."""
    for number, item in enumerate(items, start=1):
        if isinstance(item, str | bytes):
            if item.strip():
                yield resolver.parse_line(item, number)
        else:
            yield resolver.resolve(item, number)


async def batch(
    items: Iterable[Item],
    *,
    registry: Registry | None = None,
    concurrency: int | None = None,
    warm: int | None = None,
    ray: str | None = None,
    ray_num_cpus: float = 1,
    retry_lost: bool = False,
    base_dir: Path | None = None,
    cwd: Path | None = None,
    abort: AbortSignal | None = None,
    skip: Iterable[str] = (),
    events: BatchEvents | None = None,
) -> AsyncIterator[Outcome]:
    """Run every item and yield one record per finished run, in the order they finish.

    ``items`` are :class:`BatchItem`, mappings of the same keys or JSONL lines (``str``, or
    ``bytes`` read from a file: one that is not UTF-8 is an error record); a bad one yields a
    :class:`BatchError` and the batch goes on.  ``registry`` holds the providers an item
    names (default: the first; without a registry, the built-in example agent).
    ``concurrency`` bounds the runs at once in this process (default: CPU count);
    ``ray`` (``"auto"`` or an address) runs each item as a Ray task instead, admitted by
    ``ray_num_cpus``.  Aborting ``abort`` cancels every running run (each is torn down
    before the iterator ends) and starts nothing more; cancelled runs yield nothing.
    Ids in ``skip`` are passed over (resuming).  A local batch warms ahead of its queue:
    it keeps ``warm`` (default: ``concurrency``; 0: none) warm children of its first
    provider in ``cwd`` (see
    :class:`~supervisor.batching._warmer.Warmer`), each replaced once its run's first
    turn has settled, until the queue is empty.  A caller that stops iterating early should
    close the iterator (``contextlib.aclosing``): closing it cancels and disposes the runs
    still in flight.  An item's relative ``cwd`` is resolved
    against ``base_dir``; an item without one runs in ``cwd`` (both default to the
    current directory).
    """
    require_asyncio()
    owned = registry is None  # a registry of the batch's own is closed with it
    registry = registry if registry is not None else default_registry()
    here = Path.cwd()
    resolver = Resolver(registry, base_dir=base_dir or here, default_cwd=cwd or here)
    abort = abort if abort is not None else AbortSignal()
    source = _Source(jobs_from(items, resolver), abort, skip=frozenset(skip))
    events = events if events is not None else BatchEvents()
    if ray is not None:
        from supervisor.batching._ray import ray_outcomes

        remote = ray_outcomes(
            source.next, ray, num_cpus=ray_num_cpus, retry_lost=retry_lost, abort=abort, events=events
        )
        async with contextlib.aclosing(remote):  # type: ignore[type-var]  # closed here, in the caller's task, if it stops early
            async for outcome in remote:
                yield outcome
        return
    width = concurrency if concurrency is not None else (os.cpu_count() or 1)
    if width < 1:
        raise ValueError("concurrency must be at least 1")
    if warm is not None and (isinstance(warm, bool) or not isinstance(warm, int) or warm < 0):
        raise ValueError("warm must be a non-negative integer")
    warmer = Warmer(registry, registry.list()[0], cwd or here, width if warm is None else warm)
    try:
        await warmer.begin()
        local = _local(source, width, abort, events, registry, warmer)
        async with contextlib.aclosing(local):  # type: ignore[type-var]
            async for outcome in local:
                yield outcome
    finally:
        with anyio.CancelScope(shield=True):
            await warmer.end()
            if owned:
                await registry.aclose()


async def _local(
    source: _Source, width: int, abort: AbortSignal, events: BatchEvents, registry: Registry, warmer: Warmer
) -> AsyncIterator[Outcome]:
    send, receive = anyio.create_memory_object_stream[Outcome](max_buffer_size=width)

    async def worker(out: anyio.abc.ObjectSendStream[Outcome]) -> None:
        async with out:
            while (item := source.next()) is not None:
                if isinstance(item, BatchError):
                    await out.send(item)
                    continue
                events.started(item.id)
                try:
                    with _journal.using(registry.journal):  # the registry's journal, if it has one
                        record = await run_job(item, abort, live=events.live, registry=registry)
                except SubagentError as exc:  # a run that cannot be built (a broken plug-in, a ceiling)
                    await out.send(BatchError(id=item.id, error=str(exc)))
                    continue
                if record is None:
                    events.cancelled(item.id)
                else:
                    await out.send(record)
            await warmer.end()  # the queue is empty: no more refills

    async with anyio.create_task_group() as tg:
        async with send:
            for _ in range(width):
                tg.start_soon(worker, send.clone())
        async with receive:
            async for outcome in receive:
                try:
                    yield outcome
                except GeneratorExit:  # closed early: cancel the workers (each run is torn down)
                    tg.cancel_scope.cancel()
                    break


home("supervisor", batch)
