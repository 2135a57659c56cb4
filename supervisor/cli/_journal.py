"""The journal on the command line: which file (``--journal``, ``SUBAGENTS_JOURNAL``, the
config's ``journal``, else the default), and ``subagents runs`` / ``show``.

Imports no run machinery: ``runs`` and ``show`` read the file and print.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from supervisor.cli._numbers import INTEGER
from supervisor.cli._usage import EXIT_FAILED, EXIT_OK, PROG, ConfigError

ENV = "SUBAGENTS_JOURNAL"
_OFF = ("false", "off", "no", "0")


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--journal",
        metavar="PATH",
        help="the journal file (default: $XDG_STATE_HOME/subagent-supervisor/journal.db; false: none)",
    )


def _config_settings(config: Path | None) -> tuple[str | bool | None, bool]:
    """The config file's top-level ``journal`` (a path relative to the file, or False) and
    ``journal_text``."""
    if config is None:
        return None, False
    import tomllib  # only with --config: a run without one does not pay for the parser

    try:
        document = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None, False  # the config loader says what is wrong with the file
    check_keys(config, document)
    value = document.get("journal")
    text = bool(document.get("journal_text", False))
    if isinstance(value, str):
        path = Path(os.path.expanduser(value))
        return str(path if path.is_absolute() else config.resolve().parent / path), text
    return value, text


def check_keys(config: Path, document: dict[str, Any]) -> None:
    """A ConfigError naming the file and the key when ``journal`` or ``journal_text`` is wrong."""
    value = document.get("journal")
    if value is not None and value is not False and not (isinstance(value, str) and value.strip()):
        raise ConfigError(f"{config}: journal: must be a file path or false")
    text = document.get("journal_text")
    if text is not None and not isinstance(text, bool):
        raise ConfigError(f"{config}: journal_text: must be true or false")


def resolve(args: argparse.Namespace, config: Path | None = None) -> tuple[Path | None, bool]:
    """The journal file to use (None: off) and whether it keeps text.

    ``--journal`` wins, then ``SUBAGENTS_JOURNAL``, then the config's ``journal``, then
    the default; ``false`` at any of them turns the journal off.
    """
    configured, text = _config_settings(config)
    for value in (getattr(args, "journal", None), os.environ.get(ENV)):
        if value is not None and value.strip():
            return (None, text) if value.strip().lower() in _OFF else (Path(os.path.expanduser(value)), text)
    if configured is False:
        return None, text
    if isinstance(configured, str):
        return Path(configured), text
    from supervisor.journal import default_path

    return default_path(), text


def _say(line: str) -> None:
    try:
        sys.stderr.write(f"{PROG}: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def open_for_command(args: argparse.Namespace, config: Path | None = None) -> Any:
    """Open the command's journal and make it the journal of every run the command
    starts; None when it is off.  A journal that cannot be written says so once on
    stderr and the runs go on unjournaled."""
    path, text = resolve(args, config)
    if path is None:
        return None
    from supervisor.journal import Journal, _switch

    journal = Journal(path, text=text, on_problem=_say)
    _switch.set_default(journal)
    return journal


def provider_of(args: argparse.Namespace, run_id: str) -> str | None:
    """The provider name a journaled run had (``chat --resume`` picks that config entry),
    or None when the journal cannot say (the resume's own checks then say why)."""
    from supervisor.journal._read import JournalUnreadable, read_run

    path, _ = resolve(args, args.config)
    if path is None:
        return None
    try:
        record = read_run(path, run_id)
    except JournalUnreadable:
        return None
    return None if record is None else record.provider


# -- runs and show --------------------------------------------------------------------------


STATES = ("starting", "running", "settled", "idle", "ended", "leaked", "interrupted")
"""What ``runs --state`` takes (the journal's states; kept here so the parser imports nothing)."""


def add_parsers(commands: Any) -> None:
    runs = commands.add_parser("runs", help="list the journaled runs, newest first")
    runs.add_argument("--json", action="store_true", help="print one JSON array on stdout")
    runs.add_argument("--state", choices=STATES, help="only runs in this state")
    runs.add_argument("--limit", metavar="N", type=INTEGER, help="at most N runs (the newest)")
    add_argument(runs)
    show = commands.add_parser("show", help="print one journaled run: its turns, resources and audit trail")
    show.add_argument("run_id", metavar="RUN_ID")
    show.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    add_argument(show)


def _reading_path(args: argparse.Namespace) -> Path:
    path, _ = resolve(args)
    if path is None:
        raise ConfigError("the journal is turned off (--journal or SUBAGENTS_JOURNAL says false)")
    return path


def _when(stamp: float | None) -> str:
    return "-" if stamp is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _quiet_pipe(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A reader piped into ``head`` that stops reading is not an error."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            status = command(args)
            sys.stdout.flush()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return EXIT_OK
        return status

    return wrapped


@_quiet_pipe
def runs_command(args: argparse.Namespace) -> int:
    from supervisor.journal._read import JournalUnreadable, list_runs

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be a positive integer")
    path = _reading_path(args)
    try:
        records = list_runs(path, state=args.state, limit=args.limit)
    except JournalUnreadable as exc:
        if not path.exists():  # nothing journaled yet: an empty list
            records = []
        else:
            _say(str(exc))
            return EXIT_FAILED
    if args.json:
        sys.stdout.write(json.dumps([r.summary() for r in records]) + "\n")
        return EXIT_OK
    if not records:
        return EXIT_OK
    print(
        f"{'RUN ID':<36}  {'KIND':<11}  {'STATE':<11}  {'TURNS':>5}  {'STARTED':<19}  {'WALL':>8}  "
        f"{'STOP':<9}  COST"
    )
    for r in records:
        cost = "-" if r.cost_usd is None else f"${r.cost_usd:.4f}"
        print(
            f"{r.id:<36}  {r.kind:<11}  {r.state:<11}  {r.turns:>5}  {_when(r.started_at):<19}  "
            f"{_seconds(r.wall_s):>8}  {r.stop_reason or '-':<9}  {cost}"
        )
    return EXIT_OK


@_quiet_pipe
def show_command(args: argparse.Namespace) -> int:
    from supervisor.journal._read import JournalUnreadable, read_run

    path = _reading_path(args)
    try:
        record = read_run(path, args.run_id)
    except JournalUnreadable as exc:
        _say(str(exc))
        return EXIT_FAILED
    if record is None:
        _say(f"no run {args.run_id} in the journal {path}")
        return EXIT_FAILED
    if args.json:
        document = record.as_dict()
        document["agent_session_id"] = record.agent_session
        sys.stdout.write(json.dumps(document, ensure_ascii=False) + "\n")
        return EXIT_OK
    print(f"run {record.id}")
    shape = "conversation" if record.conversation else "one-shot"
    print(f"  provider {record.provider} (kind {record.kind}), {shape}")
    print(f"  state {record.state}; turns {record.turns}; stop reason {record.stop_reason or '-'}")
    wall = _seconds(record.wall_s)
    print(f"  started {_when(record.started_at)}; ended {_when(record.ended_at)}; wall {wall}")
    if record.end_reason:
        print(f"  conversation ended: {record.end_reason}")
    if record.diagnostic:
        print(f"  diagnostic: {record.diagnostic}")
    quiescent = _yes(record.quiescent)
    print(f"  cwd {record.cwd or '-'}; containment {record.containment or '-'}; quiescent {quiescent}")
    if record.resources:
        res = record.resources
        cpu = "-" if res["cpu_s"] is None else f"{res['cpu_s']:.3f}s"
        memory, pids = res["memory_peak_bytes"] or "-", res["pids_peak"] or "-"
        print(f"  resources: cpu {cpu}, memory peak {memory} bytes, pids peak {pids}")
    if record.agent_session:
        print(f"  agent session {record.agent_session}")
    for turn in record.turn_records:
        took = None if turn.ended_at is None else turn.ended_at - turn.started_at
        line = f"  turn {turn.number}: {turn.state}, {turn.stop_reason or '-'}, {_seconds(took)}"
        if turn.usage:
            line += ", usage " + ", ".join(f"{k} {v}" for k, v in turn.usage.items() if v is not None)
        print(line)
        if turn.diagnostic:
            print(f"    diagnostic: {turn.diagnostic}")
        if turn.task is not None:
            print(f"    task: {turn.task}")
        if turn.answer is not None:
            print(f"    answer: {turn.answer}")
    print("  audit:")
    for entry in record.audit:
        print(
            f"    {entry['t']:>10.6f}  turn {entry['turn']}  {entry['machine']:<9}  "
            f"{entry['source']} -> {entry['target']}  ({entry['event']})"
        )
    return EXIT_OK


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")
