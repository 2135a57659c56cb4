"""Progress: what a run is doing now, from closed facts and numbers only (SPEC section 20).

A provider feeds what its protocol reports (``ProviderRun.note_tool_call`` and the other
``note_*`` methods call the :class:`ProgressTracker` here); a caller reads
``run.progress`` (a :class:`Progress` snapshot) or ``async for p in run.watch()``, and
:func:`progress_line` renders a snapshot as one fixed English line.

Closed by construction: every key a snapshot holds is a member of a closed set fixed in
code (the provider's ``tool_kinds``, :data:`TOOL_CALL_STATUSES`, :data:`PLAN_STATUSES`,
:data:`PERMISSION_DECISIONS`), checked when it is fed: a kind outside the set is counted
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
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from supervisor._public import home
from supervisor._seam import Usage

TOOL_KINDS: frozenset[str] = frozenset(
    ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other")
)
"""The default closed set of tool-call kinds: ACP's ``ToolKind``.  A provider whose
protocol names its calls otherwise sets ``ProviderRun.tool_kinds`` to its own closed set
(it must hold ``other``)."""
TOOL_CALL_STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed", "failed")
"""A tool call's statuses (ACP's ``ToolCallStatus``); every call is in exactly one."""
PLAN_STATUSES: tuple[str, ...] = ("pending", "in_progress", "completed")
"""A plan entry's statuses (ACP's ``PlanEntryStatus``)."""
PERMISSION_DECISIONS: tuple[str, ...] = ("allowed", "denied")
"""How the unattended supervisor answered a permission request."""

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


class ProgressCounts(Mapping[str, int]):
    """An immutable, hashable count per closed name (zero counts are left out), in name
    order.  Compares equal to any mapping with the same non-zero items."""

    __slots__ = ("_counts", "_hash")

    def __init__(self, counts: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = counts.items() if isinstance(counts, Mapping) else counts
        self._counts: dict[str, int] = {name: int(n) for name, n in sorted(items) if n}
        self._hash: int | None = None

    @classmethod
    def _of(cls, counts: dict[str, int]) -> ProgressCounts:
        """From the tracker's own counts (ints already): no checks, no copy of zeros."""
        made = cls.__new__(cls)
        made._counts = dict(sorted(item for item in counts.items() if item[1]))
        made._hash = None
        return made

    def __getitem__(self, name: str) -> int:
        return self._counts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._counts)

    def __len__(self) -> int:
        return len(self._counts)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._counts.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if other is self:  # a snapshot reuses its counts while they do not change
            return True
        if isinstance(other, ProgressCounts):
            return self._counts == other._counts
        if isinstance(other, Mapping):
            return self._counts == {k: v for k, v in other.items() if v}
        return NotImplemented

    def __repr__(self) -> str:
        return f"ProgressCounts({self._counts!r})"

    @property
    def total(self) -> int:
        """The sum of the counts."""
        return sum(self._counts.values())


NO_COUNTS = ProgressCounts()


