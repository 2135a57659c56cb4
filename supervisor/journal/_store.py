"""The journal file and its one writer thread.

Why a thread: SQLite calls block, and a batch of 10,000 runs writes tens of thousands
of rows.  Runs only put a statement on a queue (a few microseconds on the event loop);
one daemon thread per journal takes whatever is queued within :data:`COALESCE` (50 ms),
writes it in one ``BEGIN IMMEDIATE`` transaction and commits, again and again.  A row
therefore reaches the file within about 50 ms of the fact it records, and each commit is atomic in WAL mode: a
supervising process SIGKILLed at any moment leaves a journal that reads, holding every
committed row (``synchronous = NORMAL`` loses nothing to a process crash; only a power
loss may drop the last commits).

Several supervising processes may write to one file: each transaction takes the write
lock with ``BEGIN IMMEDIATE`` under a busy timeout, and a batch that still finds the
file locked is retried, never dropped, for :data:`BUSY_PATIENCE` seconds.

Failure is never the run's: a journal that cannot be opened or written (a corrupt or
foreign file, a read-only or full disk) says so in one line, once, through
``on_problem``, and from then on takes no more rows.  Runs go on, unjournaled.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from supervisor._public import home
from supervisor.journal import _schema

log = logging.getLogger("supervisor")

BUSY_TIMEOUT_MS = 5000
BUSY_PATIENCE = 120.0  # seconds a batch is retried while other writers hold the lock
MAX_BATCH = 256  # statements per transaction: short ones, the GIL handed back between them
COALESCE = 0.05  # seconds: the longest a queued row waits for its commit

Statement = tuple[str, Sequence[Any]]


def default_path(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/subagent-supervisor/journal.db`` (``~/.local/state`` by default)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME", "").strip()
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "subagent-supervisor" / "journal.db"


def reason_of(exc: BaseException, path: Path | None = None) -> str:
    """A closed, short reason for an OS or SQLite failure (never a path or child text).

    SQLite reports a write refused for want of space as an I/O error on some paths (the
    WAL on tmpfs): with ``path``, an I/O error on a file system with no free block is
    ``disk full``."""
    if isinstance(exc, _schema.SchemaProblem):
        return str(exc)
    if isinstance(exc, OSError):
        return os.strerror(exc.errno).lower() if exc.errno else "an OS error"
    text = str(exc).lower()
    for needle, reason in (
        ("readonly", "read-only"),
        ("read-only", "read-only"),
        ("disk is full", "disk full"),
        ("disk i/o", "disk I/O error"),
        ("not a database", "corrupt or not a SQLite file"),
        ("malformed", "corrupt"),
        ("locked", "locked by another process for too long"),
        ("unable to open", "cannot open the file"),
    ):
        if needle in text:
            return reason
    return "SQLite error"


def _reason(exc: BaseException, path: Path) -> str:
    reason = reason_of(exc)
    if reason == "disk I/O error":
        with contextlib.suppress(OSError):
            if os.statvfs(path.parent).f_bavail == 0:
                return "disk full"
    return reason


def connect(path: Path, *, create: bool) -> sqlite3.Connection:
    """A connection in WAL mode with a busy timeout; the file created mode 0600."""
    if create:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_mode & 0o077:
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    uri = path.resolve().as_uri() + ("" if create else "?mode=rw")
    connection = sqlite3.connect(
        uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
    )
    try:
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if create:
            _schema.check_ours(connection)  # before WAL mode changes another program's file
            _retry_busy(lambda: connection.execute("PRAGMA journal_mode = WAL").fetchone())
            connection.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        connection.close()
        raise
    return connection


def _retry_busy(call: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + BUSY_PATIENCE
    while True:
        try:
            return call()
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class Journal:
    """One journal file: where runs are written as they happen, and read back.

    ``Journal(path)`` opens (creating) the file; a problem is said once through
    ``on_problem`` (default: the ``supervisor`` logger) and leaves a journal that takes
    no rows (:attr:`problem` says why).  ``text=True`` keeps each turn's task and answer
    (capped like the output); otherwise no text of the task, the answer or the child's
    is written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        text: bool = False,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.text = text
        self._on_problem = on_problem
        self._problem: str | None = None
        self._queue: queue.SimpleQueue[Statement | threading.Event | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._hurry = threading.Event()  # someone waits (flush, close): commit without gathering
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        try:
            self._connection = connect(self.path, create=True)
            _retry_busy(lambda: _schema.prepare(self._connection))  # type: ignore[arg-type]
        except (OSError, sqlite3.Error, _schema.SchemaProblem) as exc:
            self._fail(exc)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- state -----------------------------------------------------------------------------

    @property
    def problem(self) -> str | None:
        """Why this journal takes no rows (one closed line), or None while it writes."""
        return self._problem

    @property
    def writing(self) -> bool:
        return self._problem is None

    def _fail(self, exc: BaseException) -> None:
        if self._problem is not None:
            return
        self._problem = f"journal {self.path}: {_reason(exc, self.path)}; runs are not journaled"
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(sqlite3.Error):
                connection.close()
        say = self._on_problem
        if say is None:
            log.warning("%s", self._problem)
        else:
            say(self._problem)

    # -- writing ---------------------------------------------------------------------------

    def write(self, sql: str, params: Sequence[Any]) -> None:
        """Queue one statement (returns at once; the writer thread commits it)."""
        if self._problem is not None:
            return
        if self._thread is None:
            self._start_writer()
        self._queue.put((sql, params))

    def _start_writer(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._writer, name="subagents-journal", daemon=True)
            self._thread = thread
            thread.start()
            ref = weakref.ref(self)
            atexit.register(_close_at_exit, ref)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is committed (or dropped by a failure)."""
        if self._thread is None or not self._thread.is_alive():
            return True
        done = threading.Event()
        self._queue.put(done)
        self._hurry.set()  # after the marker is queued: the writer's next gathering sees it
        return done.wait(timeout)

    def close(self) -> None:
        """Commit what is queued, stop the writer thread, close the file.  Idempotent."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            self._hurry.set()
            thread.join()
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _writer(self) -> None:
        """Commit what is queued, in transactions at most :data:`COALESCE` apart: a row
        waits at most that long for its commit, and a batch of runs costs a few commits a
        second instead of one per fact.  The thread sleeps between commits rather than
        waking for every row, so the event loop rarely has to hand it the GIL.  A flush or a
        close cuts the gathering short: a command's last rows are committed when it ends, not
        up to :data:`COALESCE` later (its exit waited for that)."""
        stop = False
        while not stop:
            first = self._queue.get()
            if first is not None and not isinstance(first, threading.Event):
                self._hurry.wait(COALESCE)  # let the rows of this moment gather
            self._hurry.clear()  # a flush or close from now on hurries the next gathering
            batch: list[Statement] = []
            markers: list[threading.Event] = []
            item: Statement | threading.Event | None = first
            while True:
                if item is None:
                    stop = True
                elif isinstance(item, threading.Event):
                    markers.append(item)
                else:
                    batch.append(item)
                if stop or len(batch) >= MAX_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch and self._problem is None:
                try:
                    _retry_busy(functools.partial(self._commit, batch))
                except (OSError, sqlite3.Error) as exc:
                    self._fail(exc)
            for marker in markers:
                marker.set()

    def _commit(self, batch: Sequence[Statement]) -> None:
        """The one write seam: ``batch`` in one transaction, or none of it."""
        connection = self._connection
        if connection is None:
            return
        connection.execute("BEGIN IMMEDIATE")
        try:
            start = 0
            while start < len(batch):  # runs of one statement go in one executemany (the audit rows)
                sql = batch[start][0]
                end = start + 1
                while end < len(batch) and batch[end][0] is sql:
                    end += 1
                if end - start == 1:
                    connection.execute(sql, batch[start][1])
                else:
                    connection.executemany(sql, [params for _, params in batch[start:end]])
                start = end
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise


home("supervisor", Journal)


def _close_at_exit(ref: weakref.ref[Journal]) -> None:
    journal = ref()
    if journal is not None:
        journal.close()
