"""The host side of the keeper: one watcher process per supervising host.

The keeper (``_keeper_main``) is started with the first registered run, in its own
session (terminal signals do not reach it), with an environment that carries no run
tag and no host identity (so no sweep or tree snapshot ever takes it for a run's).
It holds the read end of a pipe; this process holds the only write end
(close-on-exec, and dropped in a forked child).  Each run is announced as it starts
and withdrawn once its teardown has proved the tree gone; a host ceiling's groups are announced
when the ceiling is set (the keeper then starts with the ceiling, before any run).  When this process dies
in any way, the kernel closes the write end and the keeper ends every run still
announced, removes this host's cgroup groups, then exits.

A run whose teardown could not prove its tree gone stays announced, so the keeper
still ends what is left when the host exits.  If the keeper itself was killed, the
next message starts a new one and replays every live run.

Nothing here ever blocks the caller (the event loop's thread, in a run's spawn and
teardown).  The write end is non-blocking: what a stopped or slow keeper cannot take
yet waits in memory and is written by a short-lived thread once the pipe drains.
While it waits, an announcement and the withdrawal of the same run cancel out, so
the backlog holds at most the live runs plus the withdrawals of runs the keeper
already knows.  Withdrawals are not urgent (a withdrawn run's tree is gone; the
keeper checks a group's leader before it signals it): they travel with the next
announcement, or once :data:`MAX_DEFERRED` have piled up, or at exit.  So a run
costs one write to the pipe, not two.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import select
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from supervisor.process._env import HOST_TAG_VARIABLE, RUN_TAG_VARIABLE
from supervisor.process._host import HostIdentity, this_host
from supervisor.process._keeper_main import start_time
from supervisor.process._markers import marker_dir, write_marker

log = logging.getLogger("supervisor")

KEEPER_PROGRAM = Path(__file__).with_name("_keeper_main.py")
# Withdrawals kept back at most before they are written on their own.
MAX_DEFERRED = 64
# How often a waiting flusher looks again whether its pipe is still the keeper's.
_FLUSH_POLL_MS = 1000


class _State:
    lock = threading.Lock()
    process: subprocess.Popen[bytes] | None = None
    write_fd: int | None = None
    runs: ClassVar[dict[tuple[str, int], str]] = {}  # live runs: their announcement
    groups: ClassVar[list[str]] = []  # the host's own groups announced before any run: their announcement
    queue: ClassVar[list[str]] = []  # messages not yet handed to the pipe, in order
    unsent: bytes = b""  # what a short write left of messages already begun: goes first
    deferred = 0  # withdrawals in the queue
    flusher: threading.Thread | None = None


def keeper_pid() -> int | None:
    """The pid of this process's keeper, if one is running."""
    process = _State.process
    if process is None or process.poll() is not None:
        return None
    return process.pid


def register_run(
    run_id: str, pgid: int, leaves: Sequence[Path] = (), *, leader_start: int | None = None
) -> None:
    """Announce a live run: its child's process group and, in cgroup mode, its leaves
    (the v2 leaf first, then any cgroup v1 leaves), tab-separated.  ``leader_start``: the
    child's start time when the caller read it already (else it is read here)."""
    run_id = "".join(run_id.split()) or "-"
    if leader_start is None:
        leader_start = start_time(pgid) or 0
    line = f"+run {run_id} {pgid} {leader_start}"
    if leaves:
        text = "\t".join(str(leaf) for leaf in leaves)
        if "\n" in text:
            log.warning("cgroup leaf path holds a newline: the keeper gets the run without it")
        else:
            line += f" {text}"
    line += "\n"
    with _State.lock:
        _State.runs[(run_id, pgid)] = line
        _State.queue.append(line)
        _flush()


def register_groups(groups: Sequence[Path]) -> None:
    """Announce this host's own cgroup groups (a host ceiling's, made before any run), starting
    the keeper if needed: it removes them when this process dies, even before its first run.

    Called on the caller's thread where the ceiling is set (the CLI: before any run), never from
    the worker threads that make runs' groups while other children are being spawned.
    """
    lines = [f"+group {group}\n" for group in groups if "\n" not in str(group)]
    with _State.lock:
        fresh = [line for line in lines if line not in _State.groups]
        if not fresh:
            return
        _State.groups.extend(fresh)
        _State.queue.extend(fresh)
        _flush()


def unregister_run(run_id: str, pgid: int) -> None:
    """Withdraw a run whose whole tree is gone."""
    run_id = "".join(run_id.split()) or "-"
    with _State.lock:
        line = _State.runs.pop((run_id, pgid), None)
        if line is None or _State.write_fd is None:
            return
        if line in _State.queue:  # the keeper never heard of it: both cancel out
            _State.queue.remove(line)
            return
        _State.queue.append(f"-run {run_id} {pgid}\n")
        _State.deferred += 1
        if _State.deferred >= MAX_DEFERRED:
            _flush()


