"""Host markers: which hosts have a keeper that has not finished yet.

A host writes ``<marker dir>/<pid>-<start>`` (holding its keeper's ``<pid>:<start>``)
when it starts a keeper, and the keeper removes it when it exits, after ending the
host's runs if it had to.  A marker whose host and keeper are both gone means the
keeper never finished (both were killed): only then does the sweep at a host's
first spawn read every process's environment.  ``subagents reap`` always does.

The directory is per user (``subagent-supervisor-<uid>``, mode 0700, owned by us,
not a symlink) in ``/run`` when writable, else ``/dev/shm``, else the temporary
directory.  Without a usable directory the start sweep reads the process table.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from supervisor.process._host import HostIdentity, host_is_alive


def marker_dir() -> Path | None:
    """This user's marker directory, created if needed; None when none is safe to use."""
    uid = os.getuid()
    for base in (Path("/run"), Path("/dev/shm"), Path(tempfile.gettempdir())):
        if not os.access(base, os.W_OK | os.X_OK):
            continue
        path = base / f"subagent-supervisor-{uid}"
        with contextlib.suppress(FileExistsError, OSError):
            path.mkdir(mode=0o700)
        try:
            info = path.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid and stat.S_IMODE(info.st_mode) == 0o700:
            return path
    return None


def write_marker(host: HostIdentity, keeper: HostIdentity) -> Path | None:
    """Record that ``host`` has the keeper ``keeper``; the marker's path, or None."""
    directory = marker_dir()
    if directory is None:
        return None
    path = directory / f"{host.pid}-{host.start}"
    try:
        path.write_text(str(keeper))
    except OSError:
        return None
    return path


def unfinished_hosts() -> list[HostIdentity] | None:
    """Dead hosts whose keeper is gone without removing its marker; None if markers are unusable."""
    directory = marker_dir()
    if directory is None:
        return None
    found = []
    for path in directory.iterdir():
        pid, _, start = path.name.partition("-")
        host = HostIdentity.parse(f"{pid}:{start}")
        if host is None or host_is_alive(host):
            continue
        try:
            keeper = HostIdentity.parse(path.read_text().strip())
        except OSError:
            continue
        if keeper is not None and host_is_alive(keeper):
            continue  # it is still ending the host's runs, and removes the marker itself
        found.append(host)
    return found


def forget(hosts: list[HostIdentity]) -> None:
    """Remove the markers of ``hosts`` (their leftovers have been swept)."""
    directory = marker_dir()
    if directory is None:
        return
    for host in hosts:
        with contextlib.suppress(OSError):
            (directory / f"{host.pid}-{host.start}").unlink()
