"""The CLI's TOML configuration: ``[[provider]]`` entries, checked before anything spawns.

Every error names the file, the entry and the key, so a user can fix it in one go.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from supervisor._config import ProviderConfig
from supervisor._errors import ConfigurationError
from supervisor._kinds import installed_kinds, kind
from supervisor._registry import Provider

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(Exception):
    """A usage or configuration problem found before anything spawned (exit status 2)."""


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

    def provider(self, config: ProviderConfig) -> Provider:
        try:
            return kind(self.kind).provider(config, self.name)
        except ConfigurationError as exc:
            raise ConfigError(f"{self.where}: {exc}") from None


def example_entry(base_dir: Path) -> Entry:
    """The entry used without a config: ``acp`` with the built-in example agent."""
    from supervisor.providers.acp import EXAMPLE_AGENT

    keys: dict[str, Any] = {"command": sys.executable, "args": ["-I", str(EXAMPLE_AGENT)]}
    return Entry(kind="acp", name="acp", keys=keys, where="command line", base_dir=base_dir)


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
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    unknown = set(document) - {"provider"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s): {', '.join(sorted(unknown))}")
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
