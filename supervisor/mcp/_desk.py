"""The runs an MCP server holds: queued, running, settled; at most N at once.

Kept apart from the MCP wire so its rules (admission, cancellation, what a settled
run reports) read on their own and can be driven without a client.

A run is *settled* for a tool caller only once its tree is gone: the desk disposes
before it records the result, so the parent model never hears "done" about a child
that is still running.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from machines import Transition
from supervisor._abort import AbortSignal
from supervisor._consumers import foreground_text
from supervisor._handle import Run
from supervisor._registry import Registry
from supervisor._seam import Resources, StopReason, SubagentRequest, SubagentResult
from supervisor._sequence import supervise
from supervisor.process import PinnedDirectory, pinned

log = logging.getLogger("supervisor")


class DeskState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SETTLED = "settled"


@dataclass(frozen=True)
class Settled:
    """What a tool caller sees of a finished run (closed facts and the child's answer)."""

    run_id: str
    provider: str
    stop_reason: str
    output: str
    diagnostic: str | None
    resources: Resources | None = None
    """What the run's tree used (cgroup containment; None in process-tree or before it ran)."""

    @property
    def completed(self) -> bool:
        return self.stop_reason == StopReason.COMPLETED

    @property
    def text(self) -> str:
        """The foreground text a parent model reads."""
        return foreground_text(
            SubagentResult(output=self.output, stop_reason=self.stop_reason, diagnostic=self.diagnostic)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "provider": self.provider,
            "stop_reason": self.stop_reason,
            "output": self.output,
            "diagnostic": self.diagnostic,
            "resources": None if self.resources is None else self.resources.model_dump(),
        }


StageListener = Callable[[str], None]


@dataclass
class DeskRun:
    """One run on the desk, from queued to settled."""

    run: Run
    provider: str
    abort: AbortSignal = field(default_factory=AbortSignal)
    state: DeskState = DeskState.QUEUED
    settled: Settled | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    listeners: list[StageListener] = field(default_factory=list)
    pin: PinnedDirectory | None = None
    """The checked cwd, held open until the run settles (the run starts in it)."""

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def stage(self) -> str:
        return self.run.stage

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "provider": self.provider,
            "state": str(self.state),
            "stage": self.stage,
        }

    def on_transition(self, entry: Transition) -> None:
        if entry.target in self.run.vocabulary.stages:
            for listener in list(self.listeners):
                listener(entry.target)


class Desk:
    """Starts runs in a task group of its own, at most ``max_concurrent`` at once."""

    def __init__(self, registry: Registry, task_group: TaskGroup, *, max_concurrent: int) -> None:
        self._registry = registry
        self._task_group = task_group
        self._slots = anyio.Semaphore(max_concurrent)
        self._runs: dict[str, DeskRun] = {}

    def start(
        self, provider: str, request: SubagentRequest, *, pin: PinnedDirectory | None = None
    ) -> DeskRun:
        """Queue a run at once; it starts when a slot is free.  Raises the registry's checks.

        ``pin`` (the request's checked ``parent_cwd``, held open) is the directory the run
        starts in; the desk releases it once the run settles.
        """
        chosen = self._registry.check(provider, request)
        holder: list[DeskRun] = []

        def trace(entry: Transition) -> None:
            if holder:
                holder[0].on_transition(entry)

        entry = DeskRun(run=chosen.create_run(request, trace=trace), provider=provider, pin=pin)
        holder.append(entry)
        self._runs[entry.run_id] = entry
        self._task_group.start_soon(self._drive, entry)
        return entry

    def get(self, run_id: str) -> DeskRun | None:
        return self._runs.get(run_id)

    def all(self) -> list[DeskRun]:
        return list(self._runs.values())

    def cancel(self, entry: DeskRun) -> None:
        """Local cancellation: a queued run settles at once (it never spawns), a running one is
        cancelled and settles once its tree is gone."""
        entry.abort.abort()
        if entry.state is DeskState.QUEUED:
            self._settle(entry, StopReason.ABORTED, "", None)

    def cancel_all(self) -> None:
        for entry in list(self._runs.values()):
            self.cancel(entry)

    def force_kill_all(self) -> None:
        """Skip the teardown graces of every run (cancel them first)."""
        self.cancel_all()
        for entry in list(self._runs.values()):
            entry.run.force_kill()

    async def _drive(self, entry: DeskRun) -> None:
        try:
            async with self._slots:
                if entry.abort.aborted:  # cancelled while queued: nothing ever spawned
                    self._settle(entry, StopReason.ABORTED, "", None)
                    return
                entry.state = DeskState.RUNNING
                await self._run(entry)
        finally:
            if entry.settled is None:  # the server is going away under us
                self._settle(entry, StopReason.ABORTED, "", None)

    async def _run(self, entry: DeskRun) -> None:
        # Disposed before it is recorded (also when the server goes away under it).  The
        # child starts in the directory that was checked (the pin), whatever its path names now.
        with pinned(entry.pin):
            outcome = await supervise(entry.run, entry.abort)
        self._settle(entry, outcome.stop_reason, outcome.output, outcome.diagnostic, outcome.run.resources)

    def _settle(
        self,
        entry: DeskRun,
        stop_reason: str,
        output: str,
        diagnostic: str | None,
        resources: Resources | None = None,
    ) -> None:
        if entry.settled is not None:
            return
        entry.settled = Settled(
            run_id=entry.run_id,
            provider=entry.provider,
            stop_reason=str(stop_reason),
            output=output,
            diagnostic=diagnostic,
            resources=resources,
        )
        entry.state = DeskState.SETTLED
        if entry.pin is not None:
            entry.pin.close()
        entry.done.set()


def inside_roots(candidate: Path, roots: list[Path]) -> bool:
    """Whether ``candidate`` (already resolved) is one of ``roots`` or below one."""
    return any(candidate == root or candidate.is_relative_to(root) for root in roots)
