"""The provider kinds, loaded lazily by name.

Each kind is a module exposing ``Config`` (a :class:`~supervisor._config.ProviderConfig`
subclass: the TOML keys of that kind) and ``Provider`` (``Provider(config, name=None)``,
satisfying :class:`~supervisor.Provider`).  Modules are imported only when a kind is
used, so the optional SDKs (and ``acp``'s ~1 s import) are never paid for by others.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from supervisor._diagnostic import ProviderLabel


@dataclass(frozen=True)
class ProviderKind:
    kind: str
    label: ProviderLabel
    module: str
    extra: str | None = None

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


KINDS: dict[str, ProviderKind] = {
    k.kind: k
    for k in (
        ProviderKind("acp", ProviderLabel.ACP, "supervisor.providers.acp"),
        ProviderKind("dsh-sdk", ProviderLabel.DSH_SDK, "supervisor.providers.dsh_sdk"),
        ProviderKind(
            "claude-code", ProviderLabel.CLAUDE_CODE, "supervisor.providers.claude_code", "claude-code"
        ),
        ProviderKind("codex", ProviderLabel.CODEX, "supervisor.providers.codex", "codex"),
    )
}
