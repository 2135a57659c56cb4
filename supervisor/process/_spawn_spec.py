"""What a supervised child is spawned from (:class:`SpawnSpec`), how it failed to start, and
the facts its end leaves (:class:`ExitFacts`, :class:`TeardownReport`)."""

from __future__ import annotations

import enum
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from supervisor._public import home
from supervisor.process._confine import Confinement
from supervisor.process._containment import Containment, containment_for
from supervisor.process._framing import DEFAULT_MAX_FRAME_BYTES
from supervisor.process._limit_values import NO_LIMITS, Limits

DEFAULT_STDERR_TAIL_BYTES = 64 * 1024
DEFAULT_EOF_GRACE_SECONDS = 6.0


class StderrMode(enum.StrEnum):
    INHERIT = "inherit"
    LOG = "log"
    DISCARD = "discard"


class SpawnFailed(Exception):
    """The program could not be started (missing, not executable, cwd vanished).

    Its text is the OS error: host log and ``__cause__`` only.
    """


class EnclosureFailed(SpawnFailed):
    """The run's groups could not be made or its limits set (the cause names the file
    the kernel refused, or why a limit cannot be had)."""


@dataclass(frozen=True, slots=True)
class ExitFacts:
    """How the direct child ended: exactly one of the two is set."""

    exit_code: int | None
    signal: str | None

    @classmethod
    def from_returncode(cls, returncode: int) -> ExitFacts:
        if returncode >= 0:
            return cls(exit_code=returncode, signal=None)
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"SIG{-returncode}"
        return cls(exit_code=None, signal=name)


@dataclass(frozen=True, slots=True)
class TeardownReport:
    quiescent: bool
    rung: str
    exit: ExitFacts | None
    survivors: tuple[int, ...] = ()
    containment: str = "process-tree"


@dataclass(frozen=True)
class SpawnSpec:
    """What to run.  ``env`` is final (already scrubbed and layered, run tag included);
    spawn adds only the host identity."""

    argv: Sequence[str]
    cwd: Path
    env: dict[str, str]
    run_tag: str
    stderr: StderrMode = StderrMode.INHERIT
    stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    subreaper: bool = True
    containment: Containment = field(default_factory=containment_for)
    eof_grace: float = DEFAULT_EOF_GRACE_SECONDS
    limits: Limits = NO_LIMITS
    confinement: Confinement | None = None
    """Landlock confinement (``confine = true``); None: the child may touch what its user may."""
    keep_capabilities: frozenset[str] = frozenset()
    """A root child keeps these capabilities beyond the default set (``_confine``)."""

    def __post_init__(self) -> None:
        if not self.argv or not self.argv[0]:
            raise ValueError("argv must name a program")


home("supervisor", ExitFacts, StderrMode)
home("supervisor.provider", SpawnSpec, SpawnFailed, TeardownReport)