def _flush() -> None:
    """Hand the queue to the pipe without blocking, starting the keeper if needed.  Lock held."""
    if _State.flusher is not None:
        return  # the pipe is full: the flusher writes once it drains
    if _State.write_fd is None:
        if not _State.runs and not _State.groups:
            _State.queue.clear()
            _State.deferred = 0
            return
        if not _restart():
            return
    if not _write_some():
        _start_flusher()


def _write_some() -> bool:
    """One non-blocking write of what is pending; whether all of it went.  Lock held."""
    fd = _State.write_fd
    assert fd is not None
    data = _State.unsent + "".join(_State.queue).encode()
    _State.queue.clear()
    _State.deferred = 0
    written = 0
    try:
        if data:
            written = os.write(fd, data)
    except BlockingIOError:
        written = 0
    except OSError:  # the keeper is gone (EPIPE): a new one gets every live run
        _State.unsent = b""
        _stop()
        if (_State.runs or _State.groups) and _restart():
            return _write_some()
        return True
    _State.unsent = data[written:]
    return not _State.unsent


def _start_flusher() -> None:
    """A thread that writes the rest once the pipe drains.  Lock held."""
    fd = _State.write_fd
    assert fd is not None
    thread = threading.Thread(target=_drain, args=(fd,), name="subagents-keeper-flush", daemon=True)
    _State.flusher = thread
    thread.start()


def _drain(fd: int) -> None:
    """Wait (off the event loop) until the keeper's pipe takes more, and write it."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    while True:
        poller.poll(_FLUSH_POLL_MS)
        with _State.lock:
            if _State.flusher is not threading.current_thread():
                return  # the keeper was stopped or replaced: whoever did it writes
            if _State.write_fd != fd:
                _State.flusher = None
                return
            if _write_some():
                _State.flusher = None
                return
            if _State.write_fd != fd:  # replaced while writing (it had died): wait on the new pipe
                _State.flusher = None
                if _State.write_fd is not None:
                    _start_flusher()
                return


def _restart() -> bool:
    """Start a keeper and queue every live run for it.  Lock held."""
    _stop()
    try:
        _start()
    except OSError as exc:
        log.warning("keeper could not be started: %r", exc)
        return False
    _State.queue = [*_State.groups, *_State.runs.values()]
    _State.unsent = b""
    _State.deferred = 0
    return True


def _start() -> None:
    read_fd, write_fd = os.pipe()  # both close-on-exec: no child but the keeper gets an end
    env = {k: v for k, v in os.environ.items() if k not in (RUN_TAG_VARIABLE, HOST_TAG_VARIABLE)}
    host = this_host()
    directory = marker_dir()
    marker = [] if directory is None else [str(directory / f"{host.pid}-{host.start}")]
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(KEEPER_PROGRAM), HOST_TAG_VARIABLE, str(host), *marker],
            stdin=read_fd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            env=env,
            start_new_session=True,
        )
    except OSError:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    os.set_blocking(write_fd, False)
    _State.process, _State.write_fd = process, write_fd
    write_marker(host, HostIdentity(process.pid, start_time(process.pid) or 0))


def _stop() -> None:
    _State.flusher = None  # a waiting flusher sees it is no longer wanted
    if _State.write_fd is not None:
        with contextlib.suppress(OSError):
            os.close(_State.write_fd)
        _State.write_fd = None
    if _State.process is not None:
        _State.process.poll()  # reap a keeper that died
        _State.process = None


def _flush_at_exit() -> None:
    """Best effort, never blocking: hand the withdrawals kept back to the keeper."""
    with _State.lock:
        if _State.write_fd is not None and _State.flusher is None and (_State.queue or _State.unsent):
            with contextlib.suppress(OSError):
                os.write(_State.write_fd, _State.unsent + "".join(_State.queue).encode())


def _forget_in_child() -> None:
    """A forked child is not the host: it drops the write end and the bookkeeping."""
    _State.lock = threading.Lock()
    if _State.write_fd is not None:
        with contextlib.suppress(OSError):
            os.close(_State.write_fd)
    _State.write_fd = None
    _State.process = None
    _State.runs = {}
    _State.groups = []
    _State.queue = []
    _State.unsent = b""
    _State.deferred = 0
    _State.flusher = None


atexit.register(_flush_at_exit)
os.register_at_fork(after_in_child=_forget_in_child)
