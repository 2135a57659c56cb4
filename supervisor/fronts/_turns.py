"""A conversation from start to disposal: the turn loop the batch and chat front-ends share.

:func:`converse` is :func:`~supervisor.supervise` for a run kept for more turns: the same
three steps with the same rules, and between steps 2 and 3 the later turns.

1. **start** with ``conversation=True``; a failed or aborted start is an outcome.
2. **turns**: turn 1 is the request's task; after each settled turn ``next_task`` is asked
   for the next one (it gets the turn's number and result, so a front-end shows the answer
   there) and returns it, or None to end the conversation.  Each is sent with
   ``run.send``; a send the conversation can no longer take (the child died, the idle
   timeout, a limit, the abort signal: :class:`~supervisor.ConversationOver`) ends the loop
   and is part of the outcome (``not_sent``), its text closed facts only.
3. **dispose**: always, shielded, once the run was published.

A cancellation of the caller's scope is never swallowed: after the shielded disposal it
propagates and no outcome is returned (a front-end that wants an outcome after a quit
makes ``next_task`` return None instead).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from supervisor._abort import AbortSignal
from supervisor._errors import ConversationOver
from supervisor._handle import Run
from supervisor._seam import SubagentResult
from supervisor.fronts._sequence import RunOutcome, lifetime

NextTask = Callable[[int, SubagentResult], Awaitable[str | None]]
"""``next_task(turn, result)``: the text of the turn after ``turn``, or None to end."""


@dataclass(frozen=True, slots=True)
class ConversationOutcome:
    """What became of a conversation: every settled turn, and the run's end.

    ``end`` is the run's :class:`~supervisor.RunOutcome` with the last turn's result, so its
    ``stop_reason``, ``diagnostic``, ``quiescent`` and ``cancelled`` follow the rules every
    front-end reports (a completed last turn whose tree could not be proven gone is
    ``error``).
    """

    end: RunOutcome
    results: tuple[SubagentResult, ...]
    """Every settled turn's result, in order (empty when the start failed)."""
    not_sent: ConversationOver | None = None
    """Why the turn after the last one could not be sent (the conversation had ended)."""

    @property
    def run(self) -> Run:
        return self.end.run


async def converse(
    run: Run,
    next_task: NextTask,
    abort: AbortSignal | None = None,
    *,
    published: Callable[[], None] | None = None,
) -> ConversationOutcome:
    """Start ``run`` as a conversation, run its turns, dispose it; see the module docstring.

    ``run`` is a fresh run of a kind that converses (``registry.check(..., conversation=True)``
    says so before anything spawns).  ``published`` is called once the start succeeded
    (turn 1 then runs at the child: a front-end may cancel it without ending the start).
    """
    results: list[SubagentResult] = []
    not_sent: ConversationOver | None = None

    async def turns() -> None:
        nonlocal not_sent
        if published is not None:
            published()
        results.append(await run.result())
        while (task := await next_task(len(results), results[-1])) is not None:
            try:
                results.append(await run.send(task))
            except ConversationOver as exc:
                not_sent = exc
                break

    start_error, teardown_error = await lifetime(run, abort, turns, conversation=True)
    last = results[-1] if results else None
    return ConversationOutcome(RunOutcome(run, last, start_error, teardown_error), tuple(results), not_sent)
