"""Working-directory resolution.  The supervisor's own cwd is never a fallback.

A front-end that checks a caller's directory (``subagents mcp`` against its roots) can
*pin* it: :class:`PinnedDirectory` holds the checked directory open (``O_PATH``) from
the check on, and a run started inside :func:`pinned` with that directory as its
parent cwd starts in the directory held (the child's ``chdir`` goes through
``/proc/self/fd/N``), never in whatever the path names by then.  A folder swapped for
a symlink after the check therefore cannot move the run elsewhere; a checked folder
that was itself moved or deleted before the start fails the start as a bad cwd.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path


class CwdError(ValueError):
    """A working directory is missing or unusable.  Its text names the path: host/CLI only."""


def check_directory(path: Path, label: str) -> Path:
    """Valid = absolute, a directory, and enterable (X_OK)."""
    if not path.is_absolute():
        raise CwdError(f"{label} must be an absolute path: {path}")
    if not path.is_dir() or not os.access(path, os.X_OK):
        raise CwdError(f"{label} is not an accessible directory: {path}")
    return path


def resolve_configured_cwd(cwd: str | os.PathLike[str], base_dir: Path) -> Path:
    """A configured cwd, made absolute against ``base_dir`` and validated (at load)."""
    if str(cwd) == "":
        raise CwdError("cwd must not be empty; omit it to use the parent's working directory")
    candidate = Path(cwd)
    if not candidate.is_absolute():
        candidate = base_dir / candidate
    return check_directory(Path(os.path.normpath(candidate)), "cwd")


def resolve_run_cwd(configured: Path | None, parent_cwd: Path | None) -> Path:
    """The configured cwd wins; else the request's parent cwd, validated now; else a loud error.

    A parent cwd pinned for this start (:func:`pinned`) is validated on the directory held:
    it must still be at the path that was checked.
    """
    if configured is not None:
        return configured
    if parent_cwd is None:
        raise CwdError("no working directory for the child: configure cwd or pass the parent's parent_cwd")
    pin = _PINNED.get()
    if pin is not None and pin.path == Path(parent_cwd):
        if not pin.still_there():
            raise CwdError(f"parent cwd was moved or replaced after it was checked: {pin.path}")
        if not pin.accessible():
            raise CwdError(f"parent cwd is not an accessible directory: {pin.path}")
        return pin.path
    return check_directory(Path(parent_cwd), "parent cwd")


class PinnedDirectory:
    """A directory held open since it was checked (see the module docstring)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def open(cls, path: Path) -> PinnedDirectory:
        """Hold the directory ``path`` names now (symlinks followed); ``path`` becomes the
        real path of what is held.  Raises ``OSError`` (not a directory, missing) or
        ``ValueError`` (a NUL byte, text no path can hold)."""
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            os.close(fd)
            raise
        return cls(Path(real), fd)

    @property
    def held(self) -> str:
        """A path to the directory held, valid in this process and in a child before its exec."""
        if self._fd is None:
            raise ValueError("the pinned directory was released")
        return f"/proc/self/fd/{self._fd}"

    def still_there(self) -> bool:
        """Whether the directory held is still the one :attr:`path` names."""
        try:
            return os.readlink(self.held) == str(self.path)
        except (OSError, ValueError):
            return False

    def accessible(self) -> bool:
        """Whether the directory held can be entered (X_OK)."""
        try:
            return os.access(self.held, os.X_OK)
        except ValueError:
            return False

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __repr__(self) -> str:
        return f"<PinnedDirectory {self.path} fd={self._fd}>"


_PINNED: ContextVar[PinnedDirectory | None] = ContextVar("supervisor_pinned_cwd", default=None)


@contextlib.contextmanager
def pinned(directory: PinnedDirectory | None) -> Iterator[None]:
    """Inside: a run whose parent cwd is ``directory.path`` starts in the directory held."""
    token = _PINNED.set(directory)
    try:
        yield
    finally:
        _PINNED.reset(token)


def spawn_cwd(cwd: Path) -> str | Path:
    """Where to start a child whose workspace is ``cwd``: the directory held when ``cwd``
    is pinned for this start, else ``cwd`` itself."""
    pin = _PINNED.get()
    if pin is not None and pin.path == cwd:
        with contextlib.suppress(ValueError):
            return pin.held
    return cwd
