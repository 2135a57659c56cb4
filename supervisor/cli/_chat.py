"""``subagents chat``: one supervised child, one conversation, one task per line of stdin.

The first non-blank line starts the child (turn 1 is that line, its start included); every
later line is the next turn on the same agent session (``supervisor.fronts._turns.converse``).
Each answer goes to stdout as its turn ends; stage progress, cancellation lines and a
failed turn's diagnostic go to stderr, as for ``run``.  On a terminal a prompt (``> ``,
on stderr) asks for each line.  End of input ends the conversation; the tree is taken
down as after ``run``.

Interrupts.  Ctrl-C while a turn runs cancels that turn (local cancellation: it settles
``aborted`` with its partial output; the conversation goes on).  A Ctrl-C at the prompt
only says how to quit.  A second Ctrl-C with no line sent in between quits: the
conversation ends, a running turn is cancelled and the tree is taken down (exit 130);
one more skips the teardown's graces.  Ctrl-C while the child is starting cancels turn 1
once the start is done (a start is not cut in two: a second Ctrl-C quits, aborting it).
SIGTERM and SIGHUP quit (143, 129).

``--timeout SECONDS`` bounds each turn (turn 1 from the start of the run, as for
``run``): a turn over it is cancelled and the conversation goes on; a start over it is a
local cancellation (exit 130).

``--json``: one object per line on stdout: ``{"type": "turn", run_id, turn,
stop_reason, output, diagnostic, usage}`` as each turn ends, then ``{"type":
"conversation", ...}``: the keys of ``run --json`` (``stop_reason``, ``output``,
``diagnostic`` and ``usage`` being the last turn's) and ``turns``, the number of turn
objects.  A line the conversation could no longer take (the child died, a limit or the
idle timeout ended it) is a turn object with stop reason ``error`` and the closed
``ConversationOver`` line as its diagnostic; the chat then ends (exit 1).

Imported only when the ``chat`` command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from machines import Transition
from supervisor import telemetry
from supervisor._abort import AbortSignal
from supervisor._errors import ConversationOver, StartAborted
from supervisor._handle import Run
from supervisor._registry import Registry, build_run, journaled_run
from supervisor._seam import StopReason, SubagentRequest, SubagentResult
from supervisor.cli._run import _Plan, _Progress, _spawn_failure, plan, run_document
from supervisor.cli._usage import (
    EXIT_FAILED,
    EXIT_HANGUP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    PROG,
    STDOUT_GONE,
    ConfigError,
    configure_logging,
    write_stdout,
)
from supervisor.fronts._consumers import headline
from supervisor.fronts._sequence import RunOutcome, lifetime
from supervisor.fronts._turns import ConversationOutcome, converse
from supervisor.journal._resume import ResumePlan, plan_resume

PROMPT = "> "
_STATUS = {"SIGTERM": EXIT_TERMINATED, "SIGHUP": EXIT_HANGUP}


def command(args: argparse.Namespace, child: list[str]) -> int:
    """Plan the chat, check the kind can converse (exit 2 if not), then talk.

    ``--resume RUN_ID`` continues a journaled conversation instead (a cold resume): it
    takes the same ``--config`` (or ``-- COMMAND``) as the chat it continues; the
    provider defaults to the one the run had.  A changed configuration, an unknown run,
    a run another process holds and a run that cannot be resumed are refused before
    anything spawns (exit 2)."""
    from supervisor.cli._journal import open_for_command, provider_of

    if args.resume is not None and args.provider is None and args.config is not None:
        args.provider = provider_of(args, args.resume)
    chat_plan = plan(args, child, task="")
    config = chat_plan.entry.build(chat_plan.overrides)
    provider = chat_plan.entry.provider(config)
    # Refused before anything spawns (and before a line is read) when the kind cannot converse.
    checking = Registry()
    checking.register(provider)
    checking.check(
        provider.name, SubagentRequest(task="chat", parent_cwd=chat_plan.parent_cwd), conversation=True
    )
    configure_logging(args.verbose)
    journal = open_for_command(args, args.config)
    registry = Registry(journal=journal)
    registry.register(provider)
    if args.resume is not None and journal is None:
        raise ConfigError("--resume needs the journal, which is turned off here")
    telemetry.configure_from_cli(args.otel)
    try:
        return anyio.run(_talk, chat_plan, args, provider, registry, backend="asyncio")
    finally:
        telemetry.shutdown()


async def _talk(chat_plan: _Plan, args: argparse.Namespace, provider: Any, registry: Registry) -> int:
    chat = _Chat(chat_plan, args, provider, registry=registry)  # its cancel scopes need the event loop
    if args.resume is None:
        return await chat.main()
    assert registry.journal is not None
    # Refused before anything spawns (exit 2): an unknown run, a changed config, a one-shot run.
    resumed = plan_resume(registry.journal, args.resume, lookup=registry.get, probe=build_run)
    return await chat.resume(resumed)


class _Lines:
    """Lines of stdin, read in a daemon thread one at a time as they are asked for (a read
    blocked on a terminal never holds the exit up); None at the end of input.

    The thread reads the file descriptor with ``os.read``, not through ``sys.stdin``: a
    daemon thread blocked inside a buffered reader holds its lock, and an interpreter that
    finalises that reader then aborts.  It hands a line over with ``call_soon_threadsafe``
    (never waiting on the event loop, which may be gone when a late line arrives)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending = bytearray()
        self._wanted = threading.Semaphore(0)
        self._send, self._receive = anyio.create_memory_object_stream[bytes | None](1)
        self._asked = False
        self._ended = False

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._pump, args=(loop,), name="subagents-chat-stdin", daemon=True).start()

    def _pump(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            self._wanted.acquire()
            line = self._readline()
            try:
                loop.call_soon_threadsafe(self._send.send_nowait, line or None)
            except RuntimeError:  # the event loop is closed: the chat is over
                return
            if not line:
                return

    def _readline(self) -> bytes:
        """The next line with its newline, or what is left at the end of input (b"" at the end)."""
        while (end := self._pending.find(b"\n")) < 0:
            try:
                chunk = os.read(self._fd, 65536)
            except InterruptedError:
                continue
            except OSError:  # a read error (EIO: the terminal is gone) is the end of input
                chunk = b""
            if not chunk:
                line = bytes(self._pending)
                self._pending.clear()
                return line
            self._pending += chunk
        line = bytes(self._pending[: end + 1])
        del self._pending[: end + 1]
        return line

    async def next(self) -> bytes | None:
        if self._ended:
            return None
        if not self._asked:
            self._asked = True
            self._wanted.release()
        line = await self._receive.receive()
        self._asked = False
        self._ended = line is None
        return line


@dataclass
class _Chat:
    plan: _Plan
    args: argparse.Namespace
    provider: Any
    abort: AbortSignal = field(default_factory=AbortSignal)
    run: Run | None = None
    phase: str = "waiting"  # waiting (for a line), starting, turn
    turn: int = 0  # the number of the turn running or last run
    interrupted: bool = False  # a Ctrl-C since the last line was sent
    cause: str | None = None  # why the chat quits: SIGINT, SIGTERM, SIGHUP, timeout
    user_cancelled: set[int] = field(default_factory=set)
    failed: bool = False  # a line that could not be sent (not UTF-8)
    stdout_gone: bool = False  # an answer could not be written: no more tasks are read
    lines_seen: int = 0
    reading: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    timer: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    progress: _Progress | None = None
    task_group: anyio.abc.TaskGroup | None = None
    lines: _Lines | None = None
    prompting: bool = False  # the prompt is on the terminal, awaiting a line
    registry: Registry | None = None
    first_turn: int = 1  # the number of this process's first turn (a resumed chat: the next one)

    @property
    def tty(self) -> bool:
        return sys.stdin.isatty()

    def say(self, line: str) -> None:
        """One line on stderr; at a prompt, on a line of its own, and the prompt again after it
        while a line is still awaited."""
        if self.prompting:
            sys.stderr.write("\n" + line + "\n")
            if self.cause is None:
                sys.stderr.write(PROMPT)
            sys.stderr.flush()
        elif self.progress is not None:
            self.progress.say(line)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    # -- the conversation ---------------------------------------------------------------

    async def main(self) -> int:
        self.lines = _Lines(sys.stdin.fileno())
        outcome: ConversationOutcome | None = None
        async with anyio.create_task_group() as tg:
            self.task_group = tg
            tg.start_soon(self._watch_signals)
            self.lines.start()
            first = await self._read_line()
            if first is not None:
                outcome = await self._converse(first)
            tg.cancel_scope.cancel()
        if outcome is None:  # no line was ever sent: nothing started
            return self._status_of(None)
        return self._report_end(outcome)

    async def resume(self, resumed: ResumePlan) -> int:
        """A cold resume: the conversation reopens idle, then every line is the next turn."""
        assert self.registry is not None
        self.lines = _Lines(sys.stdin.fileno())
        outcome: ConversationOutcome | None = None
        async with anyio.create_task_group() as tg:
            self.task_group = tg
            tg.start_soon(self._watch_signals)
            self.lines.start()
            try:
                outcome = await self._continue(resumed)
            except ConversationOver as exc:  # the agent cannot continue the session
                self.say(f"{PROG}: {exc}")
                self.failed = True
            tg.cancel_scope.cancel()
        if outcome is None:
            return self._status_of(None)
        return self._report_end(outcome)

    async def _continue(self, resumed: ResumePlan) -> ConversationOutcome:
        assert self.registry is not None
        run = self.registry.create_run(
            resumed.provider, resumed.request, trace=self._on_transition, session=resumed.session
        )
        self.run = run
        self.first_turn = resumed.session.turns_before + 1
        self.progress = _Progress(sys.stderr, enabled=not self.args.trace, stages=run.vocabulary.stages)
        self._begin_turn(resumed.session.turns_before, starting=True)  # --timeout bounds the start
        results: list[SubagentResult] = []
        not_sent: ConversationOver | None = None

        async def turns() -> None:
            nonlocal not_sent
            self.timer.cancel()
            self.phase = "waiting"
            if self.progress is not None:
                self.progress.next_turn()
            while self.cause is None and (line := await self._read_line()) is not None:
                self._begin_turn(run.turn + 1)
                try:
                    result = await run.send(line)
                except ConversationOver as exc:
                    not_sent = exc
                    break
                results.append(result)
                self.timer.cancel()
                self.phase = "waiting"
                self._report_turn(run.turn, result)

        try:
            start_error, teardown_error = await lifetime(run, self.abort, turns, conversation=True)
        except BaseExceptionGroup as group:  # the start's own error, out of the run's task group
            if len(group.exceptions) == 1 and isinstance(group.exceptions[0], ConversationOver):
                raise group.exceptions[0] from None
            raise
        self.timer.cancel()
        if not_sent is not None:
            self._report_not_sent(not_sent)
        last = results[-1] if results else None
        end = RunOutcome(run, last, start_error, teardown_error)
        return ConversationOutcome(end, tuple(results), not_sent)

    async def _converse(self, first: str) -> ConversationOutcome:
        request = SubagentRequest(task=first, parent_cwd=self.plan.parent_cwd)
        run = journaled_run(self.provider, request, trace=self._on_transition)
        self.run = run
        self.progress = _Progress(sys.stderr, enabled=not self.args.trace, stages=run.vocabulary.stages)
        if self.task_group is not None:
            self.task_group.start_soon(self.progress.follow, run)
        self._begin_turn(1, starting=True)
        outcome = await converse(run, self._next_task, self.abort, published=self._published)
        self.timer.cancel()
        if outcome.not_sent is not None:
            self._report_not_sent(outcome.not_sent)
        return outcome

    def _published(self) -> None:
        if self.phase == "starting":
            self.phase = "turn"
            if 1 in self.user_cancelled and self.run is not None:  # Ctrl-C during the start
                self.run.cancel()

    def _begin_turn(self, number: int, *, starting: bool = False) -> None:
        self.turn = number
        self.phase = "starting" if starting else "turn"
        self.interrupted = False
        self.timer.cancel()
        self.timer = anyio.CancelScope()
        if self.args.timeout is not None and self.task_group is not None:
            self.task_group.start_soon(self._time_turn, number, self.timer)

    async def _next_task(self, number: int, result: SubagentResult) -> str | None:
        self.timer.cancel()
        self.phase = "waiting"
        self._report_turn(number, result)
        if self.cause is not None or self.stdout_gone:
            return None
        line = await self._read_line()
        if line is None:
            return None
        self._begin_turn(number + 1)
        return line

    async def _read_line(self) -> str | None:
        """The next non-blank line (its line ending removed); None at the end of input or
        when the chat quits."""
        assert self.lines is not None
        self.reading = anyio.CancelScope()
        with self.reading:
            while self.cause is None:
                if self.tty:
                    sys.stdout.flush()
                    sys.stderr.write(PROMPT)
                    sys.stderr.flush()
                    self.prompting = True
                try:
                    raw = await self.lines.next()
                finally:
                    self.prompting = False
                if raw is None:
                    if self.tty:  # the prompt's line ends with the input
                        sys.stderr.write("\n")
                        sys.stderr.flush()
                    return None
                self.lines_seen += 1
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    self.failed = True
                    self.say(f"{PROG}: line {self.lines_seen} is not valid UTF-8; not sent")
                    continue
                text = text.removesuffix("\n").removesuffix("\r")
                if text.strip():
                    return text
        return None

    # -- output -------------------------------------------------------------------------

    def _on_transition(self, entry: Transition) -> None:
        if self.args.trace and self.run is not None:
            record = {"run_id": entry.run_id, **self.run.audit.as_dict(entry)}
            sys.stderr.write(json.dumps(record) + "\n")
            sys.stderr.flush()
        if self.progress is not None:
            self.progress.transition(entry)

    def _report_turn(self, number: int, result: SubagentResult) -> None:
        if self.progress is not None:
            self.progress.next_turn()
        assert self.run is not None
        if self.args.json:
            usage = None if result.usage is None else result.usage.model_dump()
            self._json(
                {
                    "type": "turn",
                    "run_id": self.run.id,
                    "turn": number,
                    "stop_reason": result.stop_reason,
                    "output": result.output,
                    "diagnostic": result.diagnostic,
                    "usage": usage,
                }
            )
            return
        if result.output:
            self._out(result.output if result.output.endswith("\n") else result.output + "\n")
        said = number in self.user_cancelled or self.cause is not None  # the cancellation line said why
        if result.stop_reason != StopReason.COMPLETED and not said:
            self.say(f"{PROG}: turn {number}: {headline(result.stop_reason)}")
            if result.diagnostic:
                self.say(f"Diagnostic: {result.diagnostic}")

    def _report_not_sent(self, over: ConversationOver) -> None:
        assert self.run is not None
        if self.args.json:
            self._json(
                {
                    "type": "turn",
                    "run_id": self.run.id,
                    "turn": self.turn,
                    "stop_reason": StopReason.ERROR,
                    "output": "",
                    "diagnostic": str(over),
                    "usage": None,
                }
            )
        else:
            self.say(f"{PROG}: {over}")

    def _report_end(self, outcome: ConversationOutcome) -> int:
        end = outcome.end
        if self.progress is not None:
            self.progress.done()
        spawn_failure = _spawn_failure(end.start_error)
        if spawn_failure is not None:
            sys.stderr.write(f"{PROG}: {spawn_failure}\n")
        turns = len(outcome.results) + (outcome.not_sent is not None)
        if self.args.json:
            last = outcome.results[-1] if outcome.results else None
            usage = None if last is None else last.usage
            document: dict[str, Any] = {"type": "conversation", **run_document(self.plan, end, usage)}
            document["turns"] = turns
            if outcome.not_sent is not None:
                document.update(
                    stop_reason=StopReason.ERROR, output="", diagnostic=str(outcome.not_sent), usage=None
                )
            self._json(document)
        else:
            if isinstance(end.start_error, StartAborted):
                if self.cause is None:
                    sys.stderr.write(f"{PROG}: {headline(StopReason.ABORTED)}\n")
            elif end.start_error is not None:
                sys.stderr.write(f"{PROG}: {end.start_error}\n")
            if end.teardown_error is not None:
                sys.stderr.write(f"{PROG}: teardown failed\nDiagnostic: {end.teardown_error.diagnostic}\n")
        return self._status_of(outcome)

    def _status_of(self, outcome: ConversationOutcome | None) -> int:
        if self.cause is not None:
            return _STATUS.get(self.cause, EXIT_INTERRUPTED)
        if self.failed or outcome is None:
            return EXIT_FAILED if self.failed else EXIT_OK
        end = outcome.end
        if not end.started or outcome.not_sent is not None or end.teardown_error is not None:
            return EXIT_FAILED
        for number, result in enumerate(outcome.results, start=self.first_turn):
            if result.stop_reason != StopReason.COMPLETED and number not in self.user_cancelled:
                return EXIT_FAILED
        return EXIT_OK if end.quiescent else EXIT_FAILED

    def _json(self, document: dict[str, Any]) -> None:
        self._out(json.dumps(document, ensure_ascii=False) + "\n")

    def _out(self, text: str) -> None:
        """An answer on stdout; a stdout that is gone ends the chat (no more tasks are read:
        nobody can see their answers), with one line and exit 1."""
        if self.stdout_gone or write_stdout(text):
            return
        self.stdout_gone = True
        self.failed = True
        self.say(STDOUT_GONE)

    # -- interrupts ---------------------------------------------------------------------

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if self.cause is not None:
                    if signum == signal.SIGINT and self.run is not None:  # no more graces
                        self.run.force_kill()
                elif name != "SIGINT" or self.interrupted:
                    self._quit(name)
                elif self.phase in ("starting", "turn") and self.run is not None:
                    self.interrupted = True
                    self.user_cancelled.add(self.turn)
                    self.say(f"{PROG}: turn {self.turn} cancelled (Ctrl-C again to quit)")
                    if self.phase == "turn":  # while starting: once the start is done
                        self.run.cancel()
                else:
                    self.interrupted = True
                    self.say(f"{PROG}: Ctrl-C again to quit (or end the input)")

    def _quit(self, cause: str) -> None:
        self.cause = cause
        if self.run is not None:
            if cause == "timeout":
                seconds = self.args.timeout
                self.say(f"{PROG}: timed out after {seconds:g} s; stopping the child (Ctrl-C to kill it now)")
            else:
                self.say(f"{PROG}: cancelled; stopping the child (Ctrl-C again to kill it now)")
        self.abort.abort()
        self.reading.cancel()

    async def _time_turn(self, number: int, scope: anyio.CancelScope) -> None:
        with scope:
            await anyio.sleep(self.args.timeout)
            if self.cause is not None or self.turn != number or self.run is None:
                return
            if self.phase == "starting":
                self._quit("timeout")
            elif self.phase == "turn":
                self.say(f"{PROG}: timed out after {self.args.timeout:g} s; turn {number} cancelled")
                self.run.cancel()
