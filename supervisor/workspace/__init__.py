"""Workspaces: a run's own git worktree (``workspace = "worktree"``), its facts, and the sweep of
the worktrees dead hosts left."""

from __future__ import annotations

from supervisor.workspace._git import GitFailed as GitFailed
from supervisor.workspace._slot import RunWorkspace as RunWorkspace
from supervisor.workspace._slot import Workspace as Workspace
from supervisor.workspace._slot import WorkspaceFailed as WorkspaceFailed
from supervisor.workspace._slot import WorkspaceKeep as WorkspaceKeep
from supervisor.workspace._slot import WorkspaceMode as WorkspaceMode
