"""What a batch is made of: items, records, and one run from an item to its record.

A :class:`BatchJob` is an item already checked (its provider and request), and
:func:`run_job` turns it into one :class:`BatchRecord` through the one start -> result ->
dispose sequence every front-end shares (:func:`~supervisor.supervise`).  The same
function runs in this process (the local engine, ``_local``) and inside a Ray task on a
worker node (``_ray``), so both modes produce the same record under the same
containment.  Both engines import this module; neither imports the other's body.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from supervisor._abort import AbortSignal
from supervisor._clean import clean_text
from supervisor._handle import Run
from supervisor._public import home
from supervisor._registry import Provider, Registry
from supervisor._seam import Resources, StopReason, SubagentRequest
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
    resources: Resources | None = None
    """What the run's tree used (cgroup containment; None in process-tree)."""
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
    """One output line (without the newline); no lone surrogate survives (see ``clean_text``)."""
    return clean_text(json.dumps(outcome.as_dict(), ensure_ascii=False))


def split_lines(data: bytes) -> list[bytes]:
    """JSONL lines: split on ``\\n`` only (U+2028, U+2029 and U+0085 are legal inside JSON
    strings, and ``\\r`` before a newline is JSON whitespace)."""
    return data.split(b"\n")


def line_id(line: bytes | str) -> str | None:
    """The id of a JSONL line, if it is an object with a string id (read leniently: a line
    that is not valid UTF-8 still names its id, with U+FFFD where its bytes were broken)."""
    with contextlib.suppress(ValueError, RecursionError):
        document = json.loads(line.decode("utf-8", "replace") if isinstance(line, bytes) else line)
        if isinstance(document, dict):
            found = document.get("id")
            return clean_text(found) if isinstance(found, str) and found else None
    return None


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

    def parse_line(self, line: str | bytes, number: int) -> BatchJob | BatchError:
        """A JSONL line (``number`` is 1-based) as a job or an error record."""
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError:
                return BatchError(id=line_id(line) or f"line {number}", error="not valid UTF-8")
        try:
            document = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line nested too deep to parse
            return BatchError(id=f"line {number}", error="not valid JSON")
        return self.resolve(document, number)

    def resolve(self, item: BatchItem | Mapping[str, Any], number: int) -> BatchJob | BatchError:
        fallback_id = f"line {number}"
        if isinstance(item, Mapping):
            raw_id = item.get("id")
            if isinstance(raw_id, str) and raw_id:
                fallback_id = clean_text(raw_id)
            try:
                item = BatchItem.model_validate(dict(item))
            except ValidationError as exc:
                return BatchError(id=fallback_id, error=_describe(exc))
        elif not isinstance(item, BatchItem):
            return BatchError(id=fallback_id, error="not a JSON object")
        if not item.id:
            return BatchError(id=fallback_id, error="id: must be a non-empty string")
        item_id = clean_text(item.id)  # ids are written to records: no lone surrogate
        if item_id in self._seen:
            return BatchError(id=item_id, error="id: duplicate id")
        self._seen.add(item_id)
        if not item.task.strip():
            return BatchError(id=item_id, error="task: the task is blank")
        name = item.provider or self._default
        if name not in self._registry.list():
            have = ", ".join(self._registry.list())
            return BatchError(id=item_id, error=f"provider: no provider named {name!r} (have: {have})")
        cwd = self._default_cwd
        if item.cwd is not None:
            try:
                candidate = Path(item.cwd).expanduser()
                candidate = Path(os.path.normpath(self._base_dir / candidate))
                cwd = check_directory(candidate, "cwd")
            except CwdError as exc:
                return BatchError(id=item_id, error=clean_text(str(exc)))
            except ValueError:  # a NUL byte, or text no path can hold
                return BatchError(id=item_id, error="cwd: not a valid path")
        return BatchJob(
            id=item_id,
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
        resources=run.resources,
        ray_node=ray_node,
    )


home("supervisor", BatchItem, BatchRecord, BatchError)
