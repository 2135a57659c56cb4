"""The journal's tables, its version, and the migrations from older versions.

A leaf: it knows SQL and nothing of runs.  The file carries ``PRAGMA application_id``
(so a foreign SQLite file is told apart from a journal) and ``PRAGMA user_version``
(the schema version).  Each migration takes the schema from version ``n - 1`` to ``n``
inside the one ``BEGIN IMMEDIATE`` transaction that opens the file for writing, so two
supervising processes opening an old journal at once migrate it once.
"""

from __future__ import annotations

import sqlite3

APPLICATION_ID = 0x53425341  # "SBSA": subagent-supervisor journal
VERSION = 1

_V1 = (
    """
    CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        provider TEXT NOT NULL,
        config_digest TEXT NOT NULL,
        cwd TEXT,
        containment TEXT,
        conversation INTEGER NOT NULL DEFAULT 0,
        host TEXT,
        host_pid INTEGER,
        host_start REAL,
        state TEXT NOT NULL,
        started_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        ended_at REAL,
        agent_session TEXT,
        turns INTEGER NOT NULL DEFAULT 0,
        stop_reason TEXT,
        diagnostic TEXT,
        end_reason TEXT,
        quiescent INTEGER,
        cpu_s REAL,
        memory_peak_bytes INTEGER,
        pids_peak INTEGER,
        resumes INTEGER NOT NULL DEFAULT 0
    )
    """,
    "CREATE INDEX IF NOT EXISTS runs_started ON runs (started_at)",
    """
    CREATE TABLE IF NOT EXISTS turns (
        run_id TEXT NOT NULL,
        number INTEGER NOT NULL,
        state TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        stop_reason TEXT,
        diagnostic TEXT,
        input_tokens INTEGER,
        output_tokens INTEGER,
        cached_input_tokens INTEGER,
        cost_usd REAL,
        task TEXT,
        answer TEXT,
        PRIMARY KEY (run_id, number)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS audit (
        seq INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        turn INTEGER NOT NULL,
        machine TEXT NOT NULL,
        event TEXT NOT NULL,
        source TEXT NOT NULL,
        target TEXT NOT NULL,
        t REAL NOT NULL,
        at REAL NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS audit_run ON audit (run_id, seq)",
)

# MIGRATIONS[n] takes a journal from version n to n + 1 (0: an empty file).
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1,)
assert len(MIGRATIONS) == VERSION


class SchemaProblem(Exception):
    """The file is not a journal this version can use; the message is one closed line."""


def prepare(connection: sqlite3.Connection) -> None:
    """Check the file is a journal (or empty) and bring its schema to :data:`VERSION`.

    Runs in autocommit mode; takes the write lock for the whole check-and-migrate.
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        application_id, version, tables = _header(connection)
        if application_id != APPLICATION_ID and (application_id != 0 or tables or version):
            raise SchemaProblem("not a subagents journal (another program's SQLite file)")
        if version > VERSION:
            raise SchemaProblem(
                f"written by a newer subagent-supervisor (journal schema {version}; "
                f"this one knows up to {VERSION})"
            )
        for step in MIGRATIONS[version:]:
            for statement in step:
                connection.execute(statement)
        if version < VERSION or application_id != APPLICATION_ID:
            connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            connection.execute(f"PRAGMA user_version = {VERSION}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


_HEADER = (
    "SELECT (SELECT application_id FROM pragma_application_id),"
    " (SELECT user_version FROM pragma_user_version),"
    " (SELECT count(*) FROM sqlite_master)"
)
"""The file's identity, version and table count read in one statement: one snapshot.  Read
one by one, another process creating the journal in between (its tables committed after
our read of an application id still 0) made a new journal look like another program's."""


def _header(connection: sqlite3.Connection) -> tuple[int, int, int]:
    application_id, version, tables = connection.execute(_HEADER).fetchone()
    return int(application_id), int(version), int(tables)


def check_ours(connection: sqlite3.Connection) -> None:
    """Refuse a SQLite file of another program before anything is written to it."""
    application_id, version, tables = _header(connection)
    if application_id == APPLICATION_ID:
        return
    if application_id != 0 or tables or version:
        raise SchemaProblem("not a subagents journal (another program's SQLite file)")


def check_readable(connection: sqlite3.Connection) -> None:
    """The reader's check: a journal of a version this one can read (no write lock taken)."""
    application_id, version, _tables = _header(connection)
    if application_id != APPLICATION_ID:
        raise SchemaProblem("not a subagents journal (another program's SQLite file)")
    if version > VERSION:
        raise SchemaProblem(
            f"written by a newer subagent-supervisor (journal schema {version}; "
            f"this one knows up to {VERSION})"
        )
