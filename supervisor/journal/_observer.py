"""What the engine calls as a run goes: one :class:`RunJournal` per journaled run.

The engine (``supervisor.run``: its start, turn and teardown parts) holds one object with
six hooks and calls each where the fact happens: ``begin`` (the start begins),
``published``, ``settled`` (each turn), ``next_turn``, ``start_failed`` and ``end``
(disposed); ``sink`` wraps the audit trail's sink so every transition is a row as it
happens.  A run that is not journaled gets :data:`NOOP`, whose hooks do nothing.  Each
hook only queues statements on the journal's writer thread: nothing here waits on the
disk.

Nothing model-visible and no child text is written unless the journal keeps text: closed
facts (ids, states, stop reasons, closed diagnostics, numbers), and the agent's own
session id (host-side only, bounded and printable, or not written).
"""

from __future__ import annotations

import os
import socket
import time
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from machines import Transition, TransitionSink
from supervisor._config import config_digest
from supervisor.common._text import cap_text
from supervisor.journal._start_time import start_time
from supervisor.journal._store import Journal

if TYPE_CHECKING:
    from supervisor._seam import SubagentResult

MAX_SESSION_ID = 256


class JournaledRun(Protocol):
    """What the journal reads of a run (the base run provides it)."""

    @property
    def id(self) -> str: ...
    @property
    def provider_name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def turn(self) -> int: ...
    @property
    def task(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def containment(self) -> str: ...
    @property
    def conversation(self) -> bool: ...
    @property
    def quiescent(self) -> bool | None: ...
    @property
    def config(self) -> Any: ...
    @property
    def request(self) -> Any: ...


class RunObserver(Protocol):
    def sink(self, downstream: TransitionSink | None) -> TransitionSink | None: ...
    def begin(self, run: JournaledRun) -> None: ...
    def published(self, run: JournaledRun) -> None: ...
    def settled(self, run: JournaledRun, result: SubagentResult) -> None: ...
    def next_turn(self, run: JournaledRun) -> None: ...
    def start_failed(self, run: JournaledRun, error: BaseException) -> None: ...
    def end(self, run: JournaledRun) -> None: ...


class _Noop:
    def sink(self, downstream: TransitionSink | None) -> TransitionSink | None:
        return downstream

    def begin(self, run: JournaledRun) -> None:
        pass

    def published(self, run: JournaledRun) -> None:
        pass

    def settled(self, run: JournaledRun, result: SubagentResult) -> None:
        pass

    def next_turn(self, run: JournaledRun) -> None:
        pass

    def start_failed(self, run: JournaledRun, error: BaseException) -> None:
        pass

    def end(self, run: JournaledRun) -> None:
        pass


NOOP: RunObserver = _Noop()


@cache
def host_identity() -> tuple[str, int, float]:
    """This process: host name, pid and start time (how a reader tells it is gone)."""
    pid = os.getpid()
    return socket.gethostname(), pid, start_time(pid)


_DIGESTS: dict[int, tuple[Any, str]] = {}


def _digest(config: Any) -> str:
    """The config's digest, computed once per config object (a provider's config serves
    every run of it; the digest costs a model dump and a hash)."""
    known = _DIGESTS.get(id(config))
    if known is not None and known[0] is config:
        return known[1]
    digest = config_digest(config)
    if len(_DIGESTS) >= 256:
        _DIGESTS.clear()
    _DIGESTS[id(config)] = (config, digest)
    return digest


def session_id_of(run: object) -> str | None:
    """The agent's own session id, when the run knows one that is bounded and printable."""
    value = getattr(run, "agent_session_id", None)
    if not isinstance(value, str) or not value or len(value) > MAX_SESSION_ID:
        return None
    if not value.isascii() or not value.isprintable():
        return None
    return value


def run_cwd(run: JournaledRun) -> str | None:
    cwd = getattr(run.config, "cwd", None) or getattr(run.request, "parent_cwd", None)
    return None if cwd is None else os.fspath(cwd)


_BEGIN = """
INSERT INTO runs (id, kind, provider, config_digest, cwd, containment, conversation, host, host_pid,
                  host_start, state, started_at, updated_at, turns)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'starting', ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host, host_pid = excluded.host_pid, host_start = excluded.host_start,
    containment = excluded.containment, state = 'starting', updated_at = excluded.updated_at,
    ended_at = NULL, end_reason = NULL, quiescent = NULL, resumes = resumes + 1
"""
_INTERRUPTED_TURNS = "UPDATE turns SET state = 'interrupted' WHERE run_id = ? AND state = 'running'"
_TURN_BEGINS = """
INSERT OR REPLACE INTO turns (run_id, number, state, started_at, task) VALUES (?, ?, 'running', ?, ?)
"""
_RUN_STATE = "UPDATE runs SET state = ?, turns = max(turns, ?), updated_at = ? WHERE id = ?"
_SESSION = "UPDATE runs SET agent_session = ? WHERE id = ?"
_TURN_SETTLED = """
INSERT INTO turns (ended_at, stop_reason, diagnostic, input_tokens, output_tokens, cached_input_tokens,
                   cost_usd, answer, run_id, number, started_at, state)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'settled')
ON CONFLICT (run_id, number) DO UPDATE SET
    state = 'settled', ended_at = excluded.ended_at, stop_reason = excluded.stop_reason,
    diagnostic = excluded.diagnostic, input_tokens = excluded.input_tokens,
    output_tokens = excluded.output_tokens, cached_input_tokens = excluded.cached_input_tokens,
    cost_usd = excluded.cost_usd, answer = excluded.answer
"""
_RUN_SETTLED = """
UPDATE runs SET state = 'settled', stop_reason = ?, diagnostic = ?, turns = max(turns, ?), updated_at = ?
WHERE id = ?
"""
_START_FAILED = """
UPDATE runs SET state = 'ended', stop_reason = ?, diagnostic = ?, quiescent = ?, ended_at = ?, updated_at = ?
WHERE id = ?
"""
_RESUME_FAILED = """
UPDATE runs SET state = 'ended', end_reason = ?, diagnostic = coalesce(?, diagnostic), ended_at = ?,
    updated_at = ?
WHERE id = ?
"""
_END = """
UPDATE runs SET state = ?, quiescent = ?, end_reason = ?, ended_at = ?, updated_at = ?, cpu_s = ?,
    memory_peak_bytes = ?, pids_peak = ?
WHERE id = ?
"""
_END_TURNS = "UPDATE turns SET state = 'interrupted', ended_at = ? WHERE run_id = ? AND state = 'running'"
_AUDIT = """
INSERT INTO audit (run_id, turn, machine, event, source, target, t, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""


class RunJournal:
    """The hooks of one journaled run, writing to ``journal``."""

    __slots__ = ("_journal", "_pending", "_run_id", "_session", "_started")

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._run_id: str | None = None
        self._started = time.monotonic()
        self._session: str | None = None
        # Transitions before ``begin`` (a warm child's handshake, before a caller took it):
        # written once the run is, so a child no caller takes leaves no rows.
        self._pending: list[tuple[Transition, float]] = []

    def sink(self, downstream: TransitionSink | None) -> TransitionSink:
        def journaled(entry: Transition) -> None:
            if self._run_id is None:
                self._pending.append((entry, time.time()))
            else:
                self._audit(entry, time.time())
            if downstream is not None:
                downstream(entry)

        return journaled

    def _audit(self, entry: Transition, at: float) -> None:
        t = entry.t - self._started  # rounded when read
        row = (entry.run_id, entry.turn, entry.machine, entry.event, entry.source, entry.target, t, at)
        self._journal.write(_AUDIT, row)
        if entry.event == "turn_ended":
            self._journal.write(_RUN_STATE, ("idle", 0, at, entry.run_id))

    def begin(self, run: JournaledRun) -> None:
        self._run_id = run.id
        # ``t`` as the run's own trail counts it (from the run's making: a warm child's spawn)
        self._started = getattr(getattr(run, "audit", None), "started_at", self._started)
        host, pid, host_start = host_identity()
        now = time.time()
        turns_before = run.turn if getattr(run, "resuming", False) else 0
        self._journal.write(
            _BEGIN,
            (
                run.id,
                run.kind,
                run.provider_name,
                _digest(run.config),
                run_cwd(run),
                run.containment,
                int(run.conversation),
                host,
                pid,
                host_start,
                now,
                now,
                turns_before,
            ),
        )
        if getattr(run, "resuming", False):  # the turn its dead host left running is interrupted
            self._journal.write(_INTERRUPTED_TURNS, (run.id,))
        pending, self._pending = self._pending, []
        for entry, at in pending:
            self._audit(entry, at)

    def published(self, run: JournaledRun) -> None:
        self._note_session(run)
        now = time.time()
        if run.state == "idle":  # a resumed conversation: published without a turn
            self._journal.write(_RUN_STATE, ("idle", run.turn, now, run.id))
        elif not getattr(run, "settled", False):  # a turn cancelled while starting is written settled
            self._turn_begins(run, now)

    def next_turn(self, run: JournaledRun) -> None:
        self._turn_begins(run, time.time())

    def _turn_begins(self, run: JournaledRun, now: float) -> None:
        task = self._text(run, run.task)
        self._journal.write(_TURN_BEGINS, (run.id, run.turn, now, task))
        self._journal.write(_RUN_STATE, ("running", run.turn, now, run.id))

    def settled(self, run: JournaledRun, result: SubagentResult) -> None:
        self._note_session(run)
        now = time.time()
        usage = result.usage
        self._journal.write(
            _TURN_SETTLED,
            (
                now,
                str(result.stop_reason),
                result.diagnostic,
                None if usage is None else usage.input_tokens,
                None if usage is None else usage.output_tokens,
                None if usage is None else usage.cached_input_tokens,
                None if usage is None else usage.cost_usd,
                self._text(run, result.output),
                run.id,
                run.turn,
                now,
            ),
        )
        self._journal.write(_RUN_SETTLED, (str(result.stop_reason), result.diagnostic, run.turn, now, run.id))

    def start_failed(self, run: JournaledRun, error: BaseException) -> None:
        from supervisor._errors import ConversationOver, StartFailed

        now = time.time()
        if getattr(run, "resuming", False):
            # A resume that did not start: the journaled turns and the agent's session id
            # stay as they were (the session may be resumed again); the run is not held.
            reason = str(error.reason) if isinstance(error, ConversationOver) else None
            diagnostic = error.diagnostic if isinstance(error, StartFailed) else None
            self._journal.write(_RESUME_FAILED, (reason, diagnostic, now, now, run.id))
            return
        if isinstance(error, StartFailed):
            stop, diagnostic, quiescent = "error", error.diagnostic, int(error.quiescent)
        else:  # aborted, or the caller's scope was cancelled: rolled back
            stop, diagnostic, quiescent = "aborted", None, 1
        self._journal.write(_START_FAILED, (stop, diagnostic, quiescent, now, now, run.id))
        self._journal.write(_END_TURNS, (now, run.id))

    def end(self, run: JournaledRun) -> None:
        now = time.time()
        over = getattr(run, "conversation_over", None)
        resources = getattr(run, "resources", None)
        quiescent = run.quiescent
        self._journal.write(
            _END,
            (
                "leaked" if quiescent is False else "ended",
                None if quiescent is None else int(quiescent),
                None if over is None else str(over.reason),
                now,
                now,
                None if resources is None else resources.cpu_s,
                None if resources is None else resources.memory_peak_bytes,
                None if resources is None else resources.pids_peak,
                run.id,
            ),
        )
        self._journal.write(_END_TURNS, (now, run.id))

    def _note_session(self, run: JournaledRun) -> None:
        session = session_id_of(run)
        if session is not None and session != self._session:
            self._session = session
            self._journal.write(_SESSION, (session, run.id))

    def _text(self, run: JournaledRun, text: str) -> str | None:
        if not self._journal.text:
            return None
        return cap_text(text, getattr(run.config, "max_output_bytes", None))
