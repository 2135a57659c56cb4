"""Batches: many supervised runs, at most N at once, one record per finished run.

The unit of work is one :class:`BatchJob` (an item already checked: its provider and
request), and :func:`run_job` turns it into one :class:`BatchRecord` through the one
start -> result -> dispose sequence every front-end shares (:func:`~supervisor.supervise`).
The same function runs in this process (:func:`batch` without ``ray``) and inside a Ray
task on a worker node, so both modes produce the same record under the same containment.

A run that a batch-wide abort cancelled is not finished: it yields no record (so a
resumed batch runs it again) and is only counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from pydantic import BaseModel, ConfigDict, ValidationError

from supervisor._abort import AbortSignal
from supervisor._handle import Run
from supervisor._kinds import example_config, example_kind
from supervisor._public import home
from supervisor._registry import Provider, Registry, require_asyncio
from supervisor._seam import StopReason, SubagentRequest
from supervisor._sequence import supervise
from supervisor.process import CwdError, check_directory


class BatchItem(BaseModel):
    """One input line: ``{"id", "task", "provider"?, "cwd"?}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: str
    task: str
    provider: str | None = None
    cwd: str | None = None


class BatchRecord(BaseModel):
    """The record of one finished run (``started`` false: the start failed)."""

    model_config = ConfigDict(frozen=True)

    id: str
    run_id: str
    provider: str
    stop_reason: str | None
    output: str
    diagnostic: str | None
    exit_code: int | None
    signal: str | None
    quiescent: bool
    containment: str
    started: bool
    duration_s: float
    node: str
    ray_node: str | None = None  # the Ray node id, in Ray mode only

    @property
    def completed(self) -> bool:
        return self.stop_reason == StopReason.COMPLETED

    def as_dict(self) -> dict[str, Any]:
        document = self.model_dump()
        if self.ray_node is None:
            del document["ray_node"]
        return document


class BatchError(BaseModel):
    """An item that could not run: ``{"id", "error"}`` (the id is ``line N`` when unknown)."""

    model_config = ConfigDict(frozen=True)

    id: str
    error: str

    @property
    def completed(self) -> bool:
        return False

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


Outcome = BatchRecord | BatchError


def to_json(outcome: Outcome) -> str:
    """One output line (without the newline)."""
    return json.dumps(outcome.as_dict(), ensure_ascii=False)


@dataclass(frozen=True)
class BatchJob:
    """An item ready to run: its provider and request.  Picklable (it travels to Ray tasks)."""

    id: str
    provider: Provider
    request: SubagentRequest
    trace: dict[str, str] = field(default_factory=dict)
    """The driver's trace context (W3C headers) for a Ray task to continue; empty when off."""


@dataclass
class BatchEvents:
    """Observers a caller may set (progress): a run started, a run was cancelled.

    ``live`` holds the runs of this process in flight (a second Ctrl-C force-kills them).
    """

    started: Callable[[str], None] = lambda _id: None
    cancelled: Callable[[str], None] = lambda _id: None
    live: set[Run] = field(default_factory=set)


# -- items -----------------------------------------------------------------------------


class Resolver:
    """Checks items and turns them into jobs: unique ids, a known provider, a usable cwd.

    A relative ``cwd`` is resolved against ``base_dir`` (the CLI passes the input file's
    directory).  The item's ``cwd`` becomes the request's ``parent_cwd``: the run's
    workspace unless the provider's own config sets ``cwd``.  Without one, the runs get
    ``default_cwd``.
    """

    def __init__(self, registry: Registry, *, base_dir: Path, default_cwd: Path) -> None:
        names = registry.list()
        if not names:
            raise ValueError("the registry has no provider")
        self._registry = registry
        self._default = names[0]
        self._base_dir = base_dir
        self._default_cwd = default_cwd
        self._seen: set[str] = set()

    def parse_line(self, line: str, number: int) -> BatchJob | BatchError:
        """A JSONL line (``number`` is 1-based) as a job or an error record."""
        try:
            document = json.loads(line)
        except ValueError:
            return BatchError(id=f"line {number}", error="not valid JSON")
        return self.resolve(document, number)

    def resolve(self, item: BatchItem | Mapping[str, Any], number: int) -> BatchJob | BatchError:
        fallback_id = f"line {number}"
        if isinstance(item, Mapping):
            raw_id = item.get("id")
            if isinstance(raw_id, str) and raw_id:
                fallback_id = raw_id
            try:
                item = BatchItem.model_validate(dict(item))
            except ValidationError as exc:
                return BatchError(id=fallback_id, error=_describe(exc))
        elif not isinstance(item, BatchItem):
            return BatchError(id=fallback_id, error="not a JSON object")
        if not item.id:
            return BatchError(id=fallback_id, error="id: must be a non-empty string")
        if item.id in self._seen:
            return BatchError(id=item.id, error="id: duplicate id")
        self._seen.add(item.id)
        if not item.task.strip():
            return BatchError(id=item.id, error="task: the task is blank")
        name = item.provider or self._default
        if name not in self._registry.list():
            have = ", ".join(self._registry.list())
            return BatchError(id=item.id, error=f"provider: no provider named {name!r} (have: {have})")
        cwd = self._default_cwd
        if item.cwd is not None:
            candidate = Path(item.cwd).expanduser()
            candidate = Path(os.path.normpath(self._base_dir / candidate))
            try:
                cwd = check_directory(candidate, "cwd")
            except CwdError as exc:
                return BatchError(id=item.id, error=str(exc))
        return BatchJob(
            id=item.id,
            provider=self._registry.get(name),
            request=SubagentRequest(task=item.task, parent_cwd=cwd),
        )


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(item)"
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif error["type"] == "missing":
            message = "required key is missing"
        elif error["type"] == "model_type":
            message = "not a JSON object"
        else:
            message = "must be a string"
        problems.append(f"{key}: {message}" if key != "(item)" else message)
    return "; ".join(problems)


