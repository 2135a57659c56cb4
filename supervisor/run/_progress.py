"""Progress tracking: what a run is doing now, from closed facts and numbers only.

A provider feeds what its protocol reports (``ProviderRun.note_tool_call`` and the other
``note_*`` methods call the :class:`ProgressTracker` here); a caller reads
``run.progress`` (a :class:`~supervisor.Progress` snapshot) or ``async for p in
run.watch()``.  The snapshot types, the closed sets and :func:`~supervisor.progress_line`
are the contract's (:mod:`supervisor._seam`); this module is the engine's tracker.

Closed by construction: every key a snapshot holds is a member of a closed set fixed in
code (the provider's ``tool_kinds``, ``TOOL_CALL_STATUSES``, ``PLAN_STATUSES``,
``PERMISSION_DECISIONS``), checked when it is fed: a kind outside the set is counted
as ``other``, any other unknown value is dropped.  A tool call's protocol id is used
only to count a call once; the tracker keeps its ``hash()``, never the id itself, so
no child text is held or shown.

Cheap by construction: feeding a fact is a few dictionary operations (no snapshot is
built, nothing allocated per update but the call's entry); a snapshot is built lazily
when read, its counts reused while nothing changed; watchers are woken at most once
per :data:`WATCH_INTERVAL` whatever the child sends, and a watcher that reads slowly
only sees fewer, coalesced snapshots: the run never waits for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from supervisor._seam import (
    PERMISSION_DECISIONS,
    PLAN_STATUSES,
    TOOL_CALL_STATUSES,
    Progress,
    ProgressCounts,
    Usage,
)

WATCH_INTERVAL = 0.25
"""A watcher receives at most one snapshot per this many seconds while the run goes on;
the last one comes as soon as the run settles (a one-shot) or the conversation is over."""
WATCH_HEARTBEAT = 1.0
"""While a turn runs and nothing else changes, a watcher still receives a snapshot this
often, so that ``elapsed_ms`` moves on a live line."""
MAX_TRACKED_CALLS = 10_000
"""Tool calls remembered by id in one turn (for their status updates); beyond that a new
call is still counted, but an update for it may count it again (a hostile child's
flood costs bounded memory)."""

_KIND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}")
_STATUSES = frozenset(TOOL_CALL_STATUSES)
_PLAN = frozenset(PLAN_STATUSES)
_DECISIONS = frozenset(PERMISSION_DECISIONS)


# -- the tracker -------------------------------------------------------------------------


@lru_cache(maxsize=64)
def checked_kinds(kinds: frozenset[str]) -> frozenset[str]:
    """A provider's closed set of tool-call kinds, checked once: short identifiers
    (letters, digits, ``_``), ``other`` among them."""
    for kind in kinds:
        if not isinstance(kind, str) or not _KIND_NAME.fullmatch(kind):
            raise ValueError(f"a tool-call kind must be a short identifier, not {kind!r}")
    if "other" not in kinds:
        raise ValueError("a provider's tool_kinds must include 'other'")
    return kinds


@dataclass(slots=True)
class _Counters:
    """One turn's counts (a plain mutable record, rebuilt per turn)."""

    # A call's kind and status by its id's hash: ints and the closed sets' strings only, so
    # the garbage collector never tracks (nor scans) these dicts, however many calls a turn makes.
    call_kinds: dict[int, str] = field(default_factory=dict)
    call_statuses: dict[int, str] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    permissions: dict[str, int] = field(default_factory=dict)
    plan: dict[str, int] = field(default_factory=dict)
    answer_bytes: int = 0
    usage: Usage | None = None


