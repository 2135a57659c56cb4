"""``subagents mcp``: its arguments and the command (the server itself is ``_mcp``, which
needs the ``mcp`` extra and is imported only here, when the command runs)."""

from __future__ import annotations

import argparse
import functools
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any

from supervisor.cli._numbers import INTEGER
from supervisor.cli._usage import ConfigError, add_ceiling_arguments


def add_parser(commands: Any) -> None:
    mcp = commands.add_parser("mcp", help="serve MCP on stdio: tools that delegate to supervised subagents")
    mcp.add_argument("--config", metavar="FILE", type=Path, help="TOML file of [[provider]] entries")
    mcp.add_argument(
        "--root",
        metavar="DIR",
        action="append",
        default=[],
        help="a directory runs may work in, repeatable (default: here); the first is the default cwd",
    )
    mcp.add_argument(
        "--max-concurrent", metavar="N", type=INTEGER, default=4, help="runs at once (default 4)"
    )
    mcp.add_argument(
        "--warm",
        metavar="N",
        type=INTEGER,
        default=0,
        help="warm children of the default provider kept ready in the first root (default 0)",
    )
    mcp.add_argument(
        "--keep-settled",
        metavar="N",
        type=INTEGER,
        default=100,
        help="settled runs remembered for wait/list (default 100); older ones are forgotten",
    )
    mcp.add_argument(
        "--max-idle",
        metavar="N",
        type=INTEGER,
        default=16,
        help="idle conversations kept (default 16); beyond, the least recently used is closed",
    )
    add_ceiling_arguments(mcp)
    mcp.add_argument("--verbose", action="store_true", help="child stderr and host log on stderr")
    mcp.add_argument("--otel", action="store_true", help="export an OpenTelemetry trace (OTLP/HTTP)")
    from supervisor.cli._journal import add_argument as add_journal_argument

    add_journal_argument(mcp)


class _StopRequested:
    """A SIGINT, SIGTERM or SIGHUP that comes before the server listens for it (loading the
    ``mcp`` SDK takes about a second) is remembered, not a traceback or a death: the server
    then stops at once, exit 0."""

    def __init__(self) -> None:
        self.signal: int | None = None
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signum

    def __call__(self) -> bool:
        return self.signal is not None


def _check_warm(registry: Any, name: str, count: int, cwd: Path) -> None:
    """``--warm N`` that could never be kept is a configuration error before serving."""
    from supervisor._errors import InvalidRequest
    from supervisor.run._warm import check_count, check_cwd, unwarmable, warm_config

    config = warm_config(registry.get(name))
    if config is None:
        raise ConfigError(f'--warm: subagent provider "{name}" cannot be prestarted')
    if (reason := unwarmable(config)) is not None:
        raise ConfigError(f'--warm: subagent provider "{name}" cannot be prestarted: {reason}')
    try:
        check_cwd(cwd, config)
        check_count(count, config, 0)
    except InvalidRequest as exc:
        raise ConfigError(f"--warm: {exc}") from None


def command(args: argparse.Namespace) -> int:
    """Serve until the client goes away; a ConfigError raised here means nothing ran (exit 2)."""
    stopped = _StopRequested()  # first: the imports below take a while
    import anyio

    from supervisor import telemetry
    from supervisor.cli._config_file import apply_ceiling, load_registry, refuse_uncovered_entries
    from supervisor.process import CwdError, check_directory

    try:
        from supervisor.mcp import _server as _mcp
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("mcp"):
            raise
        extra = "pip install 'subagent-supervisor[mcp]'"
        raise ConfigError(f"`subagents mcp` needs the mcp extra: {extra}") from None
    if args.max_concurrent < 1:
        raise ConfigError("--max-concurrent must be at least 1")
    if args.keep_settled < 1 or args.max_idle < 1:
        raise ConfigError("--keep-settled and --max-idle must be at least 1")
    if args.warm < 0:
        raise ConfigError("--warm must be at least 0")
    roots: list[Path] = []
    for raw in args.root or [os.getcwd()]:
        try:
            roots.append(check_directory(Path(os.path.realpath(raw)), "--root"))
        except CwdError as exc:
            raise ConfigError(str(exc)) from None
    registry, names = load_registry(args.config, verbose=args.verbose, base_dir=Path.cwd())
    refuse_uncovered_entries(args, registry)
    apply_ceiling(args)
    from supervisor.cli._journal import open_for_command

    open_for_command(args, args.config)
    if args.warm:
        _check_warm(registry, names[0], args.warm, roots[0])
    settings = _mcp.McpSettings(
        registry=registry,
        providers=tuple(names),
        roots=tuple(roots),
        max_concurrent=args.max_concurrent,
        warm=args.warm,
        keep_settled=args.keep_settled,
        max_idle=args.max_idle,
    )
    telemetry.configure_from_cli(args.otel)
    try:
        return anyio.run(functools.partial(_mcp.serve, settings, stopped=stopped), backend="asyncio")
    finally:
        telemetry.shutdown()
