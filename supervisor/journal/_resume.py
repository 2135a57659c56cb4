"""A cold resume's journal side: from a journaled run id to the run to start.

``Registry.resume(run_id)`` asks :func:`plan_resume` what to start, then starts it with
``Registry.run(name, request, conversation=True, session=plan)``.  The checks, in order,
all before anything spawns:

1. the journal holds the run (else ``InvalidRequest``: one line naming the journal);
2. no live process holds it (a run still running or idle in another supervising process
   is refused, naming that process);
3. the provider it ran with is registered under the same name (``NoProvider``), of the
   same kind, with the same configuration digest (``ConfigurationError`` naming the
   provider: a changed config is refused, not guessed at);
4. it was a conversation and the journal kept its agent's session id (else
   ``ConversationOver`` with reason ``not resumable``: a one-shot run cannot be resumed);
5. its cwd is still a usable directory (validated again).

The plan keeps the run id, continues the stored agent session and counts the turns
already had, an interrupted one included: that turn is never sent again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor._config import config_digest
from supervisor._errors import ConfigurationError, ConversationEnd, ConversationOver, InvalidRequest
from supervisor._seam import SessionPlan, SubagentRequest
from supervisor.journal._read import FINAL, INTERRUPTED, JournalUnreadable, read_run
from supervisor.journal._store import Journal
from supervisor.process import CwdError, check_directory

RESUMED_TASK = "(a resumed conversation: this task is not sent)"


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What to start: the provider's name, a request in the run's cwd, the session plan."""

    provider: str
    request: SubagentRequest
    session: SessionPlan


def plan_resume(
    journal: Journal,
    run_id: str,
    *,
    lookup: Callable[[str], Any],
    probe: Callable[[Any, SubagentRequest], Any],
) -> ResumePlan:
    """The checks above, and the plan.  ``lookup(name)`` is the registry's provider by
    name; ``probe(provider, request)`` builds an unstarted run of it (its kind, label and
    config are read; it is never started)."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise InvalidRequest("a run id to resume must be a non-empty string")
    if journal.problem is not None:
        raise InvalidRequest(journal.problem)
    journal.flush()
    try:
        record = read_run(journal.path, run_id)
    except JournalUnreadable as exc:
        raise InvalidRequest(str(exc)) from None
    if record is None:
        raise InvalidRequest(f"no run {run_id} in the journal {journal.path}")
    if record.state not in FINAL and record.state != INTERRUPTED:
        raise InvalidRequest(f"run {run_id} is still {record.state} in process {record.host_pid}")
    provider = lookup(record.provider)
    cwd = Path(record.cwd) if record.cwd else None
    request = SubagentRequest(task=RESUMED_TASK, parent_cwd=cwd)
    run = probe(provider, request)
    label = run.vocabulary.label
    if run.kind != record.kind:
        raise ConfigurationError(
            f'subagent provider "{record.provider}" is of kind {run.kind} now; run {run_id} was of kind '
            f"{record.kind}"
        )
    config = getattr(run, "config", None)
    if config is None or config_digest(config) != record.config_digest:
        raise ConfigurationError(
            f'subagent provider "{record.provider}" is configured differently than when run {run_id} '
            "ran (its config digest changed): resume it with the same configuration"
        )
    if not record.conversation or record.agent_session is None:
        raise ConversationOver(label, record.turns, ConversationEnd.NOT_RESUMABLE)
    if cwd is None:
        raise InvalidRequest(f"run {run_id} has no working directory in the journal")
    try:
        check_directory(cwd, "the run's cwd")
    except CwdError as exc:
        raise InvalidRequest(str(exc)) from None
    session = SessionPlan(run_id=record.id, resume=record.agent_session, turns_before=record.turns, keep=True)
    return ResumePlan(record.provider, request, session)
