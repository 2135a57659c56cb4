"""The audit trail: every transition of every machine of one run, in order."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Transition:
    """One recorded transition. ``t`` is monotonic seconds (``time.monotonic``).

    ``machine`` names the chart it belongs to: ``lifecycle`` (the provider's run) or
    ``ladder`` (the teardown ladder), or ``warm`` for a warm child's ``ready`` and
    ``taken`` facts (no chart's: their source and target are the stage it waited in).
    ``turn`` is the conversation turn it happened in (1-based; a one-shot run has only
    turn 1; start and teardown belong to the turn that was current then).
    """

    run_id: str
    event: str
    source: str
    target: str
    t: float
    machine: str = "lifecycle"
    turn: int = 1


TransitionSink = Callable[[Transition], None]


class AuditTrail:
    """A python-statemachine listener that records ``after_transition`` calls.

    One trail is shared by every machine of a run (the lifecycle and the teardown
    ladder), so the trail is the single ordered story of the run.  ``sink`` sees each
    transition as it happens (the CLI's ``--trace``); a failing sink is the embedder's
    bug and propagates.  The run sets :attr:`turn` as each turn of a conversation
    begins; every entry carries the turn it was recorded in.
    """

    def __init__(
        self,
        run_id: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        sink: TransitionSink | None = None,
    ) -> None:
        self.run_id = run_id
        self._clock = clock
        self._sink = sink
        self.started_at = clock()
        self.turn = 1
        self._entries: list[Transition] = []

    def retarget(self, sink: TransitionSink | None) -> None:
        """Send later entries to ``sink``, which first hears every entry recorded so far
        (a warm child's trail, handed to the run that takes it)."""
        self._sink = sink
        if sink is not None:
            for entry in tuple(self._entries):
                sink(entry)

    def note(self, event: str, stage: str, machine: str) -> None:
        """Record a fact that is no chart's transition (``source`` and ``target`` are
        ``stage``): a warm child's ``ready`` and ``taken``, machine ``warm``."""
        entry = Transition(self.run_id, event, stage, stage, self._clock(), machine, self.turn)
        self._entries.append(entry)
        if self._sink is not None:
            self._sink(entry)

    @property
    def entries(self) -> tuple[Transition, ...]:
        return tuple(self._entries)

    def after_transition(self, event: Any, source: Any, target: Any, machine: Any) -> None:
        kind = str(getattr(machine, "AUDIT_MACHINE", "lifecycle"))
        entry = Transition(self.run_id, str(event), source.name, target.name, self._clock(), kind, self.turn)
        self._entries.append(entry)
        if self._sink is not None:
            self._sink(entry)

    def as_dict(self, entry: Transition) -> dict[str, str | float | int]:
        """One entry as ``{event, source, target, t, machine, turn}``, ``t`` relative to the run's start."""
        return {
            "event": entry.event,
            "source": entry.source,
            "target": entry.target,
            "t": round(entry.t - self.started_at, 6),
            "machine": entry.machine,
            "turn": entry.turn,
        }

    def as_dicts(self) -> list[dict[str, str | float | int]]:
        """The whole trail, as :meth:`as_dict` entries."""
        return [self.as_dict(e) for e in self._entries]


for _public in (AuditTrail, Transition):
    _public.__module__ = "machines"  # its public home (``machines``), as ``help()`` should say
del _public
