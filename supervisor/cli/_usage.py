"""What every ``subagents`` command shares: the program's name, the exit statuses and the
usage error.  Imports nothing, so ``--version`` and ``--help`` stay cheap."""

from __future__ import annotations

import sys
from typing import Any

PROG = "subagents"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
EXIT_HANGUP = 129


class ConfigError(Exception):
    """A usage or configuration problem found before anything spawned (exit status 2)."""


def configure_logging(verbose: bool) -> None:
    """The host log: on stderr with ``--verbose``, else nowhere (raw failures hold child text)."""
    import logging

    logger = logging.getLogger("supervisor")
    logger.propagate = False
    if verbose:
        handler: logging.Handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(f"{PROG} [%(levelname)s] %(message)s"))
        logger.setLevel(logging.DEBUG)
    else:  # raw failures hold child text: they stay out of a plain run's output
        handler = logging.NullHandler()
    logger.addHandler(handler)
    # asyncio's own warnings and errors belong to the host log too: without a handler of
    # their own they reach stderr through logging's last resort (a task's exception nobody
    # retrieved may quote a child; a child's exit reported to a closed loop is not a line
    # of ours).  Its level stays asyncio's.
    own = logging.getLogger("asyncio")
    own.propagate = False
    own.addHandler(handler)


STDOUT_GONE = f"{PROG}: stdout is closed: the answer was not written"


def write_stdout(text: str) -> bool:
    """Write ``text`` to stdout and flush; False when stdout is gone (closed before the
    command started, a reader that went away, a full disk).  Then fd 1 is pointed at
    ``/dev/null``, so nothing written later (and not the interpreter's own final flush)
    turns into a traceback; the caller says so in one line and exits 1."""
    stream = sys.stdout
    if stream is None:
        return False
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        _silence_stdout(stream)
        return False
    return True


def _silence_stdout(stream: Any) -> None:
    import contextlib
    import os

    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)


def add_ceiling_arguments(parser: Any) -> None:
    """``--max-memory`` and ``--max-pids``: the host ceiling of a command that holds many runs."""
    parser.add_argument(
        "--max-memory", metavar="SIZE", help='memory of all runs together: bytes, "4G" (cgroup containment)'
    )
    parser.add_argument("--max-pids", metavar="N", help="processes and threads of all runs together")
