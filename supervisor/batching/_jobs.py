"""What a batch is made of: items, records, and one run from an item to its record.

A :class:`BatchJob` is an item already checked (its provider and request), and
:func:`run_job` turns it into one :class:`BatchRecord` through the one start -> result ->
dispose sequence every front-end shares (:func:`~supervisor.supervise`), or, for an item
that carries ``turns``, its conversation form (``supervisor.fronts._turns.converse``).  The same
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
from supervisor._diagnostic import bound_diagnostic, join_lines
from supervisor._errors import SubagentError
from supervisor._handle import Provider, Run
from supervisor._public import home
from supervisor._registry import Registry, journaled_run
from supervisor._seam import Resources, StopReason, SubagentRequest, SubagentResult, Usage
from supervisor.common._clean import clean_text
from supervisor.fronts._sequence import RunOutcome, supervise
from supervisor.process import CwdError, check_directory
from supervisor.workspace import Workspace


class BatchItem(BaseModel):
    """One input line: ``{"id", "task", "turns"?, "provider"?, "cwd"?}``.

    ``turns``: the tasks of the turns after ``task``, sent one at a time to the same child
    (a conversation: one turn at a time); present (even empty), the record carries ``turns``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: str
    task: str
    turns: list[str] | None = None
    provider: str | None = None
    cwd: str | None = None


