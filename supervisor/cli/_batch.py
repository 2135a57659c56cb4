"""``subagents batch``: a JSONL file of tasks in, one JSON record per finished run out.

Exit status: 0 every item completed; 1 any did not (a failed run, a failed start, a bad
line); 2 a usage or configuration error found before anything ran; 130 Ctrl-C, 143
SIGTERM, 129 SIGHUP (running runs are cancelled and torn down, finished records kept,
runs that did not finish are not written, so ``--resume`` runs them again; a second
Ctrl-C skips the graces of the local runs' teardown and kills their trees at once).
A write error on the output stops the batch the same way (nothing new starts, the running
runs are cancelled and torn down, the records written stay whole) and exits 1 with one
line naming the output and the OS reason.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.cli._numbers import INTEGER, NUMBER
from supervisor.cli._usage import EXIT_FAILED, EXIT_OK, ConfigError, add_ceiling_arguments

if TYPE_CHECKING:
    from supervisor._registry import Registry
    from supervisor.cli._batch_out import RecordWriter

# The batch engine, anyio and the config file are imported by the functions that use them
# (the parser of every ``subagents`` command imports this module for ``add_parser``).
_SIGNAL_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


def add_parser(commands: Any) -> None:
    """The ``batch`` subcommand's arguments."""
    parser = commands.add_parser("batch", help="run every task of a JSONL file, locally or on Ray")
    parser.add_argument("input", metavar="INPUT.jsonl", type=Path, help='lines of {"id", "task", ...}')
    parser.add_argument("--config", metavar="FILE", type=Path, help="TOML file of [[provider]] entries")
    parser.add_argument("--out", metavar="FILE", type=Path, help="where the records go (default: stdout)")
    parser.add_argument("--concurrency", metavar="N", type=INTEGER, help="runs at once (default: CPU count)")
    parser.add_argument(
        "--warm",
        metavar="N",
        type=INTEGER,
        help="warm children kept ahead of the queue (default: --concurrency)",
    )
    parser.add_argument("--resume", action="store_true", help="skip ids already recorded in --out")
    parser.add_argument("--ray", metavar="ADDRESS", help="run each task as a Ray task (auto or an address)")
    parser.add_argument("--ray-num-cpus", metavar="X", type=NUMBER, default=1.0, help="CPUs per Ray task")
    parser.add_argument("--retry-lost", action="store_true", help="Ray: rerun a run whose node was lost")
    add_ceiling_arguments(parser)
    parser.add_argument("--verbose", action="store_true", help="child stderr and host log on stderr")
    parser.add_argument("--otel", action="store_true", help="export an OpenTelemetry trace (OTLP/HTTP)")
    from supervisor.cli._journal import add_argument as add_journal_argument

    add_journal_argument(parser)


def _recorded_ids(path: Path) -> set[str]:
    """The ids of the records already in ``path`` (a torn or unreadable line is ignored)."""
    from supervisor.batching._jobs import line_id, split_lines

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the output file ({exc.strerror})") from None
    return {found for line in split_lines(data) if (found := line_id(line)) is not None}


def _open_out(path: Path | None, resume: bool) -> RecordWriter:
    from supervisor.cli._batch_out import RecordWriter

    if path is None:
        return RecordWriter.to_stdout()
    try:
        return RecordWriter.to_file(path, resume=resume)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write the output file ({exc.strerror})") from None


