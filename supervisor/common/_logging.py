"""Where log records go: safe facts on ``supervisor``, child-controlled text on ``supervisor.child``.

Anything the child controls (its stderr, frames, the text of an exception that quotes
them, a validation error echoing ``input_value=...``) is logged only at DEBUG on
``supervisor.child``.  Records at INFO and above carry closed facts only, so an
embedder's ``logging.basicConfig(level=logging.INFO)`` never shows child text.

Following the standard library's advice for libraries, the package's top logger gets
a ``NullHandler`` and nothing else: an embedder that configured no logging sees
nothing (no "last resort" lines on stderr), and no run ever touches the root logger.

Both loggers carry one filter, :class:`CleanText`: a record whose message or traceback
holds a lone surrogate (child text decoded from a ``\\ud800`` escape) gets U+FFFD in
its place, so no handler (a UTF-8 file, a JSON log shipper) fails to encode it.
"""

from __future__ import annotations

import logging

from supervisor._public import home
from supervisor.common._clean import clean_text

log = logging.getLogger("supervisor")
child_log = logging.getLogger("supervisor.child")


class CleanText(logging.Filter):
    """Replaces lone surrogates in a record's text with U+FFFD (never drops a record).

    Runs only for records actually created (the level check comes first), i.e. when an
    embedder asked for them.  The traceback of ``exc_info`` is formatted here, with the
    standard formatter, only when the message of the exception holds such text.
    """

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format is the handler's to report, as without this filter
            return True
        cleaned = clean_text(message)
        if cleaned is not message:
            record.msg, record.args = cleaned, None
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and not record.exc_text and _holds_surrogate(exc):
            assert record.exc_info is not None
            record.exc_text = clean_text(self._formatter.formatException(record.exc_info))
        return True


def _holds_surrogate(exc: BaseException) -> bool:
    """Whether the text of ``exc`` or of any exception it chains to needs cleaning."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        try:
            text = str(current)
        except Exception:
            text = ""
        if clean_text(text) is not text:
            return True
        current = current.__cause__ or current.__context__
    return False


for _logger in (log, child_log):
    if not any(isinstance(f, CleanText) for f in _logger.filters):
        _logger.addFilter(CleanText())

if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
    log.addHandler(logging.NullHandler())


def raw_failure(message: str, *args: object, exc: BaseException | None = None) -> None:
    """Log a raw failure (its text may quote the child) at DEBUG on ``supervisor.child``."""
    child_log.debug(message, *args, exc_info=exc)


home("supervisor.provider", raw_failure)
