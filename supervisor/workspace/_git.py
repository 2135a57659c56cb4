"""A run's own git worktree: add it, count what changed, keep or remove it.

Every git command runs with the supervisor's environment less ``GIT_*`` (a caller's
``GIT_DIR`` must not redirect it), hooks off (``core.hooksPath=/dev/null``: ``worktree
add`` would run ``post-checkout``), no fsmonitor, no external diff or textconv (the
child wrote the tree; nothing it wrote may make the supervisor run a program), and
nothing of git's output reaches a result: only commit ids, the supervisor's own paths
and ``--numstat`` counts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import anyio

from supervisor.workspace._admin_lock import administration

SAFE = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.quotePath=true")
KILLED_GIT_WAIT = 5.0
"""Seconds a killed git is waited for before the cancellation that killed it goes on."""


class GitFailed(Exception):
    """A git command failed; the text is git's (host log and ``__cause__`` only).

    ``reason`` is a closed fact for a diagnostic: which step of making a worktree failed."""

    reason = "git failed"


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"})
    env.update(extra or {})
    return env


async def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``git -C cwd args`` off the event loop; its stdout, or :class:`GitFailed`.

    Cancelled, git is killed and waited for first."""
    program = shutil.which("git")
    if program is None:
        raise GitFailed("git is not installed")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            returncode = await _run_to_its_end([program, *SAFE, "-C", str(cwd), *args], _env(env), out, err)
        except OSError as exc:
            raise GitFailed(repr(exc)) from exc
        if returncode != 0:
            err.seek(0)
            raise GitFailed(f"git {args[0]}: {err.read().decode('utf-8', 'replace').strip()[:500]}")
        out.seek(0)
        return out.read().decode("utf-8", "replace").strip()


async def _run_to_its_end(argv: list[str], env: dict[str, str], out: IO[bytes], err: IO[bytes]) -> int:
    """Run ``argv`` (its output into files, its stdin empty) to its end; its exit status.

    Cut off by a cancellation, the child is killed and waited for before the cancellation
    goes on.  Why not ``anyio.run_process``: cancelled while asyncio connects a new child's
    pipes, asyncio kills the child and waits for nobody, and the child watcher that reaps
    it later reports to an event loop the CLI may have closed (asyncio's "Loop ... that
    handles pid N is closed").  So the spawn is shielded (once forked, the child is ours to
    wait for), the output goes to files rather than pipes (nothing to drain, nothing left
    open), and the wait after the kill is shielded and bounded: a process stuck in the
    kernel may not die at once, and the watcher still reaps it when it does."""
    await anyio.lowlevel.checkpoint_if_cancelled()  # already cut off: spawn nothing
    with anyio.CancelScope(shield=True):
        process = await anyio.open_process(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
    try:
        return await process.wait()
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with anyio.move_on_after(KILLED_GIT_WAIT, shield=True):
                await process.wait()


@dataclass(frozen=True, slots=True)
class Checkout:
    """Where a run's worktree is, and what it was made from."""

    repository: Path
    """The work tree the run's cwd was in (its top level)."""
    common_dir: Path
    """The repository's shared git directory (objects, refs, ``worktrees/``)."""
    path: Path
    """The run's worktree (the supervisor's own folder)."""
    prefix: str
    """The cwd's path below the top level (the run starts in the same folder of its worktree)."""
    base: str
    """The commit the worktree was made at."""

    @property
    def cwd(self) -> Path:
        return self.path / self.prefix if self.prefix else self.path

    @property
    def admin_dir(self) -> Path:
        """``<common dir>/worktrees/<name>``: the worktree's own HEAD, index and logs."""
        return self.common_dir / "worktrees" / self.path.name


async def add_worktree(cwd: Path, base: str, path: Path) -> Checkout:
    """A detached worktree of the repository ``cwd`` is in, at ``base``, in ``path``."""
    try:
        top = Path(await git(cwd, "rev-parse", "--show-toplevel"))
    except GitFailed as exc:
        exc.reason = "not in a git work tree" if shutil.which("git") else "git is not installed"
        raise
    prefix = await git(cwd, "rev-parse", "--show-prefix")
    common = Path(await git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    try:
        commit = await git(top, "rev-parse", "--verify", "--end-of-options", f"{base}^{{commit}}")
    except GitFailed as exc:
        exc.reason = "workspace_base is not a commit of the repository"
        raise
    async with administration(common):  # one at a time, across processes too
        await git(top, "worktree", "add", "--detach", "--quiet", str(path), commit)
    return Checkout(top, common, path, prefix.rstrip("/"), commit)


@dataclass(frozen=True, slots=True)
class Changes:
    head: str
    files_changed: int
    insertions: int
    deletions: int

    def changed(self, base: str) -> bool:
        return self.head != base or self.files_changed > 0


async def changes(checkout: Checkout) -> Changes:
    """What the run changed against its base: commits, and the tree as it is (staged or not,
    untracked files included), counted with ``--numstat`` on a copy of the worktree's index
    (the worktree's own index is left as the agent left it)."""
    head = await git(checkout.path, "rev-parse", "HEAD")
    index = Path(await git(checkout.path, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    with tempfile.TemporaryDirectory(prefix="subagent-index-") as scratch:
        copy = Path(scratch) / "index"
        await anyio.to_thread.run_sync(_copy_if_there, index, copy)
        env = {"GIT_INDEX_FILE": str(copy)}
        await git(checkout.path, "add", "--all", "--ignore-errors", env=env)
        numstat = await git(
            checkout.path, "diff", "--cached", "--numstat", "--no-renames", "--no-ext-diff", "--no-textconv",
            checkout.base, env=env,
        )  # fmt: skip
    files = insertions = deletions = 0
    for line in numstat.splitlines():
        added, removed, _name = line.split("\t", 2)
        files += 1
        insertions += int(added) if added.isdigit() else 0  # "-": a binary file
        deletions += int(removed) if removed.isdigit() else 0
    return Changes(head, files, insertions, deletions)


def _copy_if_there(source: Path, target: Path) -> None:
    if source.exists():
        shutil.copyfile(source, target)


async def remove_worktree(checkout: Checkout) -> None:
    """Remove the worktree and its administrative files (whatever is in it)."""
    async with administration(checkout.common_dir):
        try:
            await git(checkout.repository, "worktree", "remove", "--force", "--force", str(checkout.path))
        except GitFailed:
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(checkout.path, ignore_errors=True))
            await prune(checkout.repository)


async def prune(repository: Path) -> None:
    """``git worktree prune``: forget worktrees whose folder is gone (call it holding the
    repository's :func:`~supervisor.workspace._admin_lock.administration`)."""
    await git(repository, "worktree", "prune")
