"""Hypothesis stateful fuzzing of the ACP provider over real processes.

Each ``start`` draws the scripted ACP child's behaviour (``ACP_CHILD_*``): the stop
reason (out-of-vocabulary ones included), a fault at a stage (exit, signal, JSON-RPC
error, garbage frames, an oversized line, a missing session id, a hang), permission
requests under both policies, a slowly streamed answer, and how the child takes
teardown (ignoring stdin EOF, trapping SIGTERM, a grandchild, a ``setsid`` daemon).  A model predicts the outcome of
each behaviour exactly; rules then interleave local cancellation (``cancel()`` or the
abort signal), awaiting the result and ``dispose()`` over the runs in flight.

Invariants: the stage is always recorded (and the audit trail is one unbroken story),
the result settles exactly once and never changes, nothing raises after publication,
local cancellation settles ``aborted`` without a diagnostic, dispose is idempotent and
ends quiescent, proven by scanning every process on the machine for the run tag
``SUBAGENT_SUPERVISOR_RUN=<run.id>``; child stderr never reaches anything reported.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule

from machines.acp import ACP_TOOL_KINDS, AcpLifecycle
from supervisor import AbortSignal, StartAborted, StartFailed, StopReason, SubagentRequest, SubagentResult
from supervisor._diagnostic import join_lines
from supervisor._run import ProviderRun
from supervisor.providers import acp
from tests.support.reliability import (
    acp_child,
    assert_audit_consistent,
    assert_bounded,
    assert_closed,
    assert_quiescent,
    marks,
    tagged,
)
from tests.test_stateful import kill_all, portal_with_task_group

SECRET = "stderr-secret-" + uuid.uuid4().hex
STOPS = {
    "end_turn": (StopReason.COMPLETED, None),
    "max_tokens": (StopReason.MAX_TOKENS, None),
    "refusal": (StopReason.REFUSAL, None),
    "cancelled": (StopReason.ABORTED, None),
    "max_turn_requests": (StopReason.ERROR, "remote-limit; stop reason: max_turn_requests"),
}
OTHER_STOP = (StopReason.ERROR, "unknown; stop reason: unknown")
HUGE = {"HUGE_LINE": "200000"}  # with max_frame_bytes 65536 below: over the bound, and cheap


# -- behaviour and its model ----------------------------------------------------------------


@dataclass(frozen=True)
class Behaviour:
    """A drawn scripted-child behaviour: ``ACP_CHILD_*`` knobs and the provider's policy."""

    knobs: dict[str, str]
    policy: str
    fault: str  # none | exit | signal | error | garbage | huge | missing-session | hang
    fault_at: str  # start | initialize | new-session | prompt
    pre_aborted: bool


stop_reasons = st.one_of(
    st.sampled_from(sorted(STOPS)),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=10).filter(
        lambda s: s not in STOPS
    ),
)
tool_kinds = st.one_of(
    st.sampled_from(sorted(ACP_TOOL_KINDS)),
    st.just("none"),
    st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(lambda k: k not in ACP_TOOL_KINDS),
)
FAULTS = {
    "none": ["prompt"],
    "exit": ["start", "initialize", "new-session", "prompt"],
    "signal": ["start", "initialize", "new-session", "prompt"],
    "error": ["initialize", "new-session", "prompt"],
    "garbage": ["initialize", "new-session", "prompt"],
    "huge": ["start", "initialize", "new-session", "prompt"],
    "missing-session": ["new-session"],
    "hang": ["initialize", "new-session", "prompt"],
}


@st.composite
def behaviours(draw: st.DrawFn) -> Behaviour:
    knobs: dict[str, str] = {
        "STOP": draw(stop_reasons),
        "TEXT": draw(st.sampled_from(["", "one", "hello from a scripted child"])),
        "QUIET_PERMISSION": "1",
    }
    policy = draw(st.sampled_from(["reject", "allow"]))
    kinds = draw(st.lists(tool_kinds, max_size=2))
    if kinds:
        knobs["PERMISSION"] = ",".join(kinds)
        knobs["PERMISSION_DENIED_STOP"] = draw(stop_reasons)
    fault = draw(st.sampled_from(sorted(FAULTS)))
    at = draw(st.sampled_from(FAULTS[fault]))
    if fault == "exit":
        knobs.update(EXIT_AT=at, EXIT_CODE=str(draw(st.integers(0, 255))))
    elif fault == "signal":
        knobs.update(SIGNAL_AT=at, SIGNAL=draw(st.sampled_from(["SIGKILL", "SIGSEGV", "SIGABRT", "SIGTERM"])))
    elif fault == "error":
        knobs.update(ERROR_AT=at, ERROR_TEXT=SECRET)
    elif fault == "garbage":
        knobs.update(GARBAGE_AT=at)
    elif fault == "huge":
        knobs.update(HUGE_AT=at, **HUGE)
    elif fault == "missing-session":
        knobs.update(MISSING_SESSION_ID="1")
    elif fault == "hang":
        knobs.update(HANG=at)
    if draw(st.integers(0, 4)) == 0:
        knobs["SLOW_MS"] = "150"  # a turn still streaming when the next rule comes
    if draw(st.booleans()):
        knobs["IGNORE_EOF"] = "1"
    if draw(st.integers(0, 3)) == 0:
        knobs["TRAP_TERM"] = "1"
    for kind in ("GRANDCHILD", "DAEMON"):
        option = draw(st.sampled_from(["", "", "1", "trap-term"]))
        if option:
            knobs[kind] = option
    return Behaviour(knobs, policy, fault, at, pre_aborted=draw(st.integers(0, 9)) == 0)


