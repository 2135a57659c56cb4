"""The CLI's TOML configuration: ``[[provider]]`` entries, checked before anything spawns.

Every error names the file, the entry and the key, so a user can fix it in one go.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from supervisor._config import CommandConfig, ProviderConfig
from supervisor._errors import ConfigurationError
from supervisor._handle import Provider
from supervisor._kinds import example_kind, installed_kinds, kind
from supervisor._registry import Registry
from supervisor.cli._journal import check_keys as check_journal_keys
from supervisor.cli._numbers import is_ascii_integer
from supervisor.cli._usage import ConfigError as ConfigError
from supervisor.cli._usage import add_ceiling_arguments as add_ceiling_arguments
from supervisor.process import ContainmentMode
from supervisor.process._host_limits import set_host_ceiling

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Entry:
    """One provider entry: its kind, registry name and raw keys (validated on :meth:`build`)."""

    kind: str
    name: str
    keys: dict[str, Any]
    where: str
    base_dir: Path

    def build(self, overrides: dict[str, Any] | None = None) -> ProviderConfig:
        """The kind's Config from the entry's keys with ``overrides`` laid on top."""
        data = {**self.keys, **(overrides or {})}
        data.setdefault("name", self.name)
        try:
            config: ProviderConfig = kind(self.kind).config.model_validate(
                data, context={"base_dir": self.base_dir}
            )
        except ValidationError as exc:
            raise ConfigError(_describe(self.where, exc)) from None
        return config

    @property
    def runs_a_command(self) -> bool:
        """Whether the kind's child is a configured ``command`` and ``args`` (``-- COMMAND``)."""
        return issubclass(kind(self.kind).config, CommandConfig)

    def has_key(self, key: str) -> bool:
        """Whether the kind's config accepts ``key``."""
        return key in kind(self.kind).config.model_fields

    @classmethod
    def example(cls, base_dir: Path) -> Entry:
        """The entry that runs the example agent of the first installed kind that ships one
        (``subagents run`` without ``--config``; ``mcp`` and ``batch`` without one)."""
        found = example_kind()
        if found is None:
            raise ConfigError("no installed provider kind ships an example agent: give --config")
        name, loaded = found
        assert loaded.example is not None
        keys = loaded.example().model_dump(exclude_unset=True)
        return cls(kind=name, name=name, keys=keys, where="command line", base_dir=base_dir)

    def provider(self, config: ProviderConfig) -> Provider:
        try:
            return kind(self.kind).provider(config, self.name)
        except ConfigurationError as exc:
            raise ConfigError(f"{self.where}: {exc}") from None


def _describe(where: str, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(entry)"
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif error["type"] == "missing":
            message = "required key is missing"
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {key}: {message}")
    return "\n".join(problems)


def _expand(value: str, where: str, key: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ConfigError(f"{where}: {key}: environment variable {name} is not set")
        return os.environ[name]

    return _VARIABLE.sub(substitute, value)


def load_file(path: Path) -> list[Entry]:
    """Read and check the entries of ``path`` (kinds, names, ``${VAR}`` in ``env``)."""
    import tomllib  # only with --config: a run without one does not pay for the parser

    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(document) - {"provider", "journal", "journal_text"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s): {', '.join(sorted(unknown))}")
    check_journal_keys(path, document)
    raw_entries = document.get("provider", [])
    if not isinstance(raw_entries, list) or not raw_entries:
        raise ConfigError(f"{path}: no [[provider]] entries")
    entries: list[Entry] = []
    for index, raw in enumerate(raw_entries):
        where = f"{path}: provider[{index}]"
        keys = dict(raw)
        kind_name = keys.pop("kind", None)
        kinds = installed_kinds()
        if kind_name not in kinds:
            raise ConfigError(f"{where}: kind: must be one of {', '.join(kinds)}")
        name = keys.get("name", kind_name)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: name: must be a non-empty string")
        where = f'{path}: provider[{index}] "{name}"'
        env = keys.get("env")
        if isinstance(env, dict):
            keys["env"] = {
                k: _expand(v, where, f"env.{k}") if isinstance(v, str) else v for k, v in env.items()
            }
        if any(e.name == name for e in entries):
            raise ConfigError(f"{where}: name: another entry is already named {name!r}")
        entry = Entry(kind=kind_name, name=name, keys=keys, where=where, base_dir=path.resolve().parent)
        entry.build()  # every entry is checked at load, not only the one picked
        entries.append(entry)
    return entries


def apply_ceiling(args: Any) -> None:
    """Set the host ceiling from ``--max-memory`` / ``--max-pids`` before any run starts;
    a bad value, or a ceiling this host cannot enforce, is a ConfigError (exit 2)."""
    if args.max_memory is None and args.max_pids is None:
        return
    memory: int | str | None = args.max_memory
    if isinstance(memory, str) and is_ascii_integer(memory):
        memory = int(memory)  # a bare number is bytes
    pids: int | None = None
    if args.max_pids is not None:
        if not is_ascii_integer(args.max_pids):
            raise ConfigError("--max-pids: must be a positive integer")
        pids = int(args.max_pids)
    try:
        set_host_ceiling(memory_max=memory, pids_max=pids)
    except ConfigurationError as exc:
        flags = " and ".join(
            flag for flag, value in (("--max-memory", memory), ("--max-pids", pids)) if value is not None
        )
        raise ConfigError(f"{flags}: {str(exc).removeprefix('host ceiling: ')}") from None


def refuse_uncovered_entries(args: Any, registry: Registry) -> None:
    """With ``--max-memory`` / ``--max-pids``, an entry whose runs the ceiling cannot bound
    (``containment = "process-tree"``) is a ConfigError (exit 2), before any run starts."""
    flags = " and ".join(
        flag for flag, value in (("--max-memory", args.max_memory), ("--max-pids", args.max_pids)) if value
    )
    if not flags:
        return
    for name in registry.list():
        config = getattr(registry.get(name), "config", None)
        if getattr(config, "containment", None) == ContainmentMode.PROCESS_TREE:
            raise ConfigError(
                f'{flags}: cannot be enforced for entry "{name}": its containment is process-tree '
                "(the kernel keeps no group of its runs)"
            )


def load_registry(config: Path | None, *, verbose: bool, base_dir: Path) -> tuple[Registry, list[str]]:
    """Every entry of ``config`` (else the example agent) registered by name, and the names in
    order.  The children's stderr goes to the host log unless ``verbose``: a command that
    serves many runs (``mcp``, ``batch``) never lets a child write on its terminal."""
    entries = load_file(config) if config is not None else [Entry.example(base_dir)]
    registry = Registry()
    for entry in entries:
        stderr = "inherit" if verbose else entry.keys.get("stderr", "log")
        registry.register(entry.provider(entry.build({"stderr": stderr})))
    return registry, [entry.name for entry in entries]
