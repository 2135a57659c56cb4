"""Settlement: each turn's result is settled exactly once, and facts the engine itself
observed are fed to the chart without ever stopping a settlement or a teardown.

The first settlement of a turn wins (a local cancellation, a limit, a failed task, the
driver's own result, a dispose: whichever comes first); later ones are ignored.  The
settled output is capped to ``max_output_bytes`` whatever the provider collected, and
a failure keeps its category as a fact (telemetry's ``error.type``), never parsed from
text: a line built with ``ProviderRun.failure`` is remembered with its category.
"""

from __future__ import annotations

import logging

from machines import SETTLED, CommonEvent
from supervisor._diagnostic import FailureFacts, join_lines
from supervisor._seam import StopReason, SubagentResult
from supervisor.common._logging import raw_failure
from supervisor.common._text import cap_text
from supervisor.run._guard import is_cancellation
from supervisor.run._state import Hooks, RunState

log = logging.getLogger("supervisor")


class Settlement:
    """Settles the current turn of one run, and records the base's own chart facts."""

    def __init__(self, state: RunState, run: Hooks) -> None:
        self._state = state
        self._run = run

    def settle(self, result: SubagentResult, *, category: str | None = None) -> None:
        """Settle once: the output capped to ``max_output_bytes`` whatever the provider
        collected, the failure's category kept as a fact."""
        state = self._state
        if state.result is not None:
            return
        output = cap_text(result.output, self._run.config.max_output_bytes)
        if output is not result.output:
            result = result.model_copy(update={"output": output})
        if category is None and result.diagnostic:
            category = state.categories.get(result.diagnostic.split("\n", 1)[0])
        state.failure_category = category
        state.result = result
        state.results.append(result)
        state.journal.settled(self._run, result)
        state.settled.set()
        state.progress.settle(final=not state.conversation)

    def settle_failure(self, facts: FailureFacts, extra_line: str | None = None) -> None:
        """Settle as a failure with ``facts`` (partial output kept)."""
        state = self._state
        if state.result is None and not state.cancelled_locally and self._run.machine.state_name != SETTLED:
            self.record(CommonEvent.FAILED)
        self.settle(self.failure_result(facts, extra_line), category=facts.category)

    def settle_aborted(self) -> None:
        """Settle ``aborted`` (a local cancellation), keeping the partial output."""
        self.settle(SubagentResult(output=self.partial_or_empty(), stop_reason=StopReason.ABORTED))

    def failure_result(self, facts: FailureFacts, extra_line: str | None = None) -> SubagentResult:
        """An ``error`` result with ``facts`` (partial output kept)."""
        diagnostic = join_lines(facts.line(), extra_line)
        return SubagentResult(
            output=self.partial_or_empty(), stop_reason=StopReason.ERROR, diagnostic=diagnostic
        )

    def partial_or_empty(self) -> str:
        """The provider's partial output, or nothing when asking for it fails."""
        try:
            return self._run.partial_output()
        except BaseException as exc:
            if is_cancellation(exc):
                raise
            log.error("run %s: partial_output() failed", self._run.id)
            raw_failure("run %s: the raw partial_output failure", self._run.id, exc=exc)
            return ""

    def record(self, event: CommonEvent) -> None:
        """Feed a fact the base itself observed.  A chart a provider left where the common
        rows do not reach must not stop a settlement or a teardown: the refusal is logged
        (and the audit trail lacks that entry), the run goes on."""
        machine = self._run.machine
        try:
            machine.send(event)
        except Exception:
            log.error("run %s: the chart refused %s in state %s", self._run.id, event, machine.state_name)