def command(args: argparse.Namespace) -> int:
    """Run ``subagents batch``; a ConfigError raised here means nothing ran (exit 2)."""
    import anyio

    from supervisor import telemetry
    from supervisor.batching._jobs import line_id, split_lines
    from supervisor.cli._config_file import apply_ceiling, load_registry, refuse_uncovered_entries

    if args.concurrency is not None and args.concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    if args.warm is not None and args.warm < 0:
        raise ConfigError("--warm must be at least 0")
    if not args.ray_num_cpus > 0:
        raise ConfigError("--ray-num-cpus must be a positive number")
    if args.resume and args.out is None:
        raise ConfigError("--resume needs --out (the records to resume from)")
    if args.ray is not None and (args.max_memory is not None or args.max_pids is not None):
        raise ConfigError(
            "--max-memory and --max-pids bound the runs of this process; with --ray the runs are "
            "in Ray's worker processes (bound them with Ray's own resources)"
        )
    if args.ray is not None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("--ray needs the `ray` extra: pip install 'subagent-supervisor[ray]'") from None
    apply_ceiling(args)
    try:
        # Split on "\n" only: U+2028, U+2029 and U+0085 are legal inside JSON strings.  A line
        # that is not UTF-8 is one error record, not a refusal of the whole file.
        lines = split_lines(args.input.read_bytes())
    except OSError as exc:
        raise ConfigError(f"{args.input}: cannot read the input file ({exc.strerror})") from None
    registry, _names = load_registry(args.config, verbose=args.verbose, base_dir=Path.cwd())
    refuse_uncovered_entries(args, registry)
    if args.resume:
        done = _recorded_ids(args.out)
        lines = [b"" if line_id(line) in done else line for line in lines]
    out = _open_out(args.out, args.resume)
    if args.ray is None:  # runs on Ray are in Ray's worker processes: not journaled here
        from supervisor.cli._journal import open_for_command

        open_for_command(args, args.config)
    telemetry.configure_from_cli(args.otel)
    try:
        with telemetry.span("subagents batch"):  # every run's span nests under this one
            return anyio.run(_main, args, registry, lines, out, backend="asyncio")
    finally:
        telemetry.shutdown()
        out.close()


async def _main(args: argparse.Namespace, registry: Registry, lines: list[bytes], out: RecordWriter) -> int:
    import anyio

    from supervisor._abort import AbortSignal
    from supervisor.batching._jobs import BatchEvents, BatchRecord, to_json
    from supervisor.batching._local import batch
    from supervisor.cli._batch_out import OutputFailed
    from supervisor.cli._batch_progress import BatchProgress  # rich: only when a batch runs

    progress = BatchProgress(sys.stderr, total=sum(1 for line in lines if line.strip()))
    abort = AbortSignal()
    cause: list[signal.Signals] = []
    output_failed: list[OutputFailed] = []
    all_completed = True
    async with anyio.create_task_group() as tg:

        async def watch_signals() -> None:
            with anyio.open_signal_receiver(*_SIGNAL_STATUS) as signals:
                async for signum in signals:
                    if not cause:
                        cause.append(signal.Signals(signum))
                        abort.abort()
                    elif signum == signal.SIGINT:  # a second Ctrl-C: no more graces (local runs)
                        for run in list(events.live):
                            run.force_kill()
                        registry.force_kill_warm()

        events = BatchEvents(started=progress.started, cancelled=progress.cancelled_run)
        tg.start_soon(watch_signals)
        tg.start_soon(progress.follow_stages, events.live)
        try:
            async for outcome in batch(
                lines,
                registry=registry,
                concurrency=args.concurrency,
                warm=args.warm,
                ray=args.ray,
                ray_num_cpus=args.ray_num_cpus,
                retry_lost=args.retry_lost,
                base_dir=args.input.resolve().parent,
                abort=abort,
                events=events,
            ):
                if not output_failed:
                    try:
                        out.write(to_json(outcome))
                    except OutputFailed as exc:
                        # Stop: nothing new starts, the running runs are cancelled and torn
                        # down through the ladder; the records already written stay.
                        output_failed.append(exc)
                        abort.abort()
                if output_failed:  # not recorded, so --resume runs it again
                    if isinstance(outcome, BatchRecord):
                        progress.cancelled_run(outcome.id)
                    continue
                progress.finished(outcome)
                all_completed = all_completed and outcome.completed
        finally:
            progress.close()
            with anyio.CancelScope(shield=True):
                await registry.aclose()  # the warm children no run took (the batch ended them)
            tg.cancel_scope.cancel()
    if output_failed:
        sys.stderr.write(f"subagents: {output_failed[0]}; the batch stopped (--resume runs the rest)\n")
        return EXIT_FAILED
    if cause:
        return _SIGNAL_STATUS[cause[0]]
    return EXIT_OK if all_completed else EXIT_FAILED
