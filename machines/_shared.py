"""Charts whose callback registry is built once per class instead of once per instance.

Why
---
python-statemachine resolves every callback of a chart when an instance is built: it
lists the attributes of the chart, its model and each listener (``dir``), walks every
state and transition, and wraps each callback found in a signature adapter.  A run
builds two charts (its lifecycle and the teardown ladder), and that registration was the
largest single share of the parent's CPU per run.  Each ``send`` then calls every
listener's callbacks through those adapters.

How
---
A :class:`SharedCallbacksChart` registers one listener with the library: a stateless
relay whose ``after_transition`` hands the transition to the instance it happened on.
The registry built that way holds no reference to any instance, so the first instance
of a class builds it and every later one reuses it.  The instance then tells its own
listeners in plain Python.  Listeners of the types in :data:`RELAYED` (the audit trail:
its one callback is ``after_transition(event, source, target, machine)``) are relayed;
any other listener, a chart class with callbacks of its own, or ``add_listener`` takes
the library's normal per-instance registration, so every chart behaves exactly as
python-statemachine documents.  The engine (transition selection, the strictness, the
errors) is the library's, untouched.

Entering the initial state costs the engine about as much as a transition.  With a
shared registry nothing is called on entering it, so such a chart starts the way the
library restores a chart from a domain model: its model already holds the initial
state's value (only for an atomic initial state and no configured start values).

A transition costs the engine a whole SCXML macrostep (a trigger built, transitions
selected, exit and entry sets computed, arguments bound for every callback group), about
0.2 ms, for charts that are flat and have no callbacks but the relay.  ``send`` takes
those rows directly (see there), final targets included: a run's last two events
(``tree_exited``, ``tree_gone``) end in final states.

This leans on three private parts of python-statemachine 3.x (``_register_callbacks``,
the registry's ``_registry`` of executors with each wrapper's ``unique_key``, and the
engine's ``running`` flag that ``is_terminated`` reads), pinned by the project's
dependency range and checked against the engine for every row of every built-in chart
by the tests; upstream, a per-class registry (callbacks bound to the instance only at
call time) would make this module unnecessary.
"""

from __future__ import annotations

import weakref
from typing import Any, Final

from statemachine import State, StateChart
from statemachine.model import Model

from machines._audit import AuditTrail

RELAYED: Final = (AuditTrail,)
"""Listener types whose only callback is ``after_transition(event, source, target, machine)``."""


class _Relay:
    """The one listener of a shared-registry chart (stateless: one for every chart)."""

    def after_transition(self, event: Any, source: Any, target: Any, machine: Any) -> None:
        machine._transition_happened(event, source, target)


_RELAY: Final = _Relay()
_RELAY_KEY: Final = f"@{id(_RELAY)}"  # how the library keys a callback found on the relay

# Per chart class: its shared registry, or None when its callbacks cannot be shared.
_registries: weakref.WeakKeyDictionary[type, Any] = weakref.WeakKeyDictionary()


def _relay_only(registry: Any) -> bool:
    """Whether every callback in ``registry`` was found on the relay (none on an instance)."""
    return all(
        wrapper.unique_key.endswith(_RELAY_KEY)
        for executor in registry._registry.values()
        for wrapper in executor
    )


def _plain_initial(cls: type[StateChart[Any]]) -> State | None:
    """``cls``'s initial state if entering it enters that one state and nothing else."""
    initial: State | None = cls.initial_state
    if initial is None or not initial.is_atomic or cls.start_configuration_values:
        return None
    return initial


# Per chart class: (event, source value) -> target state of its plain rows, or None.
_fast: weakref.WeakKeyDictionary[type, dict[tuple[str, Any], State] | None] = weakref.WeakKeyDictionary()


def _fast_rows(cls: type[StateChart[Any]]) -> dict[tuple[str, Any], State] | None:
    """The rows of a flat chart the fast path may take: one transition for the (event,
    source) pair, between top-level atomic states, to one target, neither internal nor
    eventless.  None for a chart that is not flat."""
    try:
        return _fast[cls]
    except KeyError:
        pass
    rows: dict[tuple[str, Any], State] | None = {}
    seen: set[tuple[str, Any]] = set()
    for state in cls.states:
        if not state.is_atomic or state.parent is not None:
            rows = None
            break
        for transition in state.transitions:
            # conditions, validators and actions are callbacks: a chart with any has no
            # shared registry, so the fast path is never asked (see ``send``)
            plain = not transition.is_eventless and not transition.internal and len(transition.targets) == 1
            for name in transition.events:
                key = (str(name), state.value)
                if key in seen:  # more than one row: the engine chooses
                    assert rows is not None
                    rows.pop(key, None)
                    continue
                seen.add(key)
                target = transition.target
                if plain and target is not None and target.is_atomic:
                    assert rows is not None
                    rows[key] = target
    _fast[cls] = rows
    return rows


