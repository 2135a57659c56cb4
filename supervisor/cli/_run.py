"""``subagents run``: one supervised subagent, its progress on stderr, its answer on stdout.

Imported only when the ``run`` command runs (``_main`` parses the command line without it).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from machines import Transition
from supervisor import telemetry
from supervisor._abort import AbortSignal
from supervisor._config import MAX_TIMER_MS
from supervisor._errors import StartAborted
from supervisor._handle import Run
from supervisor._registry import Registry, journaled_run
from supervisor._seam import StopReason, SubagentRequest, Usage
from supervisor.cli._config_file import Entry, load_file
from supervisor.cli._numbers import ascii_integer, ascii_number, is_ascii_integer
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
from supervisor.fronts._sequence import RunOutcome, supervise
from supervisor.process import (
    CwdError,
    EnclosureFailed,
    SpawnFailed,
    check_cpu,
    check_directory,
    check_pids,
    parse_memory,
)

if TYPE_CHECKING:
    from supervisor.cli._live import LiveLine


def command(args: argparse.Namespace, child: list[str], *, started: Callable[[], None] | None = None) -> int:
    """Plan, run and report one run; ``child`` is the argv after ``--`` (may be empty).
    ``started`` is called once, at the run's first transition (its start's work is done by
    then: the spawn, and the kind's SDK imported for its handshake)."""
    plan = _plan(args, child)
    configure_logging(args.verbose)
    from supervisor.cli._journal import open_for_command

    open_for_command(args, args.config)
    telemetry.configure_from_cli(args.otel)
    try:
        return anyio.run(_run, plan, args, started, backend="asyncio")
    finally:
        telemetry.shutdown()


@dataclass
class _Plan:
    entry: Entry
    overrides: dict[str, Any]
    task: str
    parent_cwd: Path


def _plan(args: argparse.Namespace, command: list[str]) -> _Plan:
    task = sys.stdin.read() if args.task == "-" else args.task
    if not task.strip():
        raise ConfigError("the task is blank")
    return plan(args, command, task)


def plan(args: argparse.Namespace, command: list[str], task: str) -> _Plan:
    """The entry and its overrides from the run options (``run`` and ``chat`` share them);
    a ConfigError names the flag, the file, the entry or the key."""
    if args.timeout is not None and not 0 < args.timeout < float("inf"):
        raise ConfigError("--timeout must be a positive number of seconds")
    parent_cwd = Path.cwd()
    overrides: dict[str, Any] = {}
    if args.start_timeout is not None:
        if not 0 < args.start_timeout * 1000 <= MAX_TIMER_MS:
            raise ConfigError("--start-timeout must be a positive number of seconds")
        overrides["start_timeout_ms"] = args.start_timeout * 1000
    overrides.update(limit_overrides(args))
    if args.cwd is not None:
        try:
            overrides["cwd"] = check_directory(Path(os.path.abspath(args.cwd)), "--cwd")
        except CwdError as exc:
            raise ConfigError(str(exc)) from None
    if args.config is not None:
        entries = load_file(args.config)
        if args.provider is None:
            entry = entries[0]
        else:
            matches = [e for e in entries if e.name == args.provider]
            if not matches:
                names = ", ".join(e.name for e in entries)
                raise ConfigError(f"{args.config}: no provider named {args.provider!r} (have: {names})")
            entry = matches[0]
    else:
        entry = Entry.example(parent_cwd)
        if args.provider not in (None, entry.name):
            raise ConfigError(f"--provider needs --config (without it the provider is {entry.name})")
    if command:
        if not entry.runs_a_command:
            raise ConfigError(f"-- COMMAND applies to entries that run a command, not {entry.kind}")
        overrides.update(command=command[0], args=command[1:])
    if args.permission is not None:
        if not entry.has_key("permission"):
            raise ConfigError(f"--permission applies to entries with a permission key, not {entry.kind}")
        overrides["permission"] = args.permission
    if args.env:
        env = dict(entry.keys.get("env") or {})
        for item in args.env:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise ConfigError(f"--env expects K=V, got {item!r}")
            env[name] = value
        overrides["env"] = env
    overrides["stderr"] = "inherit" if args.verbose else entry.keys.get("stderr", "log")
    return _Plan(entry=entry, overrides=overrides, task=task, parent_cwd=parent_cwd)


def limit_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The run's limit flags as config keys, each checked here so an error names the flag.
    Whether a limit can be enforced is the config's check (it names the key)."""
    overrides: dict[str, Any] = {}
    flags = (
        ("--memory-max", args.memory_max, "memory_max", _memory_flag),
        ("--pids-max", args.pids_max, "pids_max", _count_flag),
        ("--cpu-max", args.cpu_max, "cpu_max", _cpu_flag),
        ("--stall-timeout", args.stall_timeout, "stall_timeout_ms", _seconds_flag),
    )
    for flag, raw, key, parse in flags:
        if raw is None:
            continue
        try:
            overrides[key] = parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{flag}: {exc}") from None
    return overrides


