"""Cold resume at the seam: a run that continues an agent's own session in a new process.

A :class:`~supervisor.SessionPlan` with ``resume`` set asks a kind to continue the
agent's session (ACP's ``session/resume`` or ``session/load``, or whatever its protocol
offers to continue a session by its id) instead of opening one.  The rules, kept here
and called from the registry and the base run through narrow calls:

* **Before anything spawns** (:func:`check_plan`): the plan is well formed (a run id is
  a canonical uuid, ``turns_before`` a non-negative int, the session id bounded
  printable), a resume is a conversation, and the kind declares
  ``Capabilities(resume=True)``; a kind that does not is ``ConversationOver`` with
  reason ``not resumable``, and nothing is started.
* **In the handshake**: the kind continues the session; an agent that cannot (it does
  not advertise it, or refuses it) raises :class:`NotResumable`, and the start rolls the
  child back and raises ``ConversationOver`` ``not resumable`` (closed facts), before any
  task is sent.  A transient failure (spawn, timeout, crash) stays a ``StartFailed``:
  the stored session id is still good, and a caller must not forget it because of that.
* **Publication**: the chart goes from the kind's resume stage to ``idle`` (``resumed``)
  and the run is published idle, without a turn: ``run.turn == turns_before``, the next
  ``send`` is turn ``turns_before + 1``.

The agent's own session id is host-side only (:func:`valid_session_id` bounds it): a
caller reads it as ``run.agent_session_id`` to journal it, and it never appears in a
result, a diagnostic, a span or a log record at INFO.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from machines import CommonEvent, Lifecycle
from supervisor._errors import ConversationEnd, ConversationOver, InvalidRequest
from supervisor._public import home

if TYPE_CHECKING:
    from supervisor._seam import Capabilities, SessionPlan

MAX_SESSION_ID_CHARS = 256


class NotResumable(Exception):
    """Raised by a provider's ``handshake()`` when the agent cannot continue the session
    it was asked to resume (it does not advertise resuming, or it refused this session).

    The start then rolls the child back and raises
    :class:`~supervisor.ConversationOver` with reason ``not resumable``, before any task
    is sent.  Raise it only for that: a failure that may pass (the child did not start,
    timed out, crashed) is a ``StepFailed`` as in any start, so that the caller keeps the
    session id and can try again.  Its text never reaches the caller (closed facts only).
    """


def valid_session_id(value: object) -> str | None:
    """``value`` when it is a usable agent session id (1 to 256 printable ASCII
    characters, no space), else None: an agent's id is kept only when it is safe to
    store and to send back."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_SESSION_ID_CHARS:
        return None
    if not all("!" <= char <= "~" for char in value):
        return None
    return value


def check_plan(
    plan: SessionPlan, capabilities: Capabilities, *, conversation: bool, label: str | None = None
) -> None:
    """The checks of a session plan before anything spawns (see the module docstring).

    ``label`` is the kind's vocabulary label, for the ``ConversationOver`` of a kind
    that cannot resume (``None``: the caller raises it, knowing the label later).
    """
    plan_run_id(plan)
    turns = plan.turns_before
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 0:
        raise InvalidRequest("a session plan's turns_before must be a non-negative integer")
    if plan.resume is None:
        return
    if valid_session_id(plan.resume) is None:
        raise InvalidRequest("a session plan's resume must be an agent session id (printable, bounded)")
    if not conversation:
        raise InvalidRequest("a resumed run is a conversation: start it with conversation=True")
    if not getattr(capabilities, "resume", False) and label is not None:
        raise not_resumable(label, turns)


def plan_run_id(plan: SessionPlan | None) -> str | None:
    """The run id a plan gives the run (None: mint one); a malformed one is refused
    (it names the run's leaf, its tag and its journal entry)."""
    if plan is None or plan.run_id is None:
        return None
    if not _canonical_uuid(plan.run_id):
        raise InvalidRequest("a session plan's run_id must be a run id (a canonical uuid)")
    return plan.run_id


def check_resumable(lifecycle: type[Lifecycle], label: str, turn: int, *, conversation: bool) -> None:
    """A run's own checks of a resume at its start, before anything spawns: it is a
    conversation, and its chart (``lifecycle``) has the ``resumed`` row (a kind that
    cannot resume is ``not resumable``)."""
    if not conversation:
        raise InvalidRequest("a resumed run is a conversation: start it with conversation=True")
    if not any(row[0] == CommonEvent.RESUMED for row in lifecycle.TABLE):
        raise not_resumable(label, turn)


def not_resumable(label: str, turns_before: int) -> ConversationOver:
    """The error of a resume the kind or the agent cannot make (closed facts only)."""
    return ConversationOver(label, turns_before, ConversationEnd.NOT_RESUMABLE)


def _canonical_uuid(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


home("supervisor.provider", NotResumable)
