"""Warm children: runs spawned and handshaken before a task exists.

A warm child is a :class:`~supervisor.provider.ProviderRun` whose start is split in two:
:meth:`~ProviderRun.prestart` spawns it in a leaf of its own with its limits and does the
whole handshake, the session included (ACP ``session/new`` in its cwd), with a
placeholder request; :meth:`~ProviderRun.assign` later gives it the caller's request
(task, label, trace) and :meth:`~ProviderRun.start` publishes it at once, so the first
prompt goes out straight away.  Nothing is reused: each warm child serves exactly one
run (a one-shot run or a conversation), as a fresh child would.

The pool keeps, for each key (provider name, config digest, resolved cwd), the number of
ready children :meth:`WarmPool.prestart` asked for:

* a run is matched only on the same key; a child that died (its process exited, its
  wire ended, a task of it failed) is never handed out: it is ended and replaced;
* a taken child is replaced once the run's first turn has settled (or the run ended
  without one), so the refill's spawn never competes with that turn for the CPU;
* a child no run took for the config's ``warm_idle_ms`` is ended and not replaced: the
  key then keeps one child fewer (demand is gone);
* a start that fails lowers the key's count by one (an agent that cannot start is not
  started again and again); ``prestart`` raises that failure;
* three children of a key in a row that die while waiting stop its replacements.

Warm children live in leaves under this process's host group like every run, so the
kernel counts them against the host ceilings; ``prestart`` refuses a count the
ceilings could never hold.  Their background work lives in a task group of the pool's
own (an asyncio task the pool starts), which :meth:`WarmPool.aclose` ends: untaken
children are taken down, a start under way is finished and then taken down (never cut
off mid-spawn), taken ones belong to their callers and are disposed by them.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from machines import TransitionSink
from supervisor._config import ProviderConfig, config_digest
from supervisor._errors import InvalidRequest, ProviderUnusable, StartAborted, StartFailed, SubagentError
from supervisor._seam import SessionPlan, SubagentRequest
from supervisor.common._logging import raw_failure
from supervisor.common._waits import first_of
from supervisor.process import CwdError, resolve_run_cwd
from supervisor.process._host_groups import HOST_GROUPS
from supervisor.run._base import ProviderRun

log = logging.getLogger("supervisor")

WARM_TASK = "(warm child: no task yet)"
"""The placeholder task a warm child is built with; :meth:`ProviderRun.assign` replaces
it before anything is sent to the child."""

LOSSES_BEFORE_GIVING_UP = 3


@dataclass(frozen=True, slots=True)
class WarmKey:
    """What a run must share with a warm child to take it."""

    provider: str
    digest: str
    cwd: Path
    keep: bool = False
    """Whether the session is opened to be resumed later (``SessionPlan(keep=True)``:
    the run is journaled); a warm child serves only runs that asked the same."""


@dataclass
class _Slot:
    """One key's warm children."""

    target: int = 0
    ready: deque[ProviderRun[Any]] = field(default_factory=deque)
    starting: int = 0
    failures: int = 0  # starts that failed, ever (prestart compares before and after)
    error: SubagentError | None = None  # the latest failure
    losses: int = 0  # children that died while waiting, in a row
    claims: int = 0  # runs waiting for a child that is starting (``WarmPool.claim``)
    changed: anyio.Event = field(default_factory=anyio.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    @property
    def kept(self) -> int:
        return len(self.ready) + self.starting


def warm_config(provider: object) -> ProviderConfig | None:
    """The config of a provider whose runs can be prestarted, else None."""
    config = getattr(provider, "config", None)
    return config if isinstance(config, ProviderConfig) else None


def unwarmable(config: ProviderConfig) -> str | None:
    """Why no warm child could ever serve a run of ``config`` (None: one can).

    A run of ``workspace = "worktree"`` is spawned in a worktree made for it at its start,
    so its cwd is known only then: a child started before the run would be in another
    directory, and the run would never take it.
    """
    if config.workspace == "worktree":
        return 'its runs each start in a worktree of their own (workspace = "worktree")'
    return None


def check_count(count: object, config: ProviderConfig, others: int) -> int:
    """``count`` as a number of warm children, or :class:`InvalidRequest`.

    Above the host ceiling means: more processes than the host's ``pids_max`` (every
    child is at least one, with the other keys' children), or more memory than the
    host's ``memory_max`` when the provider sets a ``memory_max`` per run.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidRequest("warm count must be a non-negative integer")
    ceiling = HOST_GROUPS.ceiling
    if ceiling.pids_max is not None and count + others > ceiling.pids_max:
        raise InvalidRequest(
            f"warm count {count} is above the host ceiling (pids_max {ceiling.pids_max}, "
            f"{others} warm children kept for other keys)"
        )
    if (
        ceiling.memory_max is not None
        and config.memory_max is not None
        and count * config.memory_max > ceiling.memory_max
    ):
        raise InvalidRequest(
            f"warm count {count} is above the host ceiling (memory_max {ceiling.memory_max} bytes "
            f"for runs of memory_max {config.memory_max} bytes)"
        )
    return count


def check_cwd(cwd: str | os.PathLike[str] | None, config: ProviderConfig) -> Path:
    """The resolved cwd warm children of ``config`` start in, or :class:`InvalidRequest`."""
    try:
        return resolve_run_cwd(config.cwd, None if cwd is None else Path(cwd))
    except (CwdError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise InvalidRequest(f"warm cwd: {exc}") from None


class WarmPool:
    """The warm children of one :class:`~supervisor.Registry`."""

    def __init__(self, build: Callable[[Any, SubagentRequest, SessionPlan | None], Any]) -> None:
        # How a run is built (the registry's ``build_run_with_plan``), handed in: the
        # registry owns the pool, and the pool must not import the registry back.
        self._build = build
        self._slots: dict[WarmKey, _Slot] = {}
        self._watchers: dict[ProviderRun[Any], anyio.CancelScope] = {}
        self._waits: set[anyio.CancelScope] = set()  # refills waiting for a first turn
        self._task_group: TaskGroup | None = None
        self._ending: set[ProviderRun[Any]] = set()
        self._forced = False
        self._host: asyncio.Task[None] | None = None
        self._stop = anyio.Event()
        self._closed = False

    # -- what the registry calls --------------------------------------------------------

    def count(self, key: WarmKey) -> int:
        """How many children are ready for ``key`` now (tests and benchmarks read it)."""
        slot = self._slots.get(key)
        return 0 if slot is None else len(slot.ready)

    def target(self, key: WarmKey) -> int:
        """How many children ``key`` keeps (ready or starting) by the latest ``prestart``."""
        slot = self._slots.get(key)
        return 0 if slot is None else slot.target

    def kept_elsewhere(self, key: WarmKey) -> int:
        return sum(slot.target for other, slot in self._slots.items() if other != key)

    async def prestart(self, key: WarmKey, provider: Any, count: int) -> None:
        """Keep ``count`` ready children for ``key``; return once they are ready (and,
        for a lower count, once the extra children, started or starting, are gone).

        Raises the start failure of a child started for it, if one fails meanwhile.
        """
        if self._closed:
            raise InvalidRequest("the registry is closed")
        await self._ensure_host()
        slot = self._slots.setdefault(key, _Slot())
        slot.target, slot.losses = count, 0
        extras = []
        while len(slot.ready) > slot.target:
            extras.append(slot.ready.pop())
            self._stop_watching(extras[-1])
        if extras:  # a lower count returns once the extra children are gone
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as ending:
                    for extra in extras:
                        ending.start_soon(self._end, extra)
        failures = slot.failures
        self._fill(key, provider)
        # ready: the count is ready and no start beyond it is still under way
        while len(slot.ready) < slot.target or slot.kept > slot.target:
            if self._closed:
                raise InvalidRequest("the registry was closed")
            if slot.failures > failures:
                assert slot.error is not None
                raise slot.error
            await slot.changed.wait()
        if slot.failures > failures and slot.error is not None:
            raise slot.error

    def take(
        self, key: WarmKey, provider: Any, request: SubagentRequest, trace: TransitionSink | None
    ) -> ProviderRun[Any] | None:
        """A ready child for ``key`` given ``request``, or None (the run starts cold)."""
        slot = self._slots.get(key)
        if slot is None or self._closed:
            return None
        while slot.ready:
            run = slot.ready.popleft()
            self._stop_watching(run)
            if not _alive(run):
                log.info("run %s: a warm child died while waiting; not handed out", run.id)
                self._end_soon(run)
                self._lost(key, provider)
                continue
            run.assign(request, trace)
            run.audit.note("taken", run.stage, "warm")
            assert self._task_group is not None
            self._task_group.start_soon(self._refill_after, key, provider, run)
            slot.notify()
            return run
        return None

    def force_kill(self) -> None:
        """Skip the teardown graces of every untaken child being ended, now and later
        (a second Ctrl-C)."""
        self._forced = True
        for run in list(self._ending):
            run.force_kill()

    async def claim(
        self, key: WarmKey, provider: Any, request: SubagentRequest, trace: TransitionSink | None
    ) -> ProviderRun[Any] | None:
        """:meth:`take`, or, when none is ready but one is starting that no other run has
        claimed, wait for it: it started before now, so it is ready no later than a cold
        start begun now would be.  None when there is none to wait for (or its start
        failed): the run starts cold."""
        slot = self._slots.get(key)
        if slot is None:
            return None
        run = self.take(key, provider, request, trace)
        if run is not None or slot.starting <= slot.claims:
            return run
        slot.claims += 1
        try:
            while not self._closed:
                await slot.changed.wait()
                if slot.ready:
                    return self.take(key, provider, request, trace)
                if slot.starting < slot.claims:  # a start failed, or was ended unwanted
                    return None
            return None
        finally:
            slot.claims -= 1

    async def aclose(self) -> None:
        """End every untaken child (and every start under way); idempotent.  Waits for
        the runs already taken to be disposed by their callers."""
        self._closed = True
        self._stop.set()
        for slot in self._slots.values():
            slot.notify()
        host, self._host = self._host, None
        if host is not None:
            await host

    # -- the pool's own task group ------------------------------------------------------

    async def _ensure_host(self) -> None:
        if self._host is not None:
            return
        ready = anyio.Event()
        self._host = asyncio.get_running_loop().create_task(self._serve(ready))
        await ready.wait()

    async def _serve(self, ready: anyio.Event) -> None:
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            ready.set()
            await self._stop.wait()
            # Not a cancellation of the group: a start under way finishes and is then
            # ended (a spawn cut off in its hop to a worker thread would leave its leaf).
            for scope in (*self._watchers.values(), *self._waits):
                scope.cancel()

    # -- keeping children ---------------------------------------------------------------

    def _fill(self, key: WarmKey, provider: Any) -> None:
        slot = self._slots[key]
        if self._closed or self._task_group is None:
            return
        for _ in range(slot.target - slot.kept):
            slot.starting += 1
            self._task_group.start_soon(self._keep, key, provider)

    async def _keep(self, key: WarmKey, provider: Any) -> None:
        """Start one child for ``key`` and watch it until it is taken, dies or idles out."""
        slot = self._slots[key]
        request = SubagentRequest(task=WARM_TASK, parent_cwd=key.cwd)
        assert self._task_group is not None
        try:
            built = self._build(provider, request, SessionPlan(keep=True) if key.keep else None)
            if not isinstance(built, ProviderRun):  # a run of its own making: no split start
                raise InvalidRequest(f'subagent provider "{key.provider}" cannot be prestarted')
            run: ProviderRun[Any] = built
            await run.prestart(self._task_group)
            await warm_up(run)
        except (StartFailed, StartAborted, ProviderUnusable, InvalidRequest) as exc:
            slot.starting -= 1
            slot.failures += 1
            slot.error = exc
            slot.target = max(0, slot.target - 1)
            log.warning("a warm child of %r could not be started", key.provider)
            slot.notify()
            return
        if self._closed or len(slot.ready) >= slot.target:
            # Not wanted any more (the pool closed, or the count was lowered while it
            # started): a start under way is finished, then ended, never cut off.
            await self._end(run)
            slot.starting -= 1
            slot.notify()
            return
        slot.starting -= 1
        run.audit.note("ready", run.stage, "warm")
        log.info("run %s: a warm child of %r is ready", run.id, key.provider)
        scope = anyio.CancelScope()
        self._watchers[run] = scope
        slot.ready.append(run)
        slot.notify()
        with scope:  # cancelled when the child is taken, or the pool closes
            with anyio.move_on_after(run.config.warm_idle) as idle:
                await run.session_lost()
        if run not in self._watchers:  # taken
            return
        if self._closed:
            await self._end_untaken(slot, run)
        elif idle.cancelled_caught:
            log.info("run %s: a warm child was idle for warm_idle_ms; ended", run.id)
            slot.target = max(0, slot.target - 1)
            await self._end_untaken(slot, run)
        else:
            log.info("run %s: a warm child died while waiting; replaced", run.id)
            await self._end_untaken(slot, run)
            self._lost(key, provider)

    async def _end_untaken(self, slot: _Slot, run: ProviderRun[Any]) -> None:
        self._watchers.pop(run, None)
        if run in slot.ready:
            slot.ready.remove(run)
        slot.notify()
        await self._end(run)

    def _stop_watching(self, run: ProviderRun[Any]) -> None:
        scope = self._watchers.pop(run, None)
        if scope is not None:
            scope.cancel()

    def _lost(self, key: WarmKey, provider: Any) -> None:
        slot = self._slots[key]
        slot.losses += 1
        if slot.losses >= LOSSES_BEFORE_GIVING_UP:
            log.warning("warm children of %r keep dying; not replaced any more", key.provider)
            slot.target = slot.kept
            slot.notify()
            return
        self._fill(key, provider)

    async def _refill_after(self, key: WarmKey, provider: Any, run: ProviderRun[Any]) -> None:
        """Replace a taken child once its run's first turn has settled (or the run ended)."""
        with anyio.CancelScope() as waiting:
            self._waits.add(waiting)
            try:
                state = run._engine.state
                await first_of(state.settled.wait, state.closed.wait)
            finally:
                self._waits.discard(waiting)
        if waiting.cancelled_caught:  # the pool closed
            return
        self._slots[key].losses = 0
        self._fill(key, provider)

    def _end_soon(self, run: ProviderRun[Any]) -> None:
        if self._task_group is not None:
            self._task_group.start_soon(self._end, run)

    async def _end(self, run: ProviderRun[Any]) -> None:
        """Take an untaken child down (shielded); a failure is only logged."""
        self._ending.add(run)
        if self._forced:
            run.force_kill()
        try:
            await _end(run)
        finally:
            self._ending.discard(run)


async def warm_up(run: ProviderRun[Any]) -> None:
    """Run a warm child's own setup (:meth:`ProviderRun.warm_up`), bounded by its ``start_timeout_ms``.

    Only a speed-up: a setup that fails or overruns is logged and the child is kept as
    it is (a child that died meanwhile is never handed out: :func:`_alive`).
    """
    with anyio.move_on_after(run.config.start_timeout) as overran:
        try:
            await run.warm_up()
        except Exception as exc:
            log.info("run %s: a warm child's setup failed; kept as it is", run.id)
            raw_failure("run %s: the raw setup failure", run.id, exc=exc)
    if overran.cancelled_caught:
        log.info("run %s: a warm child's setup overran start_timeout_ms; kept as it is", run.id)


def _alive(run: ProviderRun[Any]) -> bool:
    """Whether a waiting child can still serve a run: its process runs (asked of the
    kernel now, without reaping it: the loop may not have seen its exit yet), its output
    has not ended, no task of it failed, it was not ended."""
    process = run.process
    if (
        process is None
        or process.exit_facts is not None
        or process.stdout_ended
        or run._engine.state.task_error is not None
        or run._engine.state.closed.is_set()
    ):
        return False
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:  # reaped already
        return False


async def _end(run: ProviderRun[Any]) -> None:
    """Take an untaken child down (shielded); a failure is only logged."""
    with anyio.CancelScope(shield=True):
        try:
            error = await run.end_prestarted()
        except Exception as exc:
            raw_failure("run %s: ending a warm child failed", run.id, exc=exc)
            return
        if error is not None:
            log.error("run %s: a warm child's tree was not proven gone: %s", run.id, error)


def warm_key(
    name: str, config: ProviderConfig, parent_cwd: Path | None, *, keep: bool = False
) -> WarmKey | None:
    """The key a run of ``config`` with ``parent_cwd`` would take a child of; None when its
    cwd does not resolve (the run starts cold and fails there, as it would have)."""
    try:
        cwd = resolve_run_cwd(config.cwd, parent_cwd)
    except (CwdError, ValueError):
        return None
    return WarmKey(name, _digest(config), cwd, keep)


_DIGESTS: dict[int, tuple[ProviderConfig, str]] = {}


def _digest(config: ProviderConfig) -> str:
    """``config_digest``, once per config object (configs are frozen; the object is kept
    alive with its digest, so its id is not reused)."""
    known = _DIGESTS.get(id(config))
    if known is None or known[0] is not config:
        if len(_DIGESTS) >= 256:
            _DIGESTS.clear()
        known = _DIGESTS[id(config)] = (config, config_digest(config))
    return known[1]
