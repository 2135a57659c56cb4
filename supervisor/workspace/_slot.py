"""A run's workspace (``workspace = "worktree"``): made before the spawn, counted and kept or
removed after the teardown, and found again when its host died.

Worktrees live in the supervisor's own folder (``$XDG_STATE_HOME/subagent-supervisor/
worktrees``, default ``~/.local/state/...``), one per run, named by the run id.  While a
run uses one, a marker beside it (``<run id>.json``) names the host (pid and start time)
and the repository: the keeper (when its host dies with runs alive), the sweep before a
host's first spawn and ``subagents reap`` remove the worktree of a dead host and prune
the repository (``_keeper_main.remove_worktrees``), holding the worktree lock named in the
marker (``common_dir``) as a run does.  A worktree the run kept and reported
loses its marker: it is the user's from then on.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from supervisor._public import home
from supervisor.process import this_host
from supervisor.process._confine import Confinement
from supervisor.process._keeper_main import worktrees_dir
from supervisor.workspace._git import Checkout, GitFailed, add_worktree, changes, remove_worktree

log = logging.getLogger("supervisor")


class WorkspaceMode(enum.StrEnum):
    SHARED = "shared"
    WORKTREE = "worktree"


class WorkspaceKeep(enum.StrEnum):
    CHANGED = "changed"
    ALWAYS = "always"
    NEVER = "never"


class Workspace(BaseModel):
    """A run's own worktree (``workspace = "worktree"``): where, from what, and how much changed.

    The supervisor's own path and commit ids and ``git diff --numstat`` counts only:
    nothing here is text the child wrote (no file name).
    """

    # defer_build: the schema is built on first validation, not when a command imports it.
    model_config = ConfigDict(frozen=True, defer_build=True)

    path: str
    """The worktree (it exists afterwards only when ``kept``)."""
    base: str
    """The commit it was made at (``workspace_base`` resolved)."""
    head: str
    """The commit checked out at the end (differs from ``base`` when the agent committed)."""
    changed: bool
    """Commits, or any file added, changed or removed (untracked files count)."""
    files_changed: int = Field(ge=0)
    insertions: int = Field(ge=0)
    deletions: int = Field(ge=0)
    kept: bool
    """Whether the worktree was left in place (``workspace_keep``)."""


class WorkspaceFailed(Exception):
    """The run's worktree could not be made (not in a git work tree, an unknown base...).

    :attr:`line` is a closed-fact line for the diagnostic; git's own text is the cause's."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(text)
        self.line = f"Subagent workspace (worktree: {reason})"


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".json")


@dataclass
class RunWorkspace:
    """One run's worktree, from :meth:`enter` to :meth:`leave`."""

    mode: WorkspaceMode
    base: str = "HEAD"
    keep: WorkspaceKeep = WorkspaceKeep.CHANGED
    checkout: Checkout | None = None
    facts: Workspace | None = None

    async def enter(self, cwd: Path, run_id: str) -> Path:
        """The folder the run starts in: ``cwd`` itself, or the same folder of a new worktree."""
        if self.mode == WorkspaceMode.SHARED:
            return cwd
        root = worktrees_dir()
        path = root / run_id
        try:
            root.mkdir(parents=True, exist_ok=True)
            _marker(path).write_text(json.dumps({"host": str(this_host()), "cwd": str(cwd)}))
            self.checkout = await add_worktree(cwd, self.base, path)
            _marker(path).write_text(
                json.dumps(
                    {
                        "host": str(this_host()),
                        "repository": str(self.checkout.repository),
                        "common_dir": str(self.checkout.common_dir),  # where the worktree lock is
                    }
                )
            )
        except (OSError, GitFailed) as exc:
            with contextlib.suppress(OSError):
                _marker(path).unlink()
            reason = exc.reason if isinstance(exc, GitFailed) else "its folder could not be made"
            raise WorkspaceFailed(f"could not make the run's worktree: {exc}", reason) from exc
        return self.checkout.cwd

    def confinement(self, confinement: Confinement | None) -> Confinement | None:
        """A confined run in a worktree may also write the worktree's own git files and the
        repository's objects (a commit), and read the repository's git directory."""
        if confinement is None or self.checkout is None:
            return confinement
        checkout = self.checkout
        return Confinement(
            writable=(*confinement.writable, checkout.admin_dir, checkout.common_dir / "objects"),
            readable=(*confinement.readable, checkout.common_dir),
        )

    async def leave(self, *, quiescent: bool) -> Workspace | None:
        """Count what changed, then keep or remove the worktree (kept while anything of the run
        may still be alive in it)."""
        checkout = self.checkout
        if checkout is None or self.facts is not None:
            return self.facts
        try:
            found = await changes(checkout)
        except (GitFailed, OSError, ValueError) as exc:
            log.warning("workspace %s: could not count its changes: %r", checkout.path, exc)
            found = None
        changed = True if found is None else found.changed(checkout.base)
        kept = (
            not quiescent
            or self.keep == WorkspaceKeep.ALWAYS
            or (self.keep == WorkspaceKeep.CHANGED and changed)
        )
        if not kept:
            try:
                await remove_worktree(checkout)
            except (GitFailed, OSError) as exc:
                log.warning("workspace %s: could not remove it: %r", checkout.path, exc)
                kept = checkout.path.exists()
        if quiescent:  # the user's now (kept and reported), or gone
            with contextlib.suppress(OSError):
                _marker(checkout.path).unlink()
        self.facts = Workspace(
            path=str(checkout.path),
            base=checkout.base,
            head=found.head if found else checkout.base,
            changed=changed,
            files_changed=found.files_changed if found else 0,
            insertions=found.insertions if found else 0,
            deletions=found.deletions if found else 0,
            kept=kept,
        )
        return self.facts


home("supervisor", Workspace)
