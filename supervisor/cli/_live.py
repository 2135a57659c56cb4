"""A run's progress line, live on a terminal: redrawn in place (rich), erased when it stops.

Only the ``run`` and ``chat`` commands on a terminal use it (rich is imported then, not
before); off a terminal they print plain stage lines, as they always did.  The line is
``progress_line`` of the run's latest snapshot (closed facts only), redrawn as
``run.watch()`` delivers them (at most four times a second, once a second while nothing
else moves); a settled turn's snapshot is never drawn, so the line is gone before its
answer is written and stays gone at a prompt.
"""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from supervisor._handle import Run
from supervisor._seam import progress_line


class LiveLine:
    """One line on a terminal (``prefix: <progress line>``), erased by :meth:`clear`."""

    def __init__(self, stream: TextIO, prefix: str) -> None:
        self._console = Console(file=stream, highlight=False, markup=False, emoji=False)
        self._prefix = prefix
        self._live: Live | None = None

    @property
    def shown(self) -> bool:
        return self._live is not None

    def show(self, text: str) -> None:
        line = Text(f"{self._prefix}: {text}", no_wrap=True, overflow="ellipsis")
        if self._live is None:
            self._live = Live(
                line,
                console=self._console,
                transient=True,  # stopping erases it
                auto_refresh=False,  # redrawn by the watcher, not by a thread of rich's
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start(refresh=True)
        else:
            self._live.update(line, refresh=True)

    def clear(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def say(self, line: str) -> None:
        """A line of its own above the live one (which is redrawn below it)."""
        self._console.print(Text(line), soft_wrap=True)

    async def follow(self, run: Run) -> None:
        """Draw each snapshot of a running turn until the watch ends (a settled one clears
        nothing: the caller clears the line before it writes the answer)."""
        async for p in run.watch():
            if not p.settled:
                self.show(progress_line(p))
