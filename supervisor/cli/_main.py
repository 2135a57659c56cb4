"""``subagents``: run one supervised subagent from the command line.

Exit status: 0 completed; 1 any other result or a failed start; 2 a usage or
configuration error found before anything spawned; 130 local cancellation (Ctrl-C or
``--timeout``); 129 SIGHUP; 143 SIGTERM.  SIGHUP and SIGTERM cancel the run locally
like Ctrl-C: the whole tree is torn down before the CLI exits.

Nothing the child controls is printed except the run's answer (stdout); ``--verbose``
adds the child's stderr and the host log (``supervisor``, ``supervisor.child``).

This module is the command line's grammar and dispatch only: it imports no command's
machinery, so ``--version`` and ``--help`` cost an interpreter start and ``argparse``;
each command imports what it needs when it runs (``_run``, ``_batch``, ``_mcp``, ...).
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from supervisor._errors import ProviderUnusable, SubagentError
from supervisor._version import package_version
from supervisor.cli import _batch as _batch_cli
from supervisor.cli import _journal as _journal_cli
from supervisor.cli import _mcp as _mcp_cli
from supervisor.cli._numbers import NUMBER
from supervisor.cli._usage import EXIT_FAILED, EXIT_OK, EXIT_USAGE, PROG, ConfigError, configure_logging

RUN_EPILOG = """\
-- COMMAND ARGS...
  everything after `--` is the child to supervise, for an entry whose kind runs a
  command (its `command` and `args` keys), run verbatim with no shell, e.g.
  subagents run "fix the failing test" -- npx @zed-industries/codex-acp
  Without --config and without a command: the built-in example agent.

exit status:
  0    the run completed
  1    any other result, or the start failed
  2    a usage or configuration error (nothing was started)
  130  local cancellation (Ctrl-C or --timeout)
  143  SIGTERM
"""


CHAT_EPILOG = """\
One task per line of stdin (a prompt on a terminal); each answer is printed as its
turn ends. The first line starts the child; every later line is the next turn of the
same agent session. End of input (Ctrl-D) ends the conversation.
Ctrl-C cancels the running turn (the conversation goes on); a second Ctrl-C quits.

-- COMMAND ARGS...
  the child to supervise, as for `run`, e.g.
  subagents chat -- npx @zed-industries/codex-acp

