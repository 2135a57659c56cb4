"""A run's resource limits as values: the keys' parsing and bounds, what the kernel's
counters report (a run's usage, the limit it enforced), and the two refusals (a limit
that cannot be had here, a cgroup file that refused a write)."""

from __future__ import annotations

import enum
import errno
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

MEMORY, PIDS, CPU = "memory", "pids", "cpu"
CONTROLLERS = (MEMORY, PIDS, CPU)
CPU_PERIOD_US = 100_000
MIN_CPU = 0.01  # the kernel's smallest quota is 1 ms per period
MAX_CPU = 4096.0
MAX_PIDS = 4_194_304  # PID_MAX_LIMIT
MAX_MEMORY = 2**62
"""The largest limit accepted (4 EiB): far above any machine, and within the kernel's counters."""


_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(?:([KMGT])(?:iB)?|(B))", re.IGNORECASE)  # ASCII digits only


def parse_memory(value: object) -> int:
    """Bytes from an integer, or from a string with a binary unit (``"512M"``, ``"2GiB"``, ``"4096B"``).

    Raises ``ValueError`` with a message fit to follow a key's name.
    """
    if isinstance(value, bool):
        raise ValueError('must be a number of bytes or a size such as "512M"')
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        match = _SIZE.fullmatch(value.strip())
        if match is None:
            raise ValueError(
                'must be a number of bytes or a size with a binary unit (B, K, M, G, T), e.g. "512M"'
            )
        number, unit, plain = match.groups()
        size = math.floor(float(number) * _UNITS[(unit or plain or "").upper()])
    else:
        raise ValueError('must be a number of bytes or a size such as "512M"')
    if not 0 < size <= MAX_MEMORY:
        raise ValueError(f"must be a positive size no greater than {MAX_MEMORY} bytes")
    return size


def check_pids(value: int) -> int:
    if not 0 < value <= MAX_PIDS:
        raise ValueError(f"must be a positive integer no greater than {MAX_PIDS}")
    return value


def check_cpu(value: float) -> float:
    if not (math.isfinite(value) and MIN_CPU <= value <= MAX_CPU):
        raise ValueError(f"must be a number of CPUs from {MIN_CPU} to {MAX_CPU:g}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Limits:
    """What the kernel enforces on one run's tree (or, as a host ceiling, on all runs)."""

    memory_max: int | None = None
    """Bytes."""
    pids_max: int | None = None
    """Processes and threads."""
    cpu_max: float | None = None
    """CPUs (0.5: half of one CPU's time)."""

    @property
    def controllers(self) -> tuple[str, ...]:
        wanted = {MEMORY: self.memory_max, PIDS: self.pids_max, CPU: self.cpu_max}
        return tuple(c for c in CONTROLLERS if wanted[c] is not None)


NO_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Usage:
    """What a run's tree used, from the kernel's counters (None where it does not count it)."""

    cpu_s: float | None = None
    memory_peak_bytes: int | None = None
    pids_peak: int | None = None


class HitScope(enum.StrEnum):
    """Whose limit the kernel enforced."""

    RUN = "run"
    HOST = "host"
    """The host ceiling (one group over all runs of the process)."""
    SYSTEM = "system"
    """A limit above the supervisor: its own cgroup's, the container's or the machine's."""


@dataclass(frozen=True, slots=True)
class KernelHit:
    """A limit the kernel enforced on the run, from its counters.

    ``resource`` is ``memory`` (an out-of-memory kill in the run's tree) or
    ``processes`` (a fork the kernel refused); ``limit`` is the limit that was reached
    (None for ``system``).
    """

    resource: str
    limit: int | None
    scope: HitScope


class LimitUnavailable(Exception):
    """A limit cannot be enforced here; the text says why."""


class LimitRefused(OSError):
    """A cgroup file refused what the supervisor wrote (``filename`` names it)."""


def refused(exc: OSError, path: Path) -> LimitRefused:
    """The :class:`LimitRefused` for ``exc`` raised by ``path``."""
    code = exc.errno or errno.EIO
    return LimitRefused(code, os.strerror(code), str(path))
