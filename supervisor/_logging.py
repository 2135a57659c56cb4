"""Where log records go: safe facts on ``supervisor``, child-controlled text on ``supervisor.child``.

Anything the child controls (its stderr, frames, the text of an exception that quotes
them, a validation error echoing ``input_value=...``) is logged only at DEBUG on
``supervisor.child``.  Records at INFO and above carry closed facts only, so an
embedder's ``logging.basicConfig(level=logging.INFO)`` never shows child text.

Following the standard library's advice for libraries, the package's top logger gets
a ``NullHandler`` and nothing else: an embedder that configured no logging sees
nothing (no "last resort" lines on stderr), and no run ever touches the root logger.
"""

from __future__ import annotations

import logging

log = logging.getLogger("supervisor")
child_log = logging.getLogger("supervisor.child")

if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
    log.addHandler(logging.NullHandler())


def raw_failure(message: str, *args: object, exc: BaseException | None = None) -> None:
    """Log a raw failure (its text may quote the child) at DEBUG on ``supervisor.child``."""
    child_log.debug(message, *args, exc_info=exc)