# -- one run ---------------------------------------------------------------------------


async def run_job(
    job: BatchJob, abort: AbortSignal, *, ray_node: str | None = None, live: set[Run] | None = None
) -> BatchRecord | None:
    """Start, settle and dispose one run (:func:`~supervisor.supervise`); None when ``abort``
    cancelled it before it finished.

    A cancellation of the caller's scope is a local cancellation of the run: its tree is
    taken down (shielded) before the cancellation goes on.
    """
    run = job.provider.create_run(job.request)
    live = live if live is not None else set()
    began = time.monotonic()
    live.add(run)
    try:
        outcome = await supervise(run, abort)
    finally:
        live.discard(run)
    if outcome.cancelled and abort.aborted:
        return None
    exit_facts = run.exit_facts
    return BatchRecord(
        id=job.id,
        run_id=run.id,
        provider=job.provider.name,
        stop_reason=outcome.stop_reason if outcome.started else None,
        output=outcome.output,
        diagnostic=outcome.diagnostic,
        exit_code=None if exit_facts is None else exit_facts.exit_code,
        signal=None if exit_facts is None else exit_facts.signal,
        quiescent=outcome.quiescent,
        containment=run.containment,
        started=outcome.started,
        duration_s=round(time.monotonic() - began, 3),
        node=socket.gethostname(),
        ray_node=ray_node,
    )


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


Item = BatchItem | Mapping[str, Any] | str


def jobs_from(items: Iterable[Item], resolver: Resolver) -> Iterator[BatchJob | BatchError]:
    """Items as jobs; a ``str`` item is a JSONL line (blank lines are skipped, but counted)."""
    for number, item in enumerate(items, start=1):
        if isinstance(item, str):
            if item.strip():
                yield resolver.parse_line(item, number)
        else:
            yield resolver.resolve(item, number)


async def batch(
    items: Iterable[Item],
    *,
    registry: Registry | None = None,
    concurrency: int | None = None,
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

    ``items`` are :class:`BatchItem`, mappings of the same keys or JSONL lines; a bad one yields a
    :class:`BatchError` and the batch goes on.  ``registry`` holds the providers an item
    names (default: the first; without a registry, the built-in example agent).
    ``concurrency`` bounds the runs at once in this process (default: CPU count);
    ``ray`` (``"auto"`` or an address) runs each item as a Ray task instead, admitted by
    ``ray_num_cpus``.  Aborting ``abort`` cancels every running run (each is torn down
    before the iterator ends) and starts nothing more; cancelled runs yield nothing.
    Ids in ``skip`` are passed over (resuming).  A caller that stops iterating early should
    close the iterator (``contextlib.aclosing``): closing it cancels and disposes the runs
    still in flight.  An item's relative ``cwd`` is resolved
    against ``base_dir``; an item without one runs in ``cwd`` (both default to the
    current directory).
    """
    require_asyncio()
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
    local = _local(source, width, abort, events)
    async with contextlib.aclosing(local):  # type: ignore[type-var]
        async for outcome in local:
            yield outcome


async def _local(
    source: _Source, width: int, abort: AbortSignal, events: BatchEvents
) -> AsyncIterator[Outcome]:
    send, receive = anyio.create_memory_object_stream[Outcome](max_buffer_size=width)

    async def worker(out: anyio.abc.ObjectSendStream[Outcome]) -> None:
        async with out:
            while (item := source.next()) is not None:
                if isinstance(item, BatchError):
                    await out.send(item)
                    continue
                events.started(item.id)
                record = await run_job(item, abort, live=events.live)
                if record is None:
                    events.cancelled(item.id)
                else:
                    await out.send(record)

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


home("supervisor", BatchItem, BatchRecord, BatchError, batch)
