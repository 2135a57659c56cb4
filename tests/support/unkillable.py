"""The one injected fake at the process-tree seam: a descendant that survives SIGKILL.

No real process can do that, so a test models it with a real sleeping process (the
"phantom") that :class:`UnkillableTree` reports as part of the run's tree while
dropping every signal to it.  Everything else stays real.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psutil

from supervisor.process import PsutilTree


class UnkillableTree(PsutilTree):
    def __init__(self, phantom: int) -> None:
        self.phantom = psutil.Process(phantom)

    def snapshot(self, root_pid: int, run_tag: str) -> list[psutil.Process]:
        return [*super().snapshot(root_pid, run_tag), self.phantom]

    def send_signal(self, procs: Iterable[psutil.Process], pgid: int, sig: signal.Signals) -> None:
        super().send_signal([p for p in procs if p.pid != self.phantom.pid], pgid, sig)


@contextmanager
def phantom_process() -> Iterator[int]:
    """A real process for :class:`UnkillableTree` to hold up; killed on exit."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
