"""Which journal a run created now is written to: the engine's one question.

A ``subagents`` command sets the process-wide journal once (:func:`set_default`); a
``Registry(journal=...)`` sets its own for the runs it creates (:func:`using`, a context
variable, so two registries with two journals in one process do not mix).  Nothing set:
the run is not journaled and gets the no-op observer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from supervisor._seam import SessionPlan
from supervisor.journal._observer import NOOP, RunJournal, RunObserver
from supervisor.journal._store import Journal

_current: ContextVar[Journal | None] = ContextVar("subagents_journal", default=None)
_default: list[Journal | None] = [None]


def set_default(journal: Journal | None) -> None:
    """The journal of every run this process creates outside a journaled registry."""
    _default[0] = journal


def current() -> Journal | None:
    journal = _current.get()
    return _default[0] if journal is None else journal


@contextmanager
def using(journal: Journal | None) -> Iterator[None]:
    """Runs created inside the block are written to ``journal`` (None: the default)."""
    token = _current.set(journal)
    try:
        yield
    finally:
        _current.reset(token)


def keep_plan(provider: object) -> SessionPlan | None:
    """``SessionPlan(keep=True)`` for a run created now of a kind that can resume, when it
    is journaled: its session is opened so that it can be resumed after this process is
    gone (an agent that forgets a session unless told to keep it is told); else None."""
    journal = current()
    if journal is None or not journal.writing:
        return None
    if not getattr(getattr(provider, "capabilities", None), "resume", False):
        return None
    return SessionPlan(keep=True)


def for_run() -> RunObserver:
    """The observer of a run created now: the current journal's, or the no-op."""
    journal = current()
    if journal is None or not journal.writing:
        return NOOP
    return RunJournal(journal)