def line(stage: str, rest: str) -> str:
    return f"Subagent failure (provider: ACP; stage: {stage}; category: {rest})"


def exit_fact(b: Behaviour) -> str:
    if b.fault == "exit":
        return f"process-exit; exit code: {b.knobs['EXIT_CODE']}"
    return f"process-exit; signal: {b.knobs['SIGNAL']}"


@dataclass(frozen=True)
class Expected:
    """What the model predicts: a start failure, a start that hangs, or a published run."""

    start_failure: str | None = None  # the exact StartFailed text
    start_hangs: bool = False
    result: SubagentResult | None = None  # None for a published run that hangs


def model(b: Behaviour) -> Expected:
    startup = b.fault_at in ("start", "initialize", "new-session")
    stage = "new-session" if b.fault_at == "new-session" else "initialize"
    if b.pre_aborted:
        return Expected(start_hangs=True)
    if b.fault == "hang" and startup:
        return Expected(start_hangs=True)
    if startup and b.fault in ("exit", "signal"):
        return Expected(start_failure=line(stage, exit_fact(b)))
    if startup and b.fault in ("error", "garbage"):
        return Expected(start_failure=line(stage, "transport"))
    if startup and b.fault in ("huge", "missing-session"):
        return Expected(start_failure=line(stage, "protocol"))
    if b.fault == "hang":
        return Expected()
    text = b.knobs["TEXT"]
    permission = None
    stop = b.knobs["STOP"]
    if "PERMISSION" in b.knobs:
        last = b.knobs["PERMISSION"].split(",")[-1]
        decision = "allowed" if b.policy == "allow" else "denied"
        request = last if last in ACP_TOOL_KINDS else "unknown"
        permission = f"ACP unattended decision (policy: {b.policy}; request: {request}; decision: {decision})"
        if b.policy == "reject":
            stop = b.knobs["PERMISSION_DENIED_STOP"]
    if b.fault in ("exit", "signal"):
        diagnostic = join_lines(line("process", exit_fact(b)), permission)
        return Expected(
            result=SubagentResult(output=text, stop_reason=StopReason.ERROR, diagnostic=diagnostic)
        )
    if b.fault in ("error", "garbage", "huge"):
        category = "protocol" if b.fault == "huge" else "transport"
        diagnostic = join_lines(line("prompt", category), permission)
        return Expected(
            result=SubagentResult(output=text, stop_reason=StopReason.ERROR, diagnostic=diagnostic)
        )
    mapped, rest = STOPS.get(stop, OTHER_STOP)
    if mapped is StopReason.COMPLETED:
        return Expected(result=SubagentResult(output=text, stop_reason=mapped))
    diagnostic = permission if rest is None else join_lines(line("prompt", rest), permission)
    return Expected(result=SubagentResult(output=text, stop_reason=mapped, diagnostic=diagnostic))


# -- the machine ----------------------------------------------------------------------------


@dataclass
class Live:
    run: ProviderRun[Any]
    abort: AbortSignal
    expected: Expected
    behaviour: Behaviour
    cancelled_before_settling: bool = False


