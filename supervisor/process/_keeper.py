"""The host side of the keeper: one watcher process per supervising host.

The keeper (``_keeper_main``) is started with the first registered run, in its own
session (terminal signals do not reach it), with an environment that carries no run
tag and no host identity (so no sweep or tree snapshot ever takes it for a run's).
It holds the read end of a pipe; this process holds the only write end
(close-on-exec, and dropped in a forked child).  Each run is announced as it starts
and withdrawn once its teardown has proved the tree gone.  When this process dies
in any way, the kernel closes the write end and the keeper ends every run still
announced, then exits; when nothing is announced it just exits.

A run whose teardown could not prove its tree gone stays announced, so the keeper
still ends what is left when the host exits.  If the keeper itself was killed, the
next announcement starts a new one and replays every live run.
"""

from __future__ import annotations

import contextlib
import logging
import os
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


class _State:
    lock = threading.Lock()
    process: subprocess.Popen[bytes] | None = None
    write_fd: int | None = None
    runs: ClassVar[dict[tuple[str, int], str]] = {}


def keeper_pid() -> int | None:
    """The pid of this process's keeper, if one is running."""
    process = _State.process
    if process is None or process.poll() is not None:
        return None
    return process.pid


def register_run(run_id: str, pgid: int, leaves: Sequence[Path] = ()) -> None:
    """Announce a live run: its child's process group and, in cgroup mode, its leaves
    (the v2 leaf first, then any cgroup v1 leaves), tab-separated."""
    run_id = "".join(run_id.split()) or "-"
    leader_start = start_time(pgid) or 0
    line = f"+run {run_id} {pgid} {leader_start}"
    if leaves:
        text = "\t".join(str(leaf) for leaf in leaves)
        if "\n" in text:
            log.warning("cgroup leaf path holds a newline: the keeper gets the run without it")
        else:
            line += f" {text}"
    with _State.lock:
        _State.runs[(run_id, pgid)] = line + "\n"
        _send(line + "\n")


def unregister_run(run_id: str, pgid: int) -> None:
    """Withdraw a run whose whole tree is gone."""
    run_id = "".join(run_id.split()) or "-"
    with _State.lock:
        if _State.runs.pop((run_id, pgid), None) is not None and _State.write_fd is not None:
            _send(f"-run {run_id} {pgid}\n", replay=False)


def _send(line: str, *, replay: bool = True) -> None:
    """Write one command, starting (or restarting) the keeper as needed.  Lock held."""
    if _State.write_fd is not None and _write(_State.write_fd, line):
        return
    if not replay:
        return
    _stop()
    try:
        _start()
    except OSError as exc:
        log.warning("keeper could not be started: %r", exc)
        return
    assert _State.write_fd is not None
    if not _write(_State.write_fd, "".join(_State.runs.values())):
        log.warning("keeper did not take the runs")


def _write(fd: int, data: str) -> bool:
    payload = data.encode()
    try:
        while payload:
            written = os.write(fd, payload)
            payload = payload[written:]
    except OSError:
        return False
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
    _State.process, _State.write_fd = process, write_fd
    write_marker(host, HostIdentity(process.pid, start_time(process.pid) or 0))


def _stop() -> None:
    if _State.write_fd is not None:
        os.close(_State.write_fd)
        _State.write_fd = None
    if _State.process is not None:
        _State.process.poll()  # reap a keeper that died
        _State.process = None


def _forget_in_child() -> None:
    """A forked child is not the host: it drops the write end and the bookkeeping."""
    _State.lock = threading.Lock()
    if _State.write_fd is not None:
        with contextlib.suppress(OSError):
            os.close(_State.write_fd)
    _State.write_fd = None
    _State.process = None
    _State.runs = {}


os.register_at_fork(after_in_child=_forget_in_child)