exit status:
  0    every turn completed (turns cancelled with Ctrl-C aside), the input ended
  1    a turn failed or timed out, the conversation ended on its own, or the start failed
  2    a usage or configuration error (nothing was started)
  130  quit with Ctrl-C (or --timeout before the first turn's start was done)
  143  SIGTERM
"""


class _Parser(argparse.ArgumentParser):
    usage_tail = ""
    """Added to the usage line argparse makes (``run``, ``chat``: `` [-- COMMAND ARGS...]``),
    once, when the usage is first shown: making it is a few ms a command need not pay."""

    def error(self, message: str) -> Any:  # one line, exit 2
        raise ConfigError(message)

    def format_usage(self) -> str:
        self._add_usage_tail()
        return super().format_usage()

    def format_help(self) -> str:
        self._add_usage_tail()
        return super().format_help()

    def _add_usage_tail(self) -> None:
        if self.usage_tail and self.usage is None:
            self.usage = super().format_usage().removeprefix("usage: ").rstrip() + self.usage_tail


def _run_options(run: argparse.ArgumentParser, *, timeout_help: str, json_help: str) -> None:
    """The options of ``run``, which ``chat`` shares."""
    run.add_argument("--provider", metavar="NAME", help="the config entry to use (default: the first)")
    run.add_argument("--config", metavar="FILE", type=Path, help="TOML file of [[provider]] entries")
    run.add_argument("--cwd", metavar="DIR", help="the child's working directory (default: here)")
    run.add_argument(
        "--permission",
        choices=("reject", "allow"),
        help="how to answer permission requests (entries with a permission key)",
    )
    run.add_argument("--env", metavar="K=V", action="append", default=[], help="extra child environment")
    run.add_argument("--json", action="store_true", help=json_help)
    run.add_argument("--trace", action="store_true", help="stream transitions as JSON lines on stderr")
    run.add_argument("--verbose", action="store_true", help="child stderr and host log on stderr")
    run.add_argument("--timeout", metavar="SECONDS", type=NUMBER, help=timeout_help)
    run.add_argument("--otel", action="store_true", help="export an OpenTelemetry trace (OTLP/HTTP)")
    _journal_cli.add_argument(run)
    run.add_argument(
        "--start-timeout",
        metavar="SECONDS",
        type=NUMBER,
        help="fail the start if the child is not ready within SECONDS (default: the entry's, 60)",
    )
    limits = run.add_argument_group("limits of the run (cgroup containment; see the README)")
    limits.add_argument("--memory-max", metavar="SIZE", help='memory of the tree: bytes, "512M", "2G"')
    limits.add_argument("--pids-max", metavar="N", help="processes and threads of the whole tree")
    limits.add_argument("--cpu-max", metavar="CPUS", help="CPU time of the whole tree, in CPUs (0.5, 2)")
    limits.add_argument(
        "--stall-timeout",
        metavar="SECONDS",
        help="fail the run when the child writes nothing and its tree uses no CPU for SECONDS",
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Run AI coding agents as supervised child processes.")
    parser.add_argument("--version", action="version", version=f"{PROG} {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="run one task in a supervised child agent",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _run_options(
        run, timeout_help="cancel the run after SECONDS", json_help="print one JSON object on stdout"
    )
    run.add_argument("task", metavar="TASK", help="the task text, or - to read it from stdin")
    run.usage_tail = " [-- COMMAND ARGS...]"

    chat = commands.add_parser(
        "chat",
        help="talk to one supervised child agent: one task per line of stdin",
        epilog=CHAT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _run_options(
        chat,
        timeout_help="cancel a turn after SECONDS (the first turn's start included)",
        json_help="print one JSON object per turn, then one for the conversation, on stdout",
    )
    chat.add_argument(
        "--resume",
        metavar="RUN_ID",
        help="continue a journaled conversation (same --config or -- COMMAND as the chat it continues)",
    )
    chat.usage_tail = " [-- COMMAND ARGS...]"

    diagrams = commands.add_parser(
        "diagrams", help="print the lifecycle diagrams as Mermaid (or write, check, render them)"
    )
    where = diagrams.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", type=Path, help="write one Markdown file per module into DIR")
    where.add_argument("--check", metavar="DIR", type=Path, help="fail if the diagrams in DIR are stale")
    diagrams.add_argument("--svg", metavar="DIR", type=Path, help="render SVGs into DIR (needs graphviz)")

    commands.add_parser("providers", help="list provider kinds and their capabilities")
    commands.add_parser("reap", help="end what supervising processes that died left running")
    commands.add_parser("doctor", help="check what containment, providers and Python this machine has")
    _batch_cli.add_parser(commands)

    _mcp_cli.add_parser(commands)
    _journal_cli.add_parsers(commands)
    return parser


# -- other commands -----------------------------------------------------------------------


def _diagrams(args: argparse.Namespace) -> int:
    from supervisor.cli import _diagrams

    if args.svg is not None:  # checked first: without graphviz nothing at all is written
        missing = _diagrams.svg_missing()
        if missing is not None:
            sys.stderr.write(f"{PROG}: {missing}\n")
            return EXIT_FAILED
    if args.check is not None:
        stale = _diagrams.stale(args.check)
        if stale:
            sys.stderr.write(
                f"{PROG}: stale diagrams in {args.check}: {', '.join(stale)} "
                f"(run `{PROG} diagrams --out {args.check}`)\n"
            )
            return EXIT_FAILED
        print(f"diagrams in {args.check} are current")
    elif args.out is not None:
        for path in _diagrams.write(args.out):
            print(path)
    elif args.svg is None:
        sys.stdout.write("\n".join(_diagrams.render().values()))
    if args.svg is not None:
        for path in _diagrams.write_svg(args.svg):
            print(path)
    return EXIT_OK


_CAPABILITIES = (
    ("output_schema", "outputSchema"),
    ("depth_limit", "depthLimit"),
    ("tool_filter", "toolFilter"),
    ("persona", "persona"),
    ("agent_options", "agentOptions"),
    ("conversation", "conversation"),
    ("resume", "resume"),
)


def _capabilities_text(capabilities: Any) -> str:
    have = [spelled for field, spelled in _CAPABILITIES if getattr(capabilities, field, False)]
    lacking = [spelled for field, spelled in _CAPABILITIES if not getattr(capabilities, field, False)]
    rejected = ""
    if len(lacking) > 1:
        rejected = f" ({', '.join(lacking[:-1])} and {lacking[-1]} are rejected)"
    elif lacking:
        rejected = f" ({lacking[0]} is rejected)"
    return (", ".join(have) if have else "none") + rejected


def _providers() -> int:
    from supervisor._kinds import installed_kinds

    status = EXIT_OK
    for name, installed in installed_kinds().items():
        try:
            kind = installed.load()
        except ProviderUnusable as exc:  # the others are still listed
            print(f"{PROG}: {exc}", file=sys.stderr)
            status = EXIT_FAILED
            continue
        extra = f"; needs the `{installed.extra}` extra" if installed.extra else ""
        print(f"{name:<12} {kind.vocabulary.label} child{extra}")
        print(f"{'':<12} capabilities: {_capabilities_text(kind.capabilities)}")
    return status


def _reap() -> int:
    from supervisor.process import sweep

    reaped = sweep()
    for item in reaped:
        print(item.line())
    if not reaped:
        print("nothing to reap")
    return EXIT_OK


def _doctor() -> int:
    from supervisor.cli._doctor import doctor

    return doctor(print)


def _batch(args: argparse.Namespace) -> int:
    configure_logging(args.verbose)
    return _batch_cli.command(args)


def _mcp(args: argparse.Namespace) -> int:
    configure_logging(args.verbose)
    return _mcp_cli.command(args)


def main(argv: Sequence[str] | None = None, *, freeze: bool = False) -> int:
    """The ``subagents`` command.  ``freeze`` (the executable only): see :func:`_freeze_startup`."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in arguments:
        split = arguments.index("--")
        arguments, command = arguments[:split], arguments[split + 1 :]
        if not command:
            return _usage("-- must be followed by a command")
    try:
        args = _parser().parse_args(arguments)
        if args.command == "diagrams":
            return _diagrams(args)
        if args.command == "providers":
            return _providers()
        if args.command == "reap":
            return _reap()
        if args.command == "doctor":
            return _doctor()
        if args.command == "runs":
            return _journal_cli.runs_command(args)
        if args.command == "show":
            return _journal_cli.show_command(args)
        # the collector is off until _freeze_startup: a run's start leaves next to no garbage
        paused = args.command in ("run", "chat") and _pause_collector(freeze)
        from supervisor.process import own_orphans  # the process layer: these commands need it anyway

        own_orphans()  # run, chat, batch and mcp start no children of their own besides runs
        if args.command == "batch" and not command:
            return _batch(args)
        if args.command == "mcp" and not command:
            return _mcp(args)
        if command and args.command not in ("run", "chat"):
            return _usage("-- COMMAND is only for `run` and `chat`")
        if args.command == "chat":
            from supervisor.cli import _chat

            _freeze_startup(freeze, paused)
            return _chat.command(args, command)
        from supervisor.cli import _run  # the run's machinery: only when a run is asked for

        # frozen (and collected again) at the run's first transition: its start imports the SDK
        return _run.command(args, command, started=functools.partial(_freeze_startup, freeze, paused))
    except ConfigError as exc:
        return _usage(str(exc))
    except ProviderUnusable as exc:  # an installed plug-in that cannot run: not a usage error
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except SubagentError as exc:  # e.g. an unsupported capability: rejected before spawning
        return _usage(str(exc))


def _pause_collector(freeze: bool) -> bool:
    """The executable, before a run's modules are imported: the collector is off until
    :func:`_freeze_startup`.  What the start makes (modules, classes, functions: the run's
    and its SDK's) lives as long as the process, so the young collections it set off found
    next to nothing to free: about 130 collections and 25 ms of CPU of a `run "say hello"`
    (measured with ``gc.callbacks``, load 8).  An in-process caller's collector is theirs:
    left alone.  True when it switched it off."""
    if freeze and gc.isenabled():
        gc.disable()
        return True
    return False


def _freeze_startup(freeze: bool, paused: bool) -> None:
    """The executable, once the start is done (``chat``: its modules imported; ``run``: at
    the run's first transition, after its spawn and its SDK's import): what exists lives as
    long as the process, so the collector stops scanning it (``gc.freeze``), and is switched
    back on if :func:`_pause_collector` switched it off (``paused``).  Without the freeze,
    the SDK's import (tens of thousands of objects) set off a full collection of every object
    of the process.  A frozen object is still freed when its last reference goes; only a
    reference cycle made during the start stays (a few, once).  New objects are collected
    as before.  An in-process caller's collector is theirs: left alone."""
    if freeze:
        gc.freeze()
    if paused:
        gc.enable()


def console() -> NoReturn:
    """The ``subagents`` executable (and ``python -m supervisor.cli``): :func:`main`, then a
    quick exit.

    Tearing the interpreter down after a run (freeing every module, the SDK's hundreds of
    pydantic models among them) measured about 0.2 s here, longer than the run itself.  Once
    :func:`main` has returned, stdout and stderr are flushed, the ``atexit`` handlers run (the
    cgroup host group's removal, ``logging.shutdown``, ``weakref.finalize``) and the process
    ends with ``os._exit``.  The interpreter's own exit is kept whenever that would not be
    the same: a non-daemon thread still alive, a flush that fails, no ``atexit`` runner.
    """
    try:
        status = main(freeze=True)
        _flush_std()
    except BrokenPipeError:  # stdout's reader went away: `subagents providers | head -1`
        status = _stdout_gone()
    _quick_exit(status)
    sys.exit(status)


EXIT_STDOUT_GONE = 141
"""128 + SIGPIPE: what a shell reports for a program that the closed pipe ended."""


def _stdout_gone() -> int:
    """stdout's reader is gone: what is still buffered for it goes to ``/dev/null`` (so the
    interpreter's exit raises no second error), and the status says so, as ``git`` and the
    shell's own tools do when the reader of their output stops reading."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return EXIT_STDOUT_GONE


def _join_idle_workers() -> None:
    """Let anyio's worker threads end: the event loop is closed and each was told to stop,
    but one still winding down (they are not daemons) would send the exit down the
    interpreter's slow path (about 0.2 s, and seconds on a loaded machine: past the 500 ms
    the Claude Code CLI gives ``subagents mcp`` before SIGKILL).  One still busy after a
    short wait (a blocking call it was abandoned in) keeps the interpreter's own exit."""
    import threading

    for thread in threading.enumerate():
        if thread.name == "AnyIO worker thread" and not thread.daemon:
            thread.join(timeout=WORKER_JOIN_SECONDS)


WORKER_JOIN_SECONDS = 0.25


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):  # None when the fd was closed before we started
        if stream is not None:
            stream.flush()


def _quick_exit(status: int) -> None:
    import atexit
    import os
    import threading

    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    _join_idle_workers()
    if run_exitfuncs is None or any(
        t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()
    ):
        return
    try:
        _flush_std()
    except (OSError, ValueError):
        return  # the interpreter's exit reports it as it always did
    run_exitfuncs()  # runs each handler once: a normal exit after this runs none again
    try:
        _flush_std()  # what an exit handler wrote
    except (OSError, ValueError):
        return
    os._exit(status)


def _usage(message: str) -> int:
    sys.stderr.write(f"{PROG}: {message}\n")
    return EXIT_USAGE