class SharedCallbacksChart(StateChart[Any]):
    """A ``StateChart`` that builds its callback registry once per class (see the module)."""

    def __init__(self, *, listeners: list[Any] | None = None) -> None:
        given = list(listeners or [])
        relayed = all(type(listener) in RELAYED for listener in given)
        self._relayed: list[Any] = given if relayed else []
        initial = _plain_initial(type(self)) if relayed and _registries.get(type(self)) else None
        if initial is not None:
            model = Model()  # type: ignore[no-untyped-call]  # the library leaves it untyped
            model.state = initial.value  # started: there is nothing to call on entry
            super().__init__(model=model, listeners=[_RELAY])
        else:
            super().__init__(listeners=[_RELAY] if relayed else [_RELAY, *given])

    def send(self, event: str, *args: Any, **kwargs: Any) -> Any:
        """python-statemachine's ``send``, with a fast path for this chart's plain rows.

        On a shared registry (so the chart has no conditions, validators, actions or
        invocations: only the relay's ``after_transition``) an event whose (event, state) row
        is the only one and leads to an atomic state changes the state and tells the
        listeners directly, as the engine's macrostep would: the same state, the same
        listener calls in the same order.  A final target (every one is top-level in a flat
        chart) stops the machine first, as the engine does on entering it: listeners see
        ``is_terminated`` true, and a later event is refused by the engine.  Anything else
        (no such row, arguments, another registry, a machine already stopped) goes to the
        engine, which keeps its errors.
        """
        rows = _fast_rows(type(self)) if not args and not kwargs else None
        if rows is not None and self._callbacks is _registries.get(type(self)) and self._engine.running:
            value = self.current_state_value
            target = rows.get((str(event), value))
            if target is not None:
                source = self.states_map[value]
                self.current_state_value = target.value
                if target.final:  # the engine's ``_handle_final_state`` for a top-level state
                    self._engine.running = False
                self._transition_happened(event, source, target)
                return None
        return super().send(event, *args, **kwargs)

    def _get_engine(self) -> Any:
        """The library's engine, built when first needed on a shared registry whose chart
        started already (see :class:`_DeferredEngine`): the fast path needs only its flag."""
        if (
            self._callbacks is _registries.get(type(self))
            and not self._callbacks.has_async_callbacks
            and self.current_state_value is not None
        ):
            return _DeferredEngine(self)
        return super()._get_engine()  # type: ignore[no-untyped-call]  # the library leaves it untyped

    def _transition_happened(self, event: Any, source: Any, target: Any) -> None:
        """A transition was taken: tell the relayed listeners, in the order given."""
        for listener in self._relayed:
            listener.after_transition(event, source, target, self)

    def _register_callbacks(self, listeners: list[object]) -> None:
        if len(listeners) != 1 or listeners[0] is not _RELAY:
            super()._register_callbacks(listeners)
            return
        cls = type(self)
        shared = _registries.get(cls, False)
        if shared:
            self._listeners[id(_RELAY)] = _RELAY
            self._callbacks = shared
            return
        super()._register_callbacks(listeners)
        if shared is False:  # the class's first instance decides for all of them
            _registries[cls] = self._callbacks if _relay_only(self._callbacks) else None

    def add_listener(self, *listeners: Any) -> Any:
        """python-statemachine's ``add_listener``, on a registry of this instance's own."""
        if self._callbacks is _registries.get(type(self)):
            own = type(self._callbacks)()
            self._callbacks = own
            super()._register_callbacks([_RELAY])  # the same callbacks, in a private registry
        return super().add_listener(*listeners)  # type: ignore[no-untyped-call]  # the library leaves it untyped


class _DeferredEngine:
    """Stands in for python-statemachine's ``SyncEngine`` until something asks it more than
    whether it runs.

    Building the engine (two priority queues with their locks and conditions, an
    invocation manager, a lock) was about half of building a chart, and a one-shot run's
    events all take the fast path, which reads and clears only ``running``.  Its ``start``
    has nothing to do (the chart's model holds its initial state already, as the library's
    own ``start`` checks); any other attribute (``put`` for an event the fast path does not
    take, ``processing_loop``, ``enabled_events``, ...) builds the library's engine with
    this one's ``running``, puts it in the chart's hands and answers from it, so the chart
    behaves from then on exactly as it would have.
    """

    __slots__ = ("running", "sm")

    def __init__(self, sm: SharedCallbacksChart) -> None:
        self.sm = sm
        self.running = True

    def start(self, **kwargs: Any) -> None:
        if self.sm.current_state_value is None:  # never, as built (kept for a restored model)
            self._real().start(**kwargs)

    def _real(self) -> Any:
        engine = StateChart._get_engine(self.sm)  # type: ignore[no-untyped-call]  # untyped there
        engine.running = self.running
        self.sm._engine = engine
        return engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)
