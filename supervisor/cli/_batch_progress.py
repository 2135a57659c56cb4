"""A batch's progress on stderr: a live bar on a terminal, one plain line per run otherwise.

Both end with the summary line ``N completed, M failed, K cancelled in T s``.  Nothing
here ever writes to stdout (the records may go there).
"""

from __future__ import annotations

import time
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from supervisor.batching._jobs import BatchError, BatchRecord, Outcome

PROG = "subagents batch"


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

    def _counts(self) -> str:
        return (
            f"{self.completed} completed, {self.failed} failed, {self.running} running, {self.queued} queued"
        )

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
