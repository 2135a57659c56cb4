"""Working-directory resolution.  The supervisor's own cwd is never a fallback."""

from __future__ import annotations

import os
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
    """The configured cwd wins; else the request's parent cwd, validated now; else a loud error."""
    if configured is not None:
        return configured
    if parent_cwd is None:
        raise CwdError("no working directory for the child: configure cwd or pass the parent's parent_cwd")
    return check_directory(Path(parent_cwd), "parent cwd")
