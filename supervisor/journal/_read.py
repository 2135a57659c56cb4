"""Reading the journal back: the runs, one run with its turns and audit trail, and
which runs were interrupted.

A run (or a turn) is ``interrupted`` when its state is not final and the process that
supervised it is gone: the journal keeps the host's pid and start time, and a pid that
is not alive, or alive with another start time (a reused pid), is gone.  A run written
on another host is shown as it was written.
"""

from __future__ import annotations

import socket
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisor.journal import _schema
from supervisor.journal._start_time import NoSuchProcess, start_time
from supervisor.journal._store import connect, reason_of

FINAL = ("ended", "leaked")
INTERRUPTED = "interrupted"
STATES = ("starting", "running", "settled", "idle", "ended", "leaked", INTERRUPTED)


class JournalUnreadable(Exception):
    """The journal cannot be read; the message is one closed line naming the file."""


@dataclass(frozen=True)
class JournaledTurn:
    number: int
    state: str
    started_at: float
    ended_at: float | None
    stop_reason: str | None
    diagnostic: str | None
    usage: dict[str, Any] | None
    task: str | None = None
    answer: str | None = None

    def as_dict(self) -> dict[str, Any]:
        document = {
            "turn": self.number,
            "state": self.state,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "stop_reason": self.stop_reason,
            "diagnostic": self.diagnostic,
            "usage": self.usage,
        }
        if self.task is not None or self.answer is not None:
            document.update(task=self.task, answer=self.answer)
        return document


@dataclass(frozen=True)
class RunRecord:
    """One journaled run, as read back (its turns and audit trail only from :func:`read_run`)."""

    id: str
    kind: str
    provider: str
    config_digest: str
    cwd: str | None
    containment: str | None
    conversation: bool
    state: str
    started_at: float
    ended_at: float | None
    updated_at: float
    agent_session: str | None
    turns: int
    stop_reason: str | None
    diagnostic: str | None
    end_reason: str | None
    quiescent: bool | None
    resources: dict[str, Any] | None
    cost_usd: float | None
    host_pid: int | None
    resumes: int
    turn_records: tuple[JournaledTurn, ...] = ()
    audit: tuple[dict[str, Any], ...] = field(default=())

    @property
    def wall_s(self) -> float | None:
        end = (
            self.ended_at
            if self.ended_at is not None
            else (self.updated_at if self.state == INTERRUPTED else None)
        )
        return None if end is None else round(end - self.started_at, 3)

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.id,
            "kind": self.kind,
            "provider": self.provider,
            "state": self.state,
            "turns": self.turns,
            "started_at": self.started_at,
            "wall_s": self.wall_s,
            "stop_reason": self.stop_reason,
            "cost_usd": self.cost_usd,
        }

    def as_dict(self) -> dict[str, Any]:
        document = self.summary()
        document.update(
            conversation=self.conversation,
            cwd=self.cwd,
            containment=self.containment,
            config_digest=self.config_digest,
            ended_at=self.ended_at,
            diagnostic=self.diagnostic,
            end_reason=self.end_reason,
            quiescent=self.quiescent,
            resources=self.resources,
            resumes=self.resumes,
            turn_records=[t.as_dict() for t in self.turn_records],
            audit=list(self.audit),
        )
        return document


def open_for_reading(path: Path) -> sqlite3.Connection:
    """A connection to an existing journal, checked; :class:`JournalUnreadable` otherwise."""
    if not path.exists():
        raise JournalUnreadable(f"no journal at {path} (no run has been journaled there)")
    try:
        connection = connect(path, create=False)
    except sqlite3.Error as exc:
        raise JournalUnreadable(f"journal {path}: {reason_of(exc)}") from None
    try:
        _schema.check_readable(connection)
        connection.execute("SELECT 1 FROM runs LIMIT 1").fetchall()
    except (sqlite3.Error, _schema.SchemaProblem) as exc:
        connection.close()
        raise JournalUnreadable(f"journal {path}: {reason_of(exc)}") from None
    return connection


_host = socket.gethostname()


def host_gone(host: str | None, pid: int | None, start: float | None) -> bool:
    """Whether the supervising process recorded as ``pid`` started at ``start`` is gone."""
    if pid is None or start is None or (host is not None and host != _host):
        return False
    try:
        return abs(start_time(pid) - start) > 0.05
    except NoSuchProcess:
        return True
    except OSError:
        return False


