"""The teardown ladder as a machine: stdin EOF, then SIGTERM, then SIGKILL.

The supervisor walks this chart while it takes a process tree down; each rung is a
state, each transition the fact that moved it (a grace expired, the tree exited).
Sharing the run's audit trail, it records exactly how far a teardown had to go.
"""

from __future__ import annotations

from typing import ClassVar

from statemachine import State

from machines._shared import SharedCallbacksChart


class TeardownLadder(SharedCallbacksChart):
    """EOF -> SIGTERM -> SIGKILL over a whole process tree."""

    catch_errors_as_events = False
    allow_event_without_transition = False

    running = State("running", initial=True)
    eof_wait = State("eof-wait")
    term_wait = State("term-wait")
    kill_wait = State("kill-wait")
    gone = State("gone", final=True)
    survived = State("survived", final=True)

    stdin_closed = running.to(eof_wait)
    eof_grace_expired = eof_wait.to(term_wait)
    term_grace_expired = term_wait.to(kill_wait)
    kill_forced = running.to(kill_wait) | eof_wait.to(kill_wait) | term_wait.to(kill_wait)
    tree_exited = running.to(gone) | eof_wait.to(gone) | term_wait.to(gone) | kill_wait.to(gone)
    kill_wait_expired = kill_wait.to(survived)

    RUNGS: ClassVar[tuple[str, ...]] = ("eof-wait", "term-wait", "kill-wait")
    AUDIT_MACHINE: ClassVar[str] = "ladder"  # how its audit entries name it

    @property
    def rung(self) -> str:
        """The name of the active state."""
        (state,) = self.configuration
        name: str = state.name
        return name


MACHINES = (TeardownLadder,)