class AcpRunMachine(RuleBasedStateMachine):
    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        self._stack = contextlib.ExitStack()
        self.portal, self.task_group, _ = self._stack.enter_context(portal_with_task_group())
        self.marks = self._stack.enter_context(marks())
        self.every: list[ProviderRun[Any]] = []
        self.live: list[Live] = []
        self.first_result: dict[str, SubagentResult] = {}

    # -- start --------------------------------------------------------------------------

    @rule(target=runs, behaviour=behaviours())
    def start(self, behaviour: Behaviour) -> Any:
        marker = "stage-reached-" + uuid.uuid4().hex
        knobs = {**behaviour.knobs, "STDERR_TEXT": f"{marker} {SECRET}"}
        if behaviour.fault == "hang":
            knobs["STDERR_AT"] = behaviour.fault_at
        config = acp_child(
            knobs,
            permission=behaviour.policy,
            max_frame_bytes=65536,
            dispose_eof_grace_ms=100,
            dispose_grace_ms=500,
        )
        request = SubagentRequest(task=f"a task {SECRET}", parent_cwd=Path.cwd())
        run: ProviderRun[Any] = self.portal.call(self._create, acp.Provider(config), request)
        self.every.append(run)
        abort = AbortSignal()
        if behaviour.pre_aborted:
            abort.abort()
        expected = model(behaviour)
        outcome = self.portal.call(self._start, run, abort, expected, marker)
        event(
            f"start: {type(outcome).__name__ if outcome else 'published'}; {behaviour.fault} at {behaviour.fault_at}"
        )
        if expected.start_hangs:
            assert isinstance(outcome, StartAborted), outcome
            assert str(outcome) == "subagent request was aborted before the ACP child started"
        elif expected.start_failure is not None:
            assert isinstance(outcome, StartFailed), outcome
            assert str(outcome) == outcome.diagnostic == expected.start_failure
            assert outcome.quiescent is True
            stage = expected.start_failure.split("stage: ")[1].split(";")[0]
            assert stage in run.stages_entered
        else:
            assert outcome is None, outcome
        if outcome is not None:
            assert_quiescent(run)
            return multiple()
        live = Live(run, abort, expected, behaviour)
        self.live.append(live)
        return live

    @staticmethod
    async def _create(provider: acp.Provider, request: SubagentRequest) -> ProviderRun[Any]:
        return provider.create_run(request)  # a run is made in the loop (it holds cancel scopes)

    async def _start(
        self, run: ProviderRun[Any], abort: AbortSignal, expected: Expected, marker: str
    ) -> StartFailed | StartAborted | None:
        if expected.start_hangs and not abort.aborted:
            reached = self.marks.event(marker)

            async def abort_once_reached() -> None:
                await reached.wait()
                abort.abort()

            self.task_group.start_soon(abort_once_reached)
        try:
            with anyio.fail_after(30):
                await run.start(self.task_group, abort)
        except (StartFailed, StartAborted) as exc:
            return exc
        return None

    # -- after publication --------------------------------------------------------------

    @rule(live=runs, how=st.sampled_from(["cancel", "abort"]))
    def cancel(self, live: Live, how: str) -> None:
        async def cancel_now() -> tuple[bool, SubagentResult]:
            was_settled = live.run.settled
            if how == "cancel":
                live.run.cancel()
            else:
                live.abort.abort()
            return was_settled, await live.run.result()

        was_settled, result = self.portal.call(cancel_now)
        event(f"{how}: {'after' if was_settled else 'before'} settling")
        if not was_settled:
            live.cancelled_before_settling = True
            self.check_aborted(live, result)
        self.check_settled_once(live.run, result)

    @rule(live=runs)
    def await_result(self, live: Live) -> None:
        if live.expected.result is None and not live.run.settled:
            return  # a hanging child: only a cancel or dispose settles it
        result = self.portal.call(self._result, live.run)
        if live.cancelled_before_settling:
            self.check_aborted(live, result)
        else:
            assert result == live.expected.result
        self.check_settled_once(live.run, result)

    @rule(live=runs)
    def dispose(self, live: Live) -> None:
        async def dispose_twice() -> bool:
            was_settled = live.run.settled  # read in the loop: dispose settles at once if not
            await live.run.dispose()
            await live.run.dispose()  # idempotent
            return was_settled

        was_settled = self.portal.call(dispose_twice)
        assert_quiescent(live.run)
        result = self.portal.call(self._result, live.run)
        if not was_settled:
            live.cancelled_before_settling = True
            self.check_aborted(live, result)
        self.check_settled_once(live.run, result)

    @staticmethod
    async def _result(run: ProviderRun[Any]) -> SubagentResult:
        with anyio.fail_after(30):
            return await run.result()

    def check_aborted(self, live: Live, result: SubagentResult) -> None:
        """Local cancellation: ``aborted``, no diagnostic, partial output kept."""
        assert result.stop_reason == StopReason.ABORTED
        assert result.diagnostic is None
        assert live.behaviour.knobs["TEXT"].startswith(result.output)

    def check_settled_once(self, run: ProviderRun[Any], result: SubagentResult) -> None:
        assert self.first_result.setdefault(run.id, result) is result, "a result settles exactly once"

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def stage_is_recorded_and_nothing_leaks(self) -> None:
        for run in self.every:
            assert run.stage in AcpLifecycle.STAGES
            assert run.stages_entered[0] == "initialize"
            assert_audit_consistent(run)
            assert SECRET not in repr(run.audit.entries)
        for live in self.live:
            if live.run.settled:
                result = self.portal.call(self._result, live.run)
                assert self.first_result.setdefault(live.run.id, result) is result
                assert_bounded(result.diagnostic)
                assert_closed(result.diagnostic)
                assert SECRET not in (result.diagnostic or "") + result.output

    def teardown(self) -> None:
        try:
            for live in self.live:
                self.portal.call(live.run.dispose)
                assert_quiescent(live.run)
            self._stack.close()
        finally:
            kill_all([p for run in self.every for p in tagged(run.id)])


TestAcpRuns = AcpRunMachine.TestCase
TestAcpRuns.settings = settings(
    max_examples=12, stateful_step_count=7, deadline=None, derandomize=True, database=None
)
