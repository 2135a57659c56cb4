"""What telemetry reads of a run: closed facts only, and nothing it has to work out.

A leaf: the switch and the OpenTelemetry side both read a run through :class:`RunFacts`
and import nothing else of the run, so no cycle runs back from telemetry to the base
run that calls it.  The failure category is a fact the run keeps (the category of the
facts it failed with), never parsed back out of the diagnostic text.
"""

from __future__ import annotations

from typing import Protocol

from machines import Transition
from supervisor._seam import Resources
from supervisor.process import ExitFacts


class RunFacts(Protocol):
    """The facts of one run a span is made of (the base run provides them)."""

    @property
    def id(self) -> str: ...

    @property
    def provider_name(self) -> str: ...

    @property
    def kind(self) -> str:
        """The installed kind's name (``acp``), or ``unknown``."""
        ...

    @property
    def gen_ai_provider(self) -> str:
        """``gen_ai.provider.name``: what the kind declares (``anthropic``), else its name."""
        ...

    @property
    def turn(self) -> int:
        """The current turn's number (1 for a one-shot run)."""
        ...

    @property
    def containment(self) -> str: ...

    @property
    def quiescent(self) -> bool | None: ...

    @property
    def exit_facts(self) -> ExitFacts | None: ...

    @property
    def resources(self) -> Resources | None:
        """What the tree used (cgroup containment), once the teardown read it."""
        ...

    @property
    def failure_category(self) -> str | None:
        """The category the run (or its start) failed with; None when it did not fail."""
        ...

    @property
    def teardown_category(self) -> str | None:
        """The category of a failed teardown; None when the tree was proven gone."""
        ...


def transition_attributes(entry: Transition) -> dict[str, str]:
    """The closed attributes of one transition event."""
    return {"source": entry.source, "target": entry.target, "machine": entry.machine}
