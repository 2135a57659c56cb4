"""Hypothesis stateful fuzzing of the ACP provider over real processes.

Each ``start`` draws the scripted ACP child's behaviour (``ACP_CHILD_*``): the stop
reason (out-of-vocabulary ones included), a fault at a stage (exit, signal, JSON-RPC
error, garbage frames, an oversized line, a missing session id, a hang), permission
requests under both policies, a slowly streamed answer, and how the child takes
teardown (ignoring stdin EOF, trapping SIGTERM, a grandchild, a ``setsid`` daemon).  A model predicts the outcome of
each behaviour exactly; rules then interleave local cancellation (``cancel()`` or the
abort signal), awaiting the result and ``dispose()`` over the runs in flight.

Some runs are conversations: ``send`` then runs another turn on the same session (the
child repeats its drawn behaviour on every prompt), and the model predicts each turn's
result, ``TurnInProgress`` while a turn runs, ``ConversationOver`` once the child died,
the wire broke, the abort signal fired or the run was disposed, ``InvalidRequest`` for
a one-shot run.  A cancelled turn either winds down (the child answers ``cancelled``)
and the conversation goes on, or is cut off by ``dispose_grace_ms`` and ends it.

Invariants: the stage is always recorded (and the audit trail is one unbroken story,
its turn numbers in order), each turn's result settles exactly once and never changes,
nothing raises after publication,
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
from supervisor import (
    AbortSignal,
    ConversationEnd,
    ConversationOver,
    InvalidRequest,
    StartAborted,
    StartFailed,
    StopReason,
    SubagentRequest,
    SubagentResult,
    TurnInProgress,
)
from supervisor._diagnostic import join_lines
from supervisor.provider import ProviderRun
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
    conversation: bool = False

    @property
    def ends_the_conversation(self) -> bool:
        """A turn of this behaviour leaves no usable session (the child died, the wire broke)."""
        return self.fault in ("exit", "signal", "garbage", "huge") and self.fault_at == "prompt"


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
    conversation = draw(st.booleans())
    # a conversation without a fault gets to more turns: draw "none" more often for one
    faults = st.sampled_from(sorted(FAULTS))
    fault = draw(st.one_of(st.just("none"), faults) if conversation else faults)
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
    return Behaviour(
        knobs, policy, fault, at, pre_aborted=draw(st.integers(0, 9)) == 0, conversation=conversation
    )


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
    if startup and b.fault == "error":
        return Expected(start_failure=line(stage, "transport"))
    if startup and b.fault in ("garbage", "huge", "missing-session"):
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
        category = "transport" if b.fault == "error" else "protocol"
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
    cancelled_before_settling: bool = False  # the current turn's
    over: bool = False  # the model knows the conversation has ended
    winding_down: bool = False  # a cancelled turn the child may still be ending


class AcpRunMachine(RuleBasedStateMachine):
    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        self._stack = contextlib.ExitStack()
        self.portal, self.task_group, _ = self._stack.enter_context(portal_with_task_group())
        self.marks = self._stack.enter_context(marks())
        self.every: list[ProviderRun[Any]] = []
        self.live: list[Live] = []
        self.first_result: dict[tuple[str, int], SubagentResult] = {}

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
        outcome = self.portal.call(self._start, run, abort, expected, marker, behaviour.conversation)
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
        self, run: ProviderRun[Any], abort: AbortSignal, expected: Expected, marker: str, conversation: bool
    ) -> StartFailed | StartAborted | None:
        if expected.start_hangs and not abort.aborted:
            reached = self.marks.event(marker)

            async def abort_once_reached() -> None:
                await reached.wait()
                abort.abort()

            self.task_group.start_soon(abort_once_reached)
        try:
            with anyio.fail_after(30):
                await run.start(self.task_group, abort, conversation=conversation)
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
        if how == "abort" and live.behaviour.conversation:
            live.over = True  # the abort signal ends a conversation
        if not was_settled:
            live.cancelled_before_settling = True
            live.winding_down = live.behaviour.conversation and not live.over
            self.check_aborted(live, result)
        self.check_settled_once(live.run, result)

    @rule(live=runs)
    def send(self, live: Live) -> None:
        """The next turn; its outcome predicted from the model and the run's truth now."""
        behaviour = live.behaviour
        if behaviour.fault == "hang" and behaviour.conversation and not live.over and live.run.settled:
            return  # a new turn would hang until cancelled: not from a blocking rule

        async def send_now() -> tuple[bool, SubagentResult | Exception]:
            running = not live.run.settled  # read in the loop, just before the call
            try:
                with anyio.fail_after(30):
                    return running, await live.run.send("the next turn")
            except (TurnInProgress, ConversationOver, InvalidRequest) as exc:
                return running, exc

        running, outcome = self.portal.call(send_now)
        event(f"send: {type(outcome).__name__}")
        if not behaviour.conversation:
            assert isinstance(outcome, InvalidRequest), outcome
            return
        if running:
            assert isinstance(outcome, TurnInProgress), outcome
            return
        if live.over or behaviour.ends_the_conversation:  # every turn of it ends the conversation
            assert isinstance(outcome, ConversationOver), outcome
            live.over = True
            return
        if isinstance(outcome, ConversationOver) and live.winding_down:
            assert outcome.reason is ConversationEnd.CANCEL_UNFINISHED  # the grace cut the wind-down off
            live.over = True
            return
        assert isinstance(outcome, SubagentResult), outcome
        assert outcome == live.expected.result
        live.cancelled_before_settling = live.winding_down = False
        self.check_settled_once(live.run, outcome)

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
        live.over = True
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
        key = (run.id, run.turn)
        assert self.first_result.setdefault(key, result) is result, "a turn's result settles exactly once"

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
                assert self.first_result.setdefault((live.run.id, live.run.turn), result) is result
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
