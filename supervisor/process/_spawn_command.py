"""What is actually spawned for a child: the program checked beforehand, wrapped by what
must run before it (the containment's entry, the parent-death signal, the confining
shim), and a confined run's own ``TMPDIR``."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

from supervisor.process._confine import (
    is_root,
    landlock_steps,
    program_prefixes,
    root_steps,
    shim_command,
    view_steps,
)
from supervisor.process._containment import Enclosure
from supervisor.process._host import pdeathsig_argv
from supervisor.process._spawn_spec import EnclosureFailed, SpawnFailed, SpawnSpec


def shimmed(spec: SpawnSpec) -> bool:
    """Whether the confining shim starts this child (it sets the parent-death signal itself)."""
    return spec.confinement is not None or is_root()


def spawn_command(spec: SpawnSpec, enclosure: Enclosure, tmpdir: Path | None) -> list[str]:
    """The argv actually spawned: the program, wrapped by whatever must run before it.

    The one place where prefixes are composed.  A plain child: the containment's entry
    shim, then the parent-death signal (``setpriv``), then the program.  A confined or
    root child: the confining shim (``_shim.py``) does all of it in one process (enter
    the groups, the namespaces and cgroup view, the bounding set, the parent-death
    signal, Landlock), then becomes the program.
    """
    if not shimmed(spec):
        return enclosure.command([*pdeathsig_argv(), *spec.argv])
    steps = root_steps(spec.keep_capabilities)
    steps.append(f"pdeathsig={os.getpid()}")
    if spec.confinement is not None:
        assert tmpdir is not None
        prefixes = program_prefixes(spec.argv[0], spec.env.get("PATH"))
        steps += landlock_steps(spec.confinement, tmpdir=tmpdir, program_dirs=prefixes)
    entry = getattr(enclosure, "shim_steps", None)
    if entry is not None:  # the shim enters the groups too
        return shim_command([*entry(), *steps], spec.argv)
    if enclosure.mode == "process-tree" and is_root():  # no group of its own: no cgroup mount to see
        steps = ["ns=mount", *view_steps(None), *steps]
    return enclosure.command(shim_command(steps, spec.argv))


def private_tmpdir(spec: SpawnSpec, enclosure: Enclosure) -> Path | None:
    """A confined run's own ``TMPDIR`` (the only temporary folder it may write), removed with it."""
    if spec.confinement is None:
        return None
    try:
        return Path(tempfile.mkdtemp(prefix=f"subagent-{spec.run_tag[:12]}-"))
    except OSError as exc:
        enclosure.release()
        raise EnclosureFailed(f"could not make the run's TMPDIR: {exc!r}") from exc


def release(enclosure: Enclosure, tmpdir: Path | None) -> None:
    enclosure.release()
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


def check_program(spec: SpawnSpec) -> None:
    """Fail a program that cannot be executed here, with the error ``execve`` would give:
    an entry shim in front of it would otherwise turn it into an exit status."""
    program = spec.argv[0]
    if os.sep in program:
        where: str | None = os.path.join(spec.cwd, program)
    else:
        where = shutil.which(program, path=spec.env.get("PATH", os.defpath))
    error = _exec_error(where)
    if error is not None:
        exc = OSError(error, os.strerror(error), program)
        raise SpawnFailed(f"could not start {program!r}: {exc!r}") from exc


def _exec_error(where: str | None) -> int | None:
    """The errno ``execve(where)`` would fail with, as far as it can be told beforehand.

    One ``stat`` for what ``exists`` and ``isdir`` each asked, and the first bytes read
    without a buffered file object (every spawn asks: 7.5 -> 4 us)."""
    if where is None:
        return errno.ENOENT
    try:
        mode = os.stat(where).st_mode
    except (OSError, ValueError):  # as ``os.path.exists`` answers False
        return errno.ENOENT
    if stat.S_ISDIR(mode) or not os.access(where, os.X_OK):
        return errno.EACCES
    try:
        fd = os.open(where, os.O_RDONLY | os.O_CLOEXEC)
        try:
            magic = os.read(fd, 4)
        finally:
            os.close(fd)
    except OSError:  # executable but unreadable to us: only execve can tell
        return None
    if magic != b"\x7fELF" and not magic.startswith(b"#!"):
        return errno.ENOEXEC
    return None