class BatchTurn(BaseModel):
    """One turn of a conversation item: ``{turn, stop_reason, output, diagnostic, usage}``."""

    model_config = ConfigDict(frozen=True)

    turn: int
    stop_reason: str
    output: str
    diagnostic: str | None
    usage: Usage | None = None


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
    usage: Usage | None = None
    """What the (last) turn used, when the agent reported it."""
    resources: Resources | None = None
    """What the run's tree used (cgroup containment; None in process-tree)."""
    workspace: Workspace | None = None
    """The run's own worktree (``workspace = "worktree"``); absent otherwise."""
    turns: list[BatchTurn] | None = None
    """Every turn of a conversation item (an item with ``turns``); absent otherwise."""
    ray_node: str | None = None  # the Ray node id, in Ray mode only

    @property
    def completed(self) -> bool:
        """Whether the run completed: for a conversation item, every one of its turns."""
        if self.turns is not None and any(t.stop_reason != StopReason.COMPLETED for t in self.turns):
            return False
        return self.stop_reason == StopReason.COMPLETED

    def as_dict(self) -> dict[str, Any]:
        document = self.model_dump()
        if self.ray_node is None:
            del document["ray_node"]
        if self.turns is None:
            del document["turns"]
        if self.workspace is None:
            del document["workspace"]
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
    turns: tuple[str, ...] | None = None
    """The tasks after the request's (a conversation); None for a one-shot item."""


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
        for index, turn in enumerate(item.turns or ()):
            if not turn.strip():
                return BatchError(id=item_id, error=f"turns.{index}: the task is blank")
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
        request = SubagentRequest(task=item.task, parent_cwd=cwd)
        if item.turns is not None:
            try:  # a kind that cannot converse is refused here, before anything spawns
                self._registry.check(name, request, conversation=True)
            except SubagentError as exc:
                return BatchError(id=item_id, error=f"turns: {exc}")
        return BatchJob(
            id=item_id,
            provider=self._registry.get(name),
            request=request,
            turns=None if item.turns is None else tuple(item.turns),
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
        elif error["type"] == "list_type":
            message = "must be a list of strings"
        else:
            message = "must be a string"
        problems.append(f"{key}: {message}" if key != "(item)" else message)
    return "; ".join(problems)


# -- one run ---------------------------------------------------------------------------


async def run_job(
    job: BatchJob,
    abort: AbortSignal,
    *,
    ray_node: str | None = None,
    live: set[Run] | None = None,
    registry: Registry | None = None,
) -> BatchRecord | None:
    """Start, settle and dispose one run (:func:`~supervisor.supervise`; an item with
    ``turns``: every turn of its conversation, see :func:`_converse`); None when ``abort``
    cancelled it before it finished.

    A cancellation of the caller's scope is a local cancellation of the run: its tree is
    taken down (shielded) before the cancellation goes on.
    """
    if registry is None:
        run = journaled_run(job.provider, job.request)
    else:  # a local batch's registry hands out a warm child of the same provider, config and cwd
        run = await registry.acquire_run(job.provider.name, job.request, journaled=True)
    live = live if live is not None else set()
    began = time.monotonic()
    live.add(run)
    turns: list[BatchTurn] | None = None
    try:
        if job.turns is None:
            outcome = await supervise(run, abort)
        else:
            outcome, turns = await _converse(run, job.turns, abort)
            if turns is None:
                return None
    finally:
        live.discard(run)
    if outcome.cancelled and abort.aborted:
        return None
    exit_facts = run.exit_facts
    last = turns[-1] if turns else None
    return BatchRecord(
        id=job.id,
        run_id=run.id,
        provider=job.provider.name,
        stop_reason=(outcome.stop_reason if outcome.started else None) if last is None else last.stop_reason,
        output=outcome.output if last is None else last.output,
        diagnostic=outcome.diagnostic if last is None else last.diagnostic,
        exit_code=None if exit_facts is None else exit_facts.exit_code,
        signal=None if exit_facts is None else exit_facts.signal,
        quiescent=outcome.quiescent,
        containment=run.containment,
        started=outcome.started,
        duration_s=round(time.monotonic() - began, 3),
        node=socket.gethostname(),
        usage=(None if outcome.result is None else outcome.result.usage) if last is None else last.usage,
        resources=run.resources,
        workspace=getattr(run, "workspace", None),
        turns=turns,
        ray_node=ray_node,
    )


async def _converse(
    run: Run, tasks: tuple[str, ...], abort: AbortSignal
) -> tuple[RunOutcome, list[BatchTurn] | None]:
    """A conversation item's turns, one at a time on the same child; the turns are None when
    ``abort`` cut the conversation short (the item did not finish: no record).

    Every turn runs while the conversation is open, a failed turn included (a turn's
    failure is that turn's).  When a turn cannot be sent (the child died, a limit ended
    the conversation, ...), the record gets one more entry for it: stop reason ``error``,
    the closed ``ConversationOver`` line as its diagnostic, with the teardown's line if
    any; the turns after it are not attempted.  The last entry is the record's top level;
    a last turn that completed but whose tree could not be proven gone is ``error``, as in
    a one-shot record.
    """
    from supervisor.fronts._turns import converse  # the conversation sequence: only for such items

    pending = iter(tasks)

    async def next_task(_turn: int, _result: SubagentResult) -> str | None:
        return None if abort.aborted else next(pending, None)

    conversation = await converse(run, next_task, abort)
    end = conversation.end
    if abort.aborted and (
        end.cancelled or conversation.not_sent is not None or len(conversation.results) <= len(tasks)
    ):
        return end, None
    turns = [
        BatchTurn(
            turn=number,
            stop_reason=result.stop_reason,
            output=result.output,
            diagnostic=result.diagnostic,
            usage=result.usage,
        )
        for number, result in enumerate(conversation.results, start=1)
    ]
    teardown = None if end.teardown_error is None else end.teardown_error.diagnostic
    if conversation.not_sent is not None:
        turns.append(
            BatchTurn(
                turn=len(turns) + 1,
                stop_reason=StopReason.ERROR,
                output="",
                diagnostic=bound_diagnostic(join_lines(str(conversation.not_sent), teardown)),
            )
        )
    elif turns:  # the last turn carries the run's end (a teardown failure), as a one-shot record does
        turns[-1] = turns[-1].model_copy(
            update={"stop_reason": end.stop_reason, "diagnostic": end.diagnostic}
        )
    return end, turns


home("supervisor", BatchItem, BatchRecord, BatchError, BatchTurn)