def _memory_flag(raw: str) -> int:
    return parse_memory(ascii_integer(raw) if is_ascii_integer(raw) else raw)  # a bare number is bytes


def _count_flag(raw: str) -> int:
    return check_pids(ascii_integer(raw))


def _cpu_flag(raw: str) -> float:
    try:
        value = ascii_number(raw)
    except ValueError:
        raise ValueError("must be a number of CPUs, e.g. 0.5 or 2") from None
    return check_cpu(value)


def _seconds_flag(raw: str) -> float:
    try:
        value = ascii_number(raw) * 1000
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_TIMER_MS:
        raise ValueError("must be a positive number of seconds")
    return value


@dataclass
class _Interruption:
    """Why the run was cancelled locally, if it was."""

    cause: str | None = None  # "SIGINT", "SIGTERM", "SIGHUP", "timeout"
    count: int = 0
    runs: list[Run] = field(default_factory=list)
    say: Callable[[str], None] = lambda line: None

    @property
    def exit_status(self) -> int:
        return {"SIGTERM": EXIT_TERMINATED, "SIGHUP": EXIT_HANGUP}.get(self.cause or "", EXIT_INTERRUPTED)


class _Progress:
    """Progress on stderr: on a terminal the run's progress line, live (``_live``); off
    one, a plain line per stage entered."""

    def __init__(self, stream: TextIO, *, enabled: bool, stages: Sequence[str]) -> None:
        self._stream = stream
        self._enabled = enabled
        self._stages = stages
        self._shown: str | None = None
        self._live: LiveLine | None = None
        if enabled and stream.isatty():
            from supervisor.cli._live import LiveLine  # rich: only on a terminal

            self._live = LiveLine(stream, PROG)
        else:
            self.show(stages[0])

    async def follow(self, run: Run) -> None:
        """On a terminal, draw the run's progress line as it moves (until its watch ends)."""
        if self._live is not None:
            await self._live.follow(run)

    def transition(self, entry: Transition) -> None:
        if self._live is None and entry.target in self._stages:
            self.show(entry.target)

    def show(self, stage: str) -> None:
        if not self._enabled or stage == self._shown:
            return
        self._shown = stage
        self._stream.write(f"{PROG}: {stage}\n")
        self._stream.flush()

    def done(self) -> None:
        """The live line, if any, is erased (before an answer is written)."""
        if self._live is not None:
            self._live.clear()

    def next_turn(self) -> None:
        """A conversation's turn is over: its live line is erased (the next turn draws its
        own; plain lines show each stage once)."""
        self.done()

    def say(self, line: str) -> None:
        """One line of its own (above the live line, if one is shown)."""
        if self._live is not None and self._live.shown:
            self._live.say(line)
            return
        self._stream.write(line + "\n")
        self._stream.flush()


async def _run(plan: _Plan, args: argparse.Namespace, started: Callable[[], None] | None = None) -> int:
    config = plan.entry.build(plan.overrides)
    provider = plan.entry.provider(config)
    registry = Registry()
    registry.register(provider)
    request = SubagentRequest(task=plan.task, parent_cwd=plan.parent_cwd)
    registry.check(provider.name, request)

    def on_transition(entry: Transition) -> None:
        nonlocal started
        if started is not None:  # once: the start is done
            call = started
            started = None
            call()
        if args.trace:
            record = {"run_id": entry.run_id, **run.audit.as_dict(entry)}
            sys.stderr.write(json.dumps(record) + "\n")
            sys.stderr.flush()
        progress.transition(entry)

    run = journaled_run(provider, request, trace=on_transition)
    progress = _Progress(sys.stderr, enabled=not args.trace, stages=run.vocabulary.stages)
    abort = AbortSignal()
    interruption = _Interruption(runs=[run], say=progress.say)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_signals, abort, interruption)
        tg.start_soon(progress.follow, run)
        if args.timeout is not None:
            tg.start_soon(_timeout, args.timeout, abort, interruption)
        outcome = await supervise(run, abort)
        tg.cancel_scope.cancel()
    progress.done()
    return _report(plan, args, outcome, interruption)


async def _watch_signals(abort: AbortSignal, interruption: _Interruption) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            interruption.count += 1
            if interruption.cause is None:
                interruption.cause = signal.Signals(signum).name
                interruption.say(f"{PROG}: cancelled; stopping the child (Ctrl-C again to kill it now)")
                abort.abort()
            elif signum == signal.SIGINT:  # a second Ctrl-C: no more graces
                for run in interruption.runs:
                    run.force_kill()