class ProgressTracker:
    """One run's progress: fed by the provider, read by callers and watchers.

    ``describe`` returns the run's current stage and turn number when a snapshot is
    built.  The run calls :meth:`begin_turn` as each turn starts (the spawn, each
    send), :meth:`settle` when the turn's result settles (``final`` for a one-shot run)
    and :meth:`end` once no more turns can come; :meth:`touch` when its stage moved.
    """

    __slots__ = (
        "_cached",
        "_clock",
        "_counts",
        "_describe",
        "_end_waiters",
        "_ended",
        "_frozen_ms",
        "_kinds",
        "_started",
        "_version",
        "_waiters",
    )

    def __init__(
        self,
        kinds: frozenset[str],
        describe: Callable[[], tuple[str, int]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kinds = checked_kinds(frozenset(kinds))
        self._describe = describe
        self._clock = clock
        self._counts = _Counters()
        self._started = clock()
        self._frozen_ms: int | None = None
        self._ended = False
        self._version = 0
        self._cached: tuple[ProgressCounts, ...] | None = None  # the counts, until they change
        self._waiters: list[asyncio.Future[None]] = []  # watchers waiting for a change
        self._end_waiters: list[asyncio.Future[None]] = []  # watchers pacing: only the end cuts it short

    # -- fed by the provider (closed values checked here) --------------------------------

    def tool_call(self, call: Hashable, kind: str | None = None, status: str | None = None) -> None:
        """A tool call began or changed: ``call`` is the protocol's id for it (only its
        hash is kept), ``kind`` and ``status`` closed values (None: unchanged, or
        ``other`` / ``pending`` for a new call; a kind outside the set is ``other``, an
        unknown status is ignored)."""
        if kind is not None and (not isinstance(kind, str) or kind not in self._kinds):
            kind = "other"
        if status is not None and (not isinstance(status, str) or status not in _STATUSES):
            status = None
        try:
            key = hash(call)
        except TypeError:
            return
        counts = self._counts
        known_kind = counts.call_kinds.get(key)
        if known_kind is None:
            kind = kind or "other"
            status = status or "pending"
            if len(counts.call_kinds) < MAX_TRACKED_CALLS:
                counts.call_kinds[key] = kind
                counts.call_statuses[key] = status
            counts.kinds[kind] = counts.kinds.get(kind, 0) + 1
            counts.statuses[status] = counts.statuses.get(status, 0) + 1
        else:
            known_status = counts.call_statuses[key]
            if kind is not None and kind != known_kind:
                counts.kinds[known_kind] -= 1
                counts.kinds[kind] = counts.kinds.get(kind, 0) + 1
                counts.call_kinds[key] = kind
            elif status is None or status == known_status:
                return  # nothing changed
            if status is not None and status != known_status:
                counts.statuses[known_status] -= 1
                counts.statuses[status] = counts.statuses.get(status, 0) + 1
                counts.call_statuses[key] = status
        self._cached = None
        self._bump()

    def plan(self, statuses: Iterable[object]) -> None:
        """The agent's plan, replaced whole: its entries' statuses (unknown ones dropped)."""
        plan: dict[str, int] = {}
        for status in statuses:
            if isinstance(status, str) and status in _PLAN:
                plan[status] = plan.get(status, 0) + 1
        if plan != self._counts.plan:
            self._counts.plan = plan
            self._cached = None
            self._bump()

    def permission(self, decision: str) -> None:
        """A permission request was answered ``decision`` (unknown decisions dropped)."""
        if isinstance(decision, str) and decision in _DECISIONS:
            permissions = self._counts.permissions
            permissions[decision] = permissions.get(decision, 0) + 1
            self._cached = None
            self._bump()

    def answer_bytes(self, n: int) -> None:
        """``n`` more UTF-8 bytes of answer text arrived."""
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            self._counts.answer_bytes += n
            self._bump()

    def usage(self, usage: Usage | None) -> None:
        """What the turn used so far (replaces the previous report)."""
        if (usage is None or isinstance(usage, Usage)) and usage != self._counts.usage:
            self._counts.usage = usage
            self._bump()

    # -- driven by the run ---------------------------------------------------------------

    def touch(self) -> None:
        """Something a snapshot shows moved (the stage)."""
        self._bump()

    def begin_turn(self) -> None:
        """A turn begins: counts from zero, the clock from now."""
        self._counts = _Counters()
        self._cached = None
        self._started = self._clock()
        self._frozen_ms = None
        self._bump()

    def settle(self, *, final: bool) -> None:
        """The turn's result settled: the clock stops; ``final`` ends the watchers too."""
        if self._frozen_ms is None:
            self._frozen_ms = self._elapsed_ms()
        if final:
            self._finish()
        self._bump()

    def end(self) -> None:
        """No more turns: every watcher receives the last snapshot and ends."""
        if not self._ended:
            if self._frozen_ms is None:
                self._frozen_ms = self._elapsed_ms()
            self._finish()
            self._bump()

    def _finish(self) -> None:
        self._ended = True
        _wake_all(self._end_waiters)

    def _bump(self) -> None:
        self._version += 1
        if self._waiters:
            _wake_all(self._waiters)

    # -- read by callers -----------------------------------------------------------------

    def _elapsed_ms(self) -> int:
        return max(0, math.floor((self._clock() - self._started) * 1000))

    def snapshot(self) -> Progress:
        """The latest snapshot (its counts rebuilt only when something changed)."""
        stage, turn = self._describe()
        cached = self._cached
        if cached is None:
            c = self._counts
            cached = self._cached = (
                ProgressCounts._of(c.kinds),
                ProgressCounts._of(c.statuses),
                ProgressCounts._of(c.permissions),
                ProgressCounts._of(c.plan),
            )
        kinds, statuses, permissions, plan = cached
        frozen = self._frozen_ms
        return Progress(
            stage=stage,
            turn=turn,
            elapsed_ms=self._elapsed_ms() if frozen is None else frozen,
            tool_calls=kinds,
            tool_call_status=statuses,
            permissions=permissions,
            plan=plan,
            answer_bytes=self._counts.answer_bytes,
            usage=self._counts.usage,
            settled=frozen is not None,
        )

    async def watch(self) -> AsyncIterator[Progress]:
        """Coalesced snapshots: the current one at once, then one whenever something
        changed (at most one per :data:`WATCH_INTERVAL`; a running turn's clock counts as a
        change every :data:`WATCH_HEARTBEAT`), and the last one as soon as it is the last
        (the end cuts the pause short), then the end."""
        seen = -1
        delivered_at = -math.inf
        last: Progress | None = None
        while True:
            ended = self._ended
            if self._version != seen or last is None or not last.settled:
                seen = self._version
                current = self.snapshot()
                if current != last:
                    last = current
                    yield current  # never inside a cancel scope: the caller may stop here
                    delivered_at = self._clock()
            if ended:
                return
            assert last is not None
            # Keep the pace first (changes meanwhile are coalesced into the next snapshot);
            # then, if nothing changed, wait for a change (or the heartbeat while it runs).
            pause = delivered_at + WATCH_INTERVAL - self._clock()
            if pause > 0 and not self._ended:
                await self._until_end(pause)  # the end cuts the pause short
            if self._version == seen and not self._ended:
                beat = delivered_at + WATCH_HEARTBEAT - self._clock()
                await self._changed(None if last.settled else max(beat, WATCH_INTERVAL))

    async def _until_end(self, within: float) -> None:
        await _wait(self._end_waiters, within)

    async def _changed(self, within: float | None) -> None:
        await _wait(self._waiters, within)


# Waiting is done with bare asyncio futures and timer handles (runs need asyncio): an anyio
# event and cancel scope per wait cost a watcher several times more CPU.  Cancelling the
# task that waits cancels the future, as any await does; the waiter is removed either way.


def _wake_all(waiters: list[asyncio.Future[None]]) -> None:
    for future in waiters:
        if not future.done():
            future.set_result(None)
    waiters.clear()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _wait(waiters: list[asyncio.Future[None]], within: float | None) -> None:
    """Wait until the waiters are woken, or for ``within`` seconds (None: no limit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    waiters.append(future)
    timer = None if within is None else loop.call_later(max(within, 0.0), _resolve, future)
    try:
        await future
    finally:
        if timer is not None:
            timer.cancel()
        with contextlib.suppress(ValueError):  # still listed: its timer or a cancellation ended it
            waiters.remove(future)
