"""A batch's progress on stderr: a live bar on a terminal, one plain line per run otherwise.

On the bar, the running runs are counted by the stage each is in (``7 running (prompt 5,
initialize 2)``, most first), read from the runs of this process (``BatchEvents.live``;
runs on Ray workers are counted as running only).  Both end with the summary line ``N
completed, M failed, K cancelled in T s``.  Nothing here ever writes to stdout (the
records may go there).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import TextIO

import anyio
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from supervisor._handle import Run
from supervisor.batching._jobs import BatchError, BatchRecord, Outcome

PROG = "subagents batch"
STAGES_EVERY = 0.25  # seconds between two counts of the running runs' stages


class BatchProgress:
    """Counts what finished and shows it; ``total`` is the number of items to run."""

    def __init__(self, stream: TextIO, *, total: int, live: bool | None = None) -> None:
        self._stream = stream
        self._total = total
        self._began = time.monotonic()
        self.completed = self.failed = self.cancelled = self.running = 0
        self._live = stream.isatty() if live is None else live
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._stages = ""
        if self._live:
            console = Console(file=stream, stderr=True)
            self._progress = Progress(
                TextColumn("[bold]batch"),
                BarColumn(),
                TextColumn("{task.fields[counts]}"),
                TextColumn("elapsed"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self._task = self._progress.add_task("batch", total=total, counts=self._counts())
            self._progress.start()

    @property
    def queued(self) -> int:
        return max(0, self._total - self.completed - self.failed - self.cancelled - self.running)

    @property
    def live(self) -> bool:
        return self._live

    def _counts(self) -> str:
        running = f"{self.running} running" + (f" ({self._stages})" if self._stages and self.running else "")
        return f"{self.completed} completed, {self.failed} failed, {running}, {self.queued} queued"

    def stages(self, runs: Iterable[Run]) -> None:
        """Count the running ``runs`` by stage (closed names of their vocabularies)."""
        counts = Counter(run.stage for run in runs if not run.settled)
        stages = ", ".join(f"{stage} {n}" for stage, n in sorted(counts.items(), key=lambda i: (-i[1], i[0])))
        if stages != self._stages:
            self._stages = stages
            self._refresh()

    async def follow_stages(self, runs: set[Run]) -> None:
        """On the live bar, recount the stages of ``runs`` (the live set) until cancelled."""
        if not self._live:
            return
        while True:
            self.stages(list(runs))
            await anyio.sleep(STAGES_EVERY)

    def started(self, _id: str) -> None:
        self.running += 1
        self._refresh()

    def cancelled_run(self, _id: str) -> None:
        self.running -= 1
        self.cancelled += 1
        self._refresh()

    def finished(self, outcome: Outcome) -> None:
        if isinstance(outcome, BatchRecord):
            self.running -= 1
        if outcome.completed:
            self.completed += 1
        else:
            self.failed += 1
        if self._live:
            self._refresh()
        else:
            self._stream.write(f"{PROG}: {_line(outcome)}\n")
            self._stream.flush()

    def _refresh(self) -> None:
        if self._progress is not None and self._task is not None:
            done = self.completed + self.failed + self.cancelled
            self._progress.update(self._task, completed=done, counts=self._counts())

    def close(self) -> None:
        """Stop the live bar and write the summary line."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        elapsed = time.monotonic() - self._began
        counts = f"{self.completed} completed, {self.failed} failed, {self.cancelled} cancelled"
        self._stream.write(f"{counts} in {elapsed:.1f} s\n")
        self._stream.flush()


def _line(outcome: Outcome) -> str:
    if isinstance(outcome, BatchError):
        return f"{outcome.id}: error: {outcome.error}"
    if not outcome.started:
        return f"{outcome.id}: start failed in {outcome.duration_s:.1f} s"
    return f"{outcome.id}: {outcome.stop_reason} in {outcome.duration_s:.1f} s"