async def _timeout(seconds: float, abort: AbortSignal, interruption: _Interruption) -> None:
    await anyio.sleep(seconds)
    if interruption.cause is None:
        interruption.cause = "timeout"
        interruption.say(f"{PROG}: timed out after {seconds:g} s; stopping the child (Ctrl-C to kill it now)")
        abort.abort()


def _report(plan: _Plan, args: argparse.Namespace, outcome: RunOutcome, interruption: _Interruption) -> int:
    result, start_error = outcome.result, outcome.start_error
    if outcome.cancelled and (interruption.cause is not None or not outcome.started):
        status = interruption.exit_status
    elif outcome.completed:
        status = EXIT_OK
    else:
        status = EXIT_FAILED
    spawn_failure = _spawn_failure(start_error)
    if spawn_failure is not None:
        sys.stderr.write(f"{PROG}: {spawn_failure}\n")
    if args.json:
        usage = None if outcome.result is None else outcome.result.usage
        document = run_document(plan, outcome, usage)
        if not write_stdout(json.dumps(document, ensure_ascii=False) + "\n"):
            sys.stderr.write(STDOUT_GONE + "\n")
            return EXIT_FAILED
        return status
    answer = None if result is None or not result.output else result.output
    if answer is not None and not write_stdout(answer if answer.endswith("\n") else answer + "\n"):
        sys.stderr.write(STDOUT_GONE + "\n")
        status = EXIT_FAILED
    if isinstance(start_error, StartAborted):  # the cancellation line said why
        sys.stderr.write(f"{PROG}: {headline(StopReason.ABORTED)}\n")
    elif start_error is not None:
        sys.stderr.write(f"{PROG}: {start_error}\n")
    elif result is not None and result.stop_reason != StopReason.COMPLETED:
        sys.stderr.write(f"{PROG}: {headline(result.stop_reason)}\n")
        if result.diagnostic:
            sys.stderr.write(f"Diagnostic: {result.diagnostic}\n")
    if outcome.teardown_error is not None:
        sys.stderr.write(f"{PROG}: teardown failed\nDiagnostic: {outcome.teardown_error.diagnostic}\n")
    return status


_SPAWN_REASONS = {
    errno.ENOENT: "not found",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


def run_document(plan: _Plan, outcome: RunOutcome, usage: Usage | None) -> dict[str, Any]:
    """What ``--json`` prints for a run (``run``) or a whole conversation (``chat``)."""
    run, exit_facts = outcome.run, outcome.run.exit_facts
    document: dict[str, Any] = {
        "run_id": run.id,
        "provider": plan.entry.name,
        "kind": plan.entry.kind,
        "started": outcome.started,
        "stop_reason": outcome.stop_reason if outcome.started else None,
        "output": outcome.output,
        "diagnostic": outcome.diagnostic,
        "usage": None if usage is None else usage.model_dump(),
        "stages": list(run.stages_entered),
        "exit_code": None if exit_facts is None else exit_facts.exit_code,
        "signal": None if exit_facts is None else exit_facts.signal,
        "quiescent": outcome.quiescent,
        "containment": run.containment,
        "resources": None if run.resources is None else run.resources.model_dump(),
        "audit": run.audit.as_dicts(),
    }
    workspace = getattr(run, "workspace", None)
    if workspace is not None:  # workspace = "worktree": the run's own worktree
        document["workspace"] = workspace.model_dump()
    if outcome.teardown_error is not None:
        document["teardown"] = outcome.teardown_error.diagnostic
    return document


def _spawn_failure(error: BaseException | None) -> str | None:
    """``could not start '<command>': <reason>`` when the start failed because the program
    could not be executed (the OS error is on the cause chain), else None.  When the run's
    cgroups could not be set up, the line says which file the kernel refused, or why a
    limit cannot be had."""
    cause = error
    while cause is not None and not isinstance(cause, SpawnFailed):
        cause = cause.__cause__
    if isinstance(cause, EnclosureFailed) and cause.__cause__ is not None:
        refusal = cause.__cause__
        if isinstance(refusal, OSError) and refusal.filename is not None:
            return f"could not set up the run's cgroups: {refusal.filename} refused ({refusal.strerror})"
        return f"could not set up the run's cgroups: {refusal}"
    if cause is None or not isinstance(cause.__cause__, OSError):
        return None
    os_error = cause.__cause__
    command = os.fsdecode(os_error.filename) if os_error.filename is not None else "?"
    reason = _SPAWN_REASONS.get(os_error.errno or 0, "not an executable file")
    if reason == "permission denied" and os.path.isdir(command):
        reason = "not an executable file"
    return f"could not start '{command}': {reason}"