@dataclass(frozen=True, slots=True)
class Progress:
    """What a run is doing, as closed facts and numbers: never a title, a path, a
    command, an argument or any other child text.  Frozen, hashable and comparable.

    The counts are the current turn's (a conversation's later turn starts again from
    zero); ``elapsed_ms`` counts from the turn's start (the spawn, for turn 1) and stops
    when the turn settles.
    """

    stage: str
    """The run's current stage (its lifecycle's vocabulary)."""
    turn: int
    """The turn's number: 1 is the request's task, each ``send`` the next."""
    elapsed_ms: int
    """Milliseconds since the turn began (frozen once it settled)."""
    tool_calls: ProgressCounts = NO_COUNTS
    """Tool calls by kind (the provider's closed set: ACP's ``ToolKind``, the Codex
    app-server's item types, Claude Code's built-in tool names; ``other`` for the rest)."""
    tool_call_status: ProgressCounts = NO_COUNTS
    """The same calls by their latest status (:data:`TOOL_CALL_STATUSES`)."""
    permissions: ProgressCounts = NO_COUNTS
    """Permission requests by the decision taken (:data:`PERMISSION_DECISIONS`)."""
    plan: ProgressCounts = NO_COUNTS
    """The agent's latest plan: its entries by status (:data:`PLAN_STATUSES`)."""
    answer_bytes: int = 0
    """UTF-8 bytes of answer text received so far (before any output cap)."""
    usage: Usage | None = None
    """What the turn used so far, where the agent reports it while it works."""
    settled: bool = False
    """Whether the turn's result has settled (this snapshot is its last word)."""

    @property
    def tool_call_total(self) -> int:
        """How many tool calls the turn made."""
        return self.tool_calls.total

    def as_dict(self) -> dict[str, object]:
        """Plain JSON-ready values (counts as objects, usage as its non-None fields)."""
        return {
            "stage": self.stage,
            "turn": self.turn,
            "elapsed_ms": self.elapsed_ms,
            "tool_calls": dict(self.tool_calls),
            "tool_call_status": dict(self.tool_call_status),
            "permissions": dict(self.permissions),
            "plan": dict(self.plan),
            "answer_bytes": self.answer_bytes,
            "usage": None if self.usage is None else self.usage.model_dump(exclude_none=True),
            "settled": self.settled,
        }


# -- the line ---------------------------------------------------------------------------

SEPARATOR = " · "


def progress_line(p: Progress) -> str:
    """One fixed English line of ``p``, for people and models, e.g.
    ``prompt · turn 2 · 42 s · 5 tool calls (edit 3, execute 2) · 1,204 output tokens``.

    The grammar, in order, parts joined by `` · ``; a part whose count is zero (or
    unknown) is left out:

    * the stage; ``turn N``; the elapsed time (``7 s``, ``3 min 07 s``, ``1 h 02 min``);
    * ``N tool call(s) (kind n, ...)``, kinds by count then name, then ``; N running``
      (pending or in progress) and ``N failed`` inside the parentheses when not zero;
    * ``plan D/N done`` (completed entries of all);
    * ``N permission request(s) (allowed n, denied n)``;
    * ``N answer byte(s)``; ``N output token(s)`` (when the agent reported them).

    Numbers use a comma every three digits.
    """
    parts = [p.stage, f"turn {p.turn}", _elapsed(p.elapsed_ms)]
    kinds = p.tool_calls._counts  # this module's own: plain dicts read directly (a live line's cost)
    if kinds:
        calls = sum(kinds.values())
        ordered = sorted(kinds.items(), key=_count_then_name) if len(kinds) > 1 else kinds.items()
        inner = ", ".join([f"{kind} {n:,}" for kind, n in ordered])
        status = p.tool_call_status._counts
        running = status.get("pending", 0) + status.get("in_progress", 0)
        failed = status.get("failed", 0)
        if running or failed:
            tail = [f"{running:,} running"] if running else []
            if failed:
                tail.append(f"{failed:,} failed")
            inner += "; " + ", ".join(tail)
        parts.append(f"{_count(calls, 'tool call')} ({inner})")
    plan = p.plan._counts
    if plan:
        parts.append(f"plan {plan.get('completed', 0):,}/{sum(plan.values()):,} done")
    asked = p.permissions._counts
    if asked:
        inner = ", ".join([f"{d} {asked[d]:,}" for d in PERMISSION_DECISIONS if d in asked])
        parts.append(f"{_count(sum(asked.values()), 'permission request')} ({inner})")
    if p.answer_bytes:
        parts.append(_count(p.answer_bytes, "answer byte"))
    tokens = None if p.usage is None else p.usage.output_tokens
    if tokens is not None:
        parts.append(_count(tokens, "output token"))
    return SEPARATOR.join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _count_then_name(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def _elapsed(ms: int) -> str:
    seconds = max(ms, 0) // 1000
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600:,} h {seconds // 60 % 60:02d} min"


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


home("supervisor", Progress, ProgressCounts, progress_line)
