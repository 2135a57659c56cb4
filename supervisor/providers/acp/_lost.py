"""What an ACP start that lost its child saw, and in which order: for the host log.

A start fails ``X/transport`` or ``X/process-exit`` when the child's pipes end under it.
Which fact came first tells the causes apart: the child chose to go (``exited`` first,
with its own status), its output ended first (``stdout-eof``: it closed stdout, or died
of a signal someone sent), or a write found its stdin closed (``stdin-broken``).  The
line names only closed facts (no child text), and says when an exit signal is the one
the supervisor's own teardown sent: that exit is the supervisor's doing, never the
cause it reports.  It reads only what :class:`~supervisor.provider.ManagedProcess` tells any
kind (``lost_facts``, ``signalled``).
"""

from __future__ import annotations

import logging

from supervisor.provider import ExitFacts, ManagedProcess

log = logging.getLogger("supervisor")


def caused_by_teardown(process: ManagedProcess, exit_facts: ExitFacts | None) -> bool:
    """Whether the child died of the signal the supervisor's own teardown sent it."""
    sent = process.signalled
    return exit_facts is not None and sent is not None and exit_facts.signal == sent.name


def note_lost_child(
    run_id: str, stage: str, process: ManagedProcess, error: BaseException, exit_facts: ExitFacts | None
) -> None:
    """One host-log line for a start whose child's pipes or process ended under it."""
    seen = process.lost_facts
    if not seen and exit_facts is None:
        return  # the child is still there (it answered with an error): nothing was lost
    if exit_facts is None:
        ended = "not exited within the grace"
    elif exit_facts.signal is not None:
        own = " (the teardown's own)" if caused_by_teardown(process, exit_facts) else ""
        ended = f"signal {exit_facts.signal}{own}"
    else:
        ended = f"exit code {exit_facts.exit_code}"
    log.warning(
        "run %s lost its child in %s: first saw %s (in order: %s); the client saw %s; the child: %s",
        run_id,
        stage,
        seen[0] if seen else "nothing",
        ", ".join(seen) or "nothing",
        type(error).__name__,
        ended,
    )
