"""Progress from closed facts: the tracker, the snapshot, the watchers and the one line.

The tracker is driven here directly (its ``describe`` stands in for a run's stage and
turn); the runs of every built-in kind feed it in ``tests/test_progress_runs.py``.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor import Progress, ProgressCounts, Usage, progress_line
from supervisor.provider import PERMISSION_DECISIONS, PLAN_STATUSES, TOOL_CALL_STATUSES, TOOL_KINDS
from supervisor.run._progress import (
    MAX_TRACKED_CALLS,
    WATCH_INTERVAL,
    ProgressTracker,
    checked_kinds,
)


def tracker(
    stage: str = "prompt", turn: int = 1, clock: Callable[[], float] = time.monotonic
) -> ProgressTracker:
    return ProgressTracker(TOOL_KINDS, lambda: (stage, turn), clock=clock)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- the counts ------------------------------------------------------------------------


def test_counts_are_immutable_hashable_and_compare_as_mappings() -> None:
    counts = ProgressCounts({"execute": 2, "edit": 3, "read": 0})
    assert list(counts) == ["edit", "execute"]  # name order, zero left out
    assert counts == {"edit": 3, "execute": 2} == ProgressCounts([("execute", 2), ("edit", 3)])
    assert counts == {"edit": 3, "execute": 2, "move": 0}
    assert hash(counts) == hash(ProgressCounts({"edit": 3, "execute": 2}))
    assert counts.total == 5
    assert counts.get("read", 0) == 0
    assert counts != {"edit": 3}
    with pytest.raises(TypeError):
        counts["edit"] = 4  # type: ignore[index]


def test_a_snapshot_is_frozen_hashable_and_comparable() -> None:
    t = tracker()
    t.tool_call("c1", "edit", "in_progress")
    a, b = t.snapshot(), t.snapshot()
    assert a.tool_calls == b.tool_calls
    assert a.tool_calls is b.tool_calls
    assert {a}
    assert a == Progress(**{f: getattr(a, f) for f in Progress.__dataclass_fields__})
    with pytest.raises(AttributeError):
        a.turn = 2  # type: ignore[misc]
    assert a.as_dict() == {
        "stage": "prompt",
        "turn": 1,
        "elapsed_ms": a.elapsed_ms,
        "tool_calls": {"edit": 1},
        "tool_call_status": {"in_progress": 1},
        "permissions": {},
        "plan": {},
        "answer_bytes": 0,
        "usage": None,
        "settled": False,
    }


# -- the feed --------------------------------------------------------------------------


def test_a_call_is_counted_once_and_moves_between_statuses() -> None:
    t = tracker()
    t.tool_call("a", "edit", "pending")
    t.tool_call("a", None, "in_progress")
    t.tool_call("a", None, "completed")
    t.tool_call("a", None, None)  # nothing new
    t.tool_call("b", "execute")  # a new call without a status: pending
    t.tool_call("c")  # without a kind: other
    p = t.snapshot()
    assert p.tool_calls == {"edit": 1, "execute": 1, "other": 1}
    assert p.tool_call_status == {"completed": 1, "pending": 2}
    assert p.tool_call_total == 3


def test_a_kind_may_change_on_an_update() -> None:
    t = tracker()
    t.tool_call(7, "other", "in_progress")
    t.tool_call(7, "read", None)
    assert t.snapshot().tool_calls == {"read": 1}
    assert t.snapshot().tool_call_status == {"in_progress": 1}


def test_values_outside_the_closed_sets_never_show() -> None:
    t = tracker()
    t.tool_call("x", "rm -rf /secret", "exploded")
    t.tool_call("y", 42, ["bad"])  # type: ignore[arg-type]
    t.tool_call(["unhashable"], "edit")  # type: ignore[arg-type]
    t.plan(["pending", "sneaky", None, "completed", 3])
    t.permission("maybe")
    t.permission("denied")
    t.answer_bytes(-5)
    t.answer_bytes(True)
    t.answer_bytes(12)
    t.usage("lots")  # type: ignore[arg-type]
    p = t.snapshot()
    assert p.tool_calls == {"other": 2}
    assert p.tool_call_status == {"pending": 2}
    assert p.plan == {"pending": 1, "completed": 1}
    assert p.permissions == {"denied": 1}
    assert p.answer_bytes == 12
    assert p.usage is None


def test_a_provider_names_its_own_closed_kinds() -> None:
    t = ProgressTracker(frozenset({"Bash", "Edit", "other"}), lambda: ("query", 1))
    t.tool_call(1, "Bash")
    t.tool_call(2, "edit")  # not in this provider's set
    assert t.snapshot().tool_calls == {"Bash": 1, "other": 1}
    with pytest.raises(ValueError, match="must include 'other'"):
        checked_kinds(frozenset({"Bash"}))
    with pytest.raises(ValueError, match="short identifier"):
        checked_kinds(frozenset({"two words", "other"}))


def test_the_plan_is_replaced_whole_and_usage_is_the_latest() -> None:
    t = tracker()
    t.plan(["pending", "pending", "in_progress"])
    t.plan(["completed", "in_progress"])
    t.usage(Usage(output_tokens=5))
    t.usage(Usage(output_tokens=9, input_tokens=40))
    p = t.snapshot()
    assert p.plan == {"completed": 1, "in_progress": 1}
    assert p.usage == Usage(output_tokens=9, input_tokens=40)


def test_the_memory_a_flood_of_calls_takes_is_bounded() -> None:
    t = tracker()
    for i in range(MAX_TRACKED_CALLS + 50):
        t.tool_call(f"id-{i}", "read", "completed")
    p = t.snapshot()
    assert p.tool_calls == {"read": MAX_TRACKED_CALLS + 50}
    assert len(t._counts.call_kinds) == len(t._counts.call_statuses) == MAX_TRACKED_CALLS
    assert not gc.is_tracked(t._counts.call_kinds)  # never scanned by the collector


def test_a_turn_counts_from_zero_and_its_clock_stops_when_it_settles() -> None:
    clock = FakeClock()
    t = tracker(clock=clock)
    t.begin_turn()
    t.tool_call("a", "edit")
    clock.now += 1.5
    assert t.snapshot().elapsed_ms == 1500
    assert not t.snapshot().settled
    t.settle(final=False)
    clock.now += 10
    settled = t.snapshot()
    assert settled.elapsed_ms == 1500
    assert settled.settled
    assert settled.tool_calls == {"edit": 1}
    t.begin_turn()
    clock.now += 0.25
    fresh = t.snapshot()
    assert fresh.tool_calls == {}
    assert fresh.elapsed_ms == 250
    assert not fresh.settled


# -- the line --------------------------------------------------------------------------


def line(**fields: object) -> str:
    base: dict[str, object] = {"stage": "prompt", "turn": 2, "elapsed_ms": 42_900}
    base.update(fields)
    return progress_line(Progress(**base))  # type: ignore[arg-type]


def test_the_line_of_a_quiet_turn_is_stage_turn_and_time() -> None:
    assert line() == "prompt · turn 2 · 42 s"
    assert line(elapsed_ms=0, turn=1) == "prompt · turn 1 · 0 s"
    assert line(elapsed_ms=187_000) == "prompt · turn 2 · 3 min 07 s"
    assert line(elapsed_ms=3_725_000) == "prompt · turn 2 · 1 h 02 min"
    assert line(usage=Usage(input_tokens=10)) == "prompt · turn 2 · 42 s"  # no output tokens: left out


def test_the_example_line_of_the_spec() -> None:
    p = line(
        tool_calls=ProgressCounts({"edit": 3, "execute": 2}),
        tool_call_status=ProgressCounts({"completed": 5}),
        usage=Usage(output_tokens=1204),
    )
    assert p == "prompt · turn 2 · 42 s · 5 tool calls (edit 3, execute 2) · 1,204 output tokens"


def test_one_and_many() -> None:
    one = line(
        tool_calls=ProgressCounts({"read": 1}),
        tool_call_status=ProgressCounts({"in_progress": 1}),
        permissions=ProgressCounts({"allowed": 1}),
        plan=ProgressCounts({"pending": 1}),
        answer_bytes=1,
        usage=Usage(output_tokens=1),
    )
    assert one == (
        "prompt · turn 2 · 42 s · 1 tool call (read 1; 1 running) · plan 0/1 done"
        " · 1 permission request (allowed 1) · 1 answer byte · 1 output token"
    )
    many = line(
        tool_calls=ProgressCounts({"read": 1200, "edit": 3, "execute": 3}),
        tool_call_status=ProgressCounts({"pending": 1, "in_progress": 1, "failed": 2, "completed": 1202}),
        permissions=ProgressCounts({"denied": 2, "allowed": 1}),
        plan=ProgressCounts({"completed": 2, "in_progress": 1, "pending": 2}),
        answer_bytes=3210,
        usage=Usage(output_tokens=0),
    )
    assert many == (
        "prompt · turn 2 · 42 s · 1,206 tool calls (read 1,200, edit 3, execute 3; 2 running, 2 failed)"
        " · plan 2/5 done · 3 permission requests (allowed 1, denied 2) · 3,210 answer bytes"
        " · 0 output tokens"
    )


MARK = "MARKER"


@given(
    kinds=st.lists(st.one_of(st.sampled_from(sorted(TOOL_KINDS)), st.text()), max_size=20),
    statuses=st.lists(st.one_of(st.sampled_from(TOOL_CALL_STATUSES), st.text(), st.none()), max_size=20),
    plan=st.lists(st.one_of(st.sampled_from(PLAN_STATUSES), st.text()), max_size=10),
    decisions=st.lists(st.one_of(st.sampled_from(PERMISSION_DECISIONS), st.text()), max_size=5),
)
def test_nothing_a_child_says_outside_the_closed_sets_reaches_a_snapshot_or_its_line(
    kinds: list[str], statuses: list[str | None], plan: list[str], decisions: list[str]
) -> None:
    t = tracker()
    for i, kind in enumerate(kinds):
        t.tool_call(f"{MARK}{i % 3}", MARK + kind, statuses[i % len(statuses)] if statuses else None)
        t.tool_call(f"{MARK}{i}", kind, MARK)
    t.plan([MARK + s for s in plan] + plan)
    for decision in decisions:
        t.permission(decision)
        t.permission(MARK + decision)
    p = t.snapshot()
    assert MARK not in repr(p)
    assert MARK not in progress_line(p)
    assert MARK not in str(p.as_dict())
    assert set(p.tool_calls) <= TOOL_KINDS
    assert set(p.tool_call_status) <= set(TOOL_CALL_STATUSES)
    assert p.tool_call_status.total == p.tool_calls.total


# -- watching --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_watcher_gets_coalesced_snapshots_and_always_the_last() -> None:
    t = tracker()
    t.begin_turn()
    seen: list[tuple[float, Progress]] = []

    async def watch() -> None:
        async for p in t.watch():
            seen.append((time.monotonic(), p))

    began = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        for i in range(3000):  # a chatty child: far more updates than snapshots
            t.tool_call(i, "execute", "completed")
            if i % 100 == 0:
                await anyio.sleep(0.01)
        t.answer_bytes(5)
        t.settle(final=True)
    took = time.monotonic() - began
    times = [at for at, _ in seen][:-1]  # the last one comes at once, whatever the pace
    assert all(b - a >= WATCH_INTERVAL - 0.01 for a, b in itertools.pairwise(times))
    assert len(seen) <= 2 + took / (WATCH_INTERVAL - 0.01)  # a handful of snapshots, not 3,000
    last = seen[-1][1]
    assert last == t.snapshot()
    assert last.settled
    assert last.tool_calls == {"execute": 3000}
    assert last.answer_bytes == 5


@pytest.mark.anyio
async def test_several_watchers_and_a_slow_one_never_hold_the_feed() -> None:
    t = tracker()
    fast: list[Progress] = []
    slow: list[Progress] = []
    started = anyio.Event()

    async def watch(into: list[Progress], pause: float) -> None:
        async for p in t.watch():
            into.append(p)
            started.set()
            await anyio.sleep(pause)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, fast, 0)
        tg.start_soon(watch, slow, 1.0)
        await started.wait()
        began = time.monotonic()
        for i in range(1000):
            t.tool_call(i, "read", "in_progress")
        assert time.monotonic() - began < 1.0  # the feed never waited for the slow watcher
        t.settle(final=True)
    assert fast[-1] == slow[-1] == t.snapshot()
    assert len(slow) <= len(fast)


@pytest.mark.anyio
async def test_a_conversation_is_watched_across_turns_until_it_ends() -> None:
    turn = [1]
    t = ProgressTracker(TOOL_KINDS, lambda: ("prompt", turn[0]))
    seen: list[Progress] = []
    first_settled = anyio.Event()

    async def watch() -> None:
        async for p in t.watch():
            seen.append(p)
            if p.settled and p.turn == 1:
                first_settled.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        t.tool_call("a", "edit")
        t.settle(final=False)
        await first_settled.wait()
        turn[0] = 2
        t.begin_turn()
        t.tool_call("b", "execute")
        t.settle(final=False)
        t.end()
    assert seen[-1].turn == 2
    assert seen[-1].tool_calls == {"execute": 1}
    assert seen[-1].settled


@pytest.mark.anyio
async def test_a_watcher_that_comes_late_gets_the_last_snapshot_and_ends() -> None:
    t = tracker()
    t.tool_call("a", "search", "completed")
    t.settle(final=True)
    got = [p async for p in t.watch()]
    assert got == [t.snapshot()]


@pytest.mark.anyio
async def test_a_running_turn_s_clock_moves_a_live_line() -> None:
    t = tracker()
    t.begin_turn()
    seen: list[Progress] = []
    async for p in t.watch():
        seen.append(p)
        if len(seen) == 3:
            break
    assert seen[2].elapsed_ms >= seen[1].elapsed_ms + 900  # the heartbeat, with no other change
