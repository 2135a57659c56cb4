"""The one injected fake at the containment seam: a descendant that survives SIGKILL.

No real process can do that, so a test models it with a real sleeping process (the
"phantom") that :class:`UnkillableTree` reports as part of every run it encloses,
while no signal of the ladder ever reaches it.  Everything else stays real: the
wrapped containment (cgroup or process-tree) does its own work on the real child.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from signal import Signals

import anyio

from supervisor.process import NO_LIMITS, Containment, Enclosure, KernelHit, Limits, Usage, containment_for


class UnkillableTree:
    def __init__(self, phantom: int, inner: Containment | None = None) -> None:
        self.phantom = phantom
        self.inner = inner or containment_for()

    @property
    def mode(self) -> str:
        return self.inner.mode

    def enclose(self, run_tag: str, limits: Limits = NO_LIMITS) -> Enclosure:
        return _Haunted(self.inner.enclose(run_tag, limits), self.phantom)


class _Haunted:
    def __init__(self, inner: Enclosure, phantom: int) -> None:
        self.inner = inner
        self.phantom = phantom

    @property
    def mode(self) -> str:
        return self.inner.mode

    def command(self, argv: Sequence[str]) -> list[str]:
        return self.inner.command(argv)

    def started(self, pid: int) -> None:
        self.inner.started(pid)

    async def signal(self, sig: Signals) -> None:
        await self.inner.signal(sig)  # never reaches the phantom

    async def empty(self) -> bool:
        return await self.inner.empty() and not _alive(self.phantom)

    async def wait_empty(self, resignal: Signals | None = None) -> None:
        await self.inner.wait_empty(resignal)
        fd = os.pidfd_open(self.phantom)
        try:
            await anyio.wait_readable(fd)
        finally:
            os.close(fd)

    def survivors(self) -> tuple[int, ...]:
        return tuple(sorted({*self.inner.survivors(), self.phantom}))

    def release(self) -> None:
        self.inner.release()

    async def watch(self) -> None:
        await self.inner.watch()

    def limit_hit(self) -> KernelHit | None:
        return self.inner.limit_hit()

    async def cpu_seconds(self) -> float | None:
        return await self.inner.cpu_seconds()

    @property
    def usage(self) -> Usage | None:
        return self.inner.usage


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def phantom_process() -> Iterator[int]:
    """A real process for :class:`UnkillableTree` to hold up; killed on exit."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