_RUN_COLUMNS = (
    "id, kind, provider, config_digest, cwd, containment, conversation, state, started_at, ended_at, "
    "updated_at, agent_session, turns, stop_reason, diagnostic, end_reason, quiescent, cpu_s, "
    "memory_peak_bytes, pids_peak, host, host_pid, host_start, resumes, "
    "(SELECT sum(cost_usd) FROM turns WHERE turns.run_id = runs.id)"
)


def _record(row: tuple[Any, ...]) -> RunRecord:
    (
        run_id, kind, provider, digest, cwd, containment, conversation, state, started_at, ended_at,
        updated_at, session, turns, stop_reason, diagnostic, end_reason, quiescent, cpu_s,
        memory_peak, pids_peak, host, host_pid, host_start, resumes, cost,
    ) = row  # fmt: skip
    if state not in FINAL and host_gone(host, host_pid, host_start):
        state = INTERRUPTED
    resources = None
    if cpu_s is not None or memory_peak is not None or pids_peak is not None:
        resources = {"cpu_s": cpu_s, "memory_peak_bytes": memory_peak, "pids_peak": pids_peak}
    return RunRecord(
        id=run_id,
        kind=kind,
        provider=provider,
        config_digest=digest,
        cwd=cwd,
        containment=containment,
        conversation=bool(conversation),
        state=state,
        started_at=started_at,
        ended_at=ended_at,
        updated_at=updated_at,
        agent_session=session,
        turns=turns,
        stop_reason=stop_reason,
        diagnostic=diagnostic,
        end_reason=end_reason,
        quiescent=None if quiescent is None else bool(quiescent),
        resources=resources,
        cost_usd=cost,
        host_pid=host_pid,
        resumes=resumes,
    )


def list_runs(path: Path, *, state: str | None = None, limit: int | None = None) -> list[RunRecord]:
    """The journaled runs, newest first; ``state`` filters on the state shown (``interrupted``
    included), ``limit`` keeps the newest N of those."""
    connection = open_for_reading(path)
    try:
        records: list[RunRecord] = []
        try:
            cursor = connection.execute(f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY started_at DESC, id")
            for row in cursor:
                record = _record(row)
                if state is not None and record.state != state:
                    continue
                records.append(record)
                if limit is not None and len(records) >= limit:
                    break
        except sqlite3.Error as exc:
            raise JournalUnreadable(f"journal {path}: {reason_of(exc)}") from None
        return records
    finally:
        connection.close()


def read_run(path: Path, run_id: str) -> RunRecord | None:
    """One run with its turns and audit trail; None when the journal has no such run."""
    connection = open_for_reading(path)
    try:
        try:
            row = connection.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                return None
            record = _record(row)
            turns = connection.execute(
                "SELECT number, state, started_at, ended_at, stop_reason, diagnostic, input_tokens, "
                "output_tokens, cached_input_tokens, cost_usd, task, answer FROM turns WHERE run_id = ? "
                "ORDER BY number",
                (run_id,),
            ).fetchall()
            audit = connection.execute(
                "SELECT event, source, target, t, machine, turn FROM audit WHERE run_id = ? ORDER BY seq",
                (run_id,),
            ).fetchall()
        except sqlite3.Error as exc:
            raise JournalUnreadable(f"journal {path}: {reason_of(exc)}") from None
    finally:
        connection.close()
    interrupted = record.state == INTERRUPTED
    turn_records = []
    for number, state, started, ended, stop, diagnostic, tin, tout, tcached, cost, task, answer in turns:
        if state == "running" and interrupted:
            state = INTERRUPTED
        usage = None
        if any(v is not None for v in (tin, tout, tcached, cost)):
            usage = {
                "input_tokens": tin,
                "output_tokens": tout,
                "cached_input_tokens": tcached,
                "cost_usd": cost,
            }
        turn_records.append(
            JournaledTurn(number, state, started, ended, stop, diagnostic, usage, task, answer)
        )
    entries = tuple(
        {"event": e, "source": s, "target": t_, "t": round(t, 6), "machine": m, "turn": n}
        for e, s, t_, t, m, n in audit
    )
    return _replace(record, turn_records=tuple(turn_records), audit=entries)


def _replace(record: RunRecord, **changes: Any) -> RunRecord:
    from dataclasses import replace

    return replace(record, **changes)
