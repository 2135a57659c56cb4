"""Locate the real agent peers installed by `tests/package.json` and build isolated launches.

Each `*_launch()` returns a `PeerLaunch`: the argv to spawn (no shell, no node wrapper where a
native binary exists), the explicit child environment pointing the peer at a mock model server,
an absolute workspace directory, and the temporary directories it created. Nothing here keeps
global state; every launch owns fresh directories that `cleanup()` removes.

Install the peers with `npm ci` (or `npm install`) inside `tests/`.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Protocol

TESTS_DIR = Path(__file__).resolve().parent.parent
NODE_MODULES = TESTS_DIR / "node_modules"

CODEX_APP_SERVER_ARGS: tuple[str, ...] = (
    "app-server",
    "-c",
    "features.unbounded_connection_retries=false",
    "-c",
    "features.shell_snapshot=false",
)
"""Arguments for `codex app-server` (no endless reconnects, no login-shell snapshot)."""

CODEX_OFFLINE_FEATURES: Mapping[str, bool] = {"plugins": False}
"""Written to the app-server's config.toml: with `plugins` on, codex 0.171.0 tries to sync the
curated plugin repository from github.com at startup (DNS lookups, git, HTTPS) before failing."""

MOCK_KEY_VAR = "MOCK_API_KEY"
"""The codex provider's `env_key`: codex sends `Authorization: Bearer $MOCK_API_KEY`."""

_SCRUB = re.compile(r"KEY|PASSWORD|SECRET|TOKEN", re.IGNORECASE)
_AMBIENT_PREFIXES = ("ANTHROPIC_", "OPENAI_", "CLAUDE", "CODEX_", "DSH_")


class PeerNotInstalled(RuntimeError):
    """A peer is missing from tests/node_modules (run `npm ci` in tests/)."""


class HasBaseUrl(Protocol):
    @property
    def base_url(self) -> str: ...


ModelServer = str | HasBaseUrl
"""A `MockModelServer` or its root URL, `http://127.0.0.1:PORT` (no `/v1`)."""


@dataclass
class PeerLaunch:
    """How to start one peer against a mock model server."""

    name: str
    argv: list[str]
    env: dict[str, str]
    """Explicit child environment (what a provider config's `env` would hold)."""
    cwd: Path
    """Absolute, existing workspace: the process cwd and the protocol's session cwd."""
    home: Path
    """Isolated HOME."""
    config_dir: Path
    """CODEX_HOME or CLAUDE_CONFIG_DIR."""
    temp_dirs: list[Path] = field(default_factory=list)
    """Directories this launch created (the first holds all the others)."""

    def full_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default: os.environ) scrubbed like the supervisor does, plus `env` on top.

        Also drops ambient ANTHROPIC_*/OPENAI_*/CLAUDE*/CODEX_*/DSH_* names so a developer's
        real settings never reach a peer under test.
        """
        return {**scrubbed_env(os.environ if base is None else base), **self.env}

    def cleanup(self) -> None:
        for path in reversed(self.temp_dirs):
            shutil.rmtree(path, ignore_errors=True)

    def __enter__(self) -> PeerLaunch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()


def scrubbed_env(base: Mapping[str, str]) -> dict[str, str]:
    """Drop names matching KEY|PASSWORD|SECRET|TOKEN and ambient model/agent settings."""
    return {
        k: v for k, v in base.items() if not _SCRUB.search(k) and not k.upper().startswith(_AMBIENT_PREFIXES)
    }


def base_url_of(server: ModelServer) -> str:
    url = server if isinstance(server, str) else server.base_url
    return url.rstrip("/")


# ---- locating the installed peers -------------------------------------------------------------


def _arch() -> tuple[str, str]:
    """(npm platform suffix, Rust target triple prefix) for this machine."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "linux-x64", "x86_64"
    if machine in ("aarch64", "arm64"):
        return "linux-arm64", "aarch64"
    raise PeerNotInstalled(f"no peer binaries for machine {machine!r}")


def _existing(path: Path, what: str) -> Path:
    if not path.is_file():
        raise PeerNotInstalled(f"{what} not found at {path} (run `npm ci` in {TESTS_DIR})")
    return path


def node_executable() -> str:
    node = shutil.which("node")
    if node is None:
        raise PeerNotInstalled("node is not on PATH")
    return node


def codex_acp_binary(node_modules: Path = NODE_MODULES) -> Path:
    """The native codex-acp binary (not the `.bin/codex-acp` node wrapper, which ignores SIGTERM)."""
    suffix, _ = _arch()
    return _existing(
        node_modules / "@zed-industries" / f"codex-acp-{suffix}" / "bin" / "codex-acp",
        "codex-acp native binary",
    )


def claude_agent_acp_script(node_modules: Path = NODE_MODULES) -> Path:
    return _existing(
        node_modules / "@zed-industries" / "claude-agent-acp" / "dist" / "index.js",
        "claude-agent-acp entry point",
    )


def codex_binary(node_modules: Path = NODE_MODULES) -> Path:
    """The native `codex` binary of @openai/codex (not the node wrapper `bin/codex.js`)."""
    suffix, triple = _arch()
    vendor = node_modules / "@openai" / f"codex-{suffix}" / "vendor"
    for candidate in sorted(vendor.glob(f"{triple}-unknown-linux-*/bin/codex")):
        if candidate.is_file():
            return candidate
    raise PeerNotInstalled(f"native codex binary not found under {vendor} (run `npm ci` in {TESTS_DIR})")


def missing_peers(node_modules: Path = NODE_MODULES) -> list[str]:
    """Human-readable reasons why peers are unavailable (empty when all are installed)."""
    reasons: list[str] = []
    for finder in (codex_acp_binary, claude_agent_acp_script, codex_binary):
        try:
            finder(node_modules)
        except PeerNotInstalled as exc:
            reasons.append(str(exc))
    try:
        node_executable()
    except PeerNotInstalled as exc:
        reasons.append(str(exc))
    return reasons


# ---- isolated directories and config ----------------------------------------------------------


def _make_dirs(name: str, root: Path | None, cwd: Path | None) -> tuple[Path, Path, Path | None]:
    """(top, home, work-or-None). `top` is fresh; `home` inside it; `work` unless `cwd` given."""
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    top = Path(tempfile.mkdtemp(prefix=f"peer-{name}-", dir=root)).resolve()
    home = top / "home"
    home.mkdir()
    work: Path | None = None
    if cwd is None:
        work = top / "work"
        work.mkdir()
    return top, home, work


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_value(value: str | bool | int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return _toml_str(value)


def write_codex_config(
    codex_home: Path,
    server: ModelServer,
    *,
    model: str,
    approval_policy: str,
    sandbox_mode: str,
    features: Mapping[str, bool] | None = None,
    trusted_projects: Iterable[Path] = (),
    extra: str = "",
) -> Path:
    """Write `$CODEX_HOME/config.toml` with a `mock` Responses-API provider and no retries."""
    lines = [
        f"model = {_toml_str(model)}",
        'model_provider = "mock"',
        f"approval_policy = {_toml_str(approval_policy)}",
        f"sandbox_mode = {_toml_str(sandbox_mode)}",
        "check_for_update_on_startup = false",
        "",
        "[model_providers.mock]",
        'name = "Mock Responses API"',
        f"base_url = {_toml_str(base_url_of(server) + '/v1')}",
        'wire_api = "responses"',
        f"env_key = {_toml_str(MOCK_KEY_VAR)}",
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "stream_idle_timeout_ms = 30000",
        "",
    ]
    if features:
        lines.append("[features]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in features.items()]
        lines.append("")
    for project in trusted_projects:
        lines += [f"[projects.{_toml_str(str(project))}]", 'trust_level = "trusted"', ""]
    if extra:
        lines.append(extra.rstrip("\n"))
        lines.append("")
    codex_home.mkdir(parents=True, exist_ok=True)
    path = codex_home / "config.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def seed_claude_config(config_dir: Path) -> None:
    """Create CLAUDE_CONFIG_DIR with what keeps the Claude Code CLI off the network.

    The CLI (2.1.83 under claude-agent-acp) fetches a plugin security blocklist from
    raw.githubusercontent.com at every SDK-mode start, even with
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1, unless `plugins/blocklist.json` is less than an
    hour old; a fresh empty one is written here.
    """
    plugins = config_dir / "plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    fetched_at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    (plugins / "blocklist.json").write_text(
        json.dumps({"fetchedAt": fetched_at, "plugins": []}), encoding="utf-8"
    )


def _codex_env(home: Path, codex_home: Path, api_key: str) -> dict[str, str]:
    return {
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        MOCK_KEY_VAR: api_key,
        "RUST_LOG": "warn",
        "NO_COLOR": "1",
    }


# ---- launches ---------------------------------------------------------------------------------


def codex_acp_launch(
    server: ModelServer,
    *,
    root: Path | None = None,
    cwd: Path | None = None,
    model: str = "gpt-5.4-mini",
    approval_policy: str = "on-request",
    sandbox_mode: str = "workspace-write",
    extra_config: str = "",
    api_key: str = "dummy",
    trust_workspace: bool = False,
    node_modules: Path = NODE_MODULES,
) -> PeerLaunch:
    """codex-acp (native) against the mock's Responses API.

    `model` must be a slug codex knows (an unknown one makes codex add a "Model metadata ... not
    found" warning to the reply text). With the defaults, a `Shell(..., escalated=True)` turn
    makes codex-acp send `session/request_permission`.
    """
    return _codex_launch(
        "codex-acp",
        [str(codex_acp_binary(node_modules))],
        server,
        root=root,
        cwd=cwd,
        model=model,
        approval_policy=approval_policy,
        sandbox_mode=sandbox_mode,
        features={"shell_snapshot": False},
        extra_config=extra_config,
        api_key=api_key,
        trust_workspace=trust_workspace,
    )


def claude_agent_acp_launch(
    server: ModelServer,
    *,
    root: Path | None = None,
    cwd: Path | None = None,
    max_retries: int = 0,
    api_key: str = "dummy",
    extra_env: Mapping[str, str] | None = None,
    node_modules: Path = NODE_MODULES,
) -> PeerLaunch:
    """claude-agent-acp (`node dist/index.js`) against the mock's Messages API.

    It spawns the Claude Code CLI (`node .../claude-agent-sdk/cli.js`) as a grandchild, one per
    session. `CLAUDE_CODE_MAX_RETRIES=0` keeps an HTTP error from being retried for ~3 minutes.
    Under root, `IS_SANDBOX=1` is added (see below); without it no session can start.
    """
    script = claude_agent_acp_script(node_modules)
    node = node_executable()
    top, home, work = _make_dirs("claude-agent-acp", root, cwd)
    config_dir = home / ".claude"
    seed_claude_config(config_dir)
    workspace = (cwd or work or top).resolve()
    env = {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "ANTHROPIC_BASE_URL": base_url_of(server),
        "ANTHROPIC_API_KEY": api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
        "CLAUDE_CODE_MAX_RETRIES": str(max_retries),
        "NO_COLOR": "1",
    }
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # claude-agent-acp always passes --allow-dangerously-skip-permissions to the CLI, which
        # exits 1 under root ("cannot be used with root/sudo privileges") unless IS_SANDBOX=1;
        # session/new then fails with "Query closed before response received".
        env["IS_SANDBOX"] = "1"
    env.update(extra_env or {})
    return PeerLaunch(
        name="claude-agent-acp",
        argv=[node, str(script)],
        env=env,
        cwd=workspace,
        home=home,
        config_dir=config_dir,
        temp_dirs=[top],
    )


def codex_app_server_launch(
    server: ModelServer,
    *,
    root: Path | None = None,
    cwd: Path | None = None,
    model: str = "mock-model",
    approval_policy: str = "never",
    sandbox_mode: str = "read-only",
    extra_config: str = "",
    api_key: str = "dummy",
    trust_workspace: bool = False,
    node_modules: Path = NODE_MODULES,
) -> PeerLaunch:
    """`codex app-server` (native binary) against the mock's Responses API.

    argv is `[codex, *CODEX_APP_SERVER_ARGS]`. An unknown `model` slug is harmless here (the
    app-server only logs "fallback model metadata"); pass `cwd`/`model`/policies again in
    `thread/start` as the protocol expects.
    """
    return _codex_launch(
        "codex-app-server",
        [str(codex_binary(node_modules)), *CODEX_APP_SERVER_ARGS],
        server,
        root=root,
        cwd=cwd,
        model=model,
        approval_policy=approval_policy,
        sandbox_mode=sandbox_mode,
        features=CODEX_OFFLINE_FEATURES,
        extra_config=extra_config,
        api_key=api_key,
        trust_workspace=trust_workspace,
    )


def _codex_launch(
    name: str,
    argv: list[str],
    server: ModelServer,
    *,
    root: Path | None,
    cwd: Path | None,
    model: str,
    approval_policy: str,
    sandbox_mode: str,
    features: Mapping[str, bool],
    extra_config: str,
    api_key: str,
    trust_workspace: bool,
) -> PeerLaunch:
    """A codex binary with an isolated HOME and CODEX_HOME whose config points at the mock."""
    top, home, work = _make_dirs(name, root, cwd)
    codex_home = home / ".codex"
    workspace = (cwd or work or top).resolve()
    write_codex_config(
        codex_home,
        server,
        model=model,
        approval_policy=approval_policy,
        sandbox_mode=sandbox_mode,
        features=features,
        trusted_projects=[workspace] if trust_workspace else [],
        extra=extra_config,
    )
    return PeerLaunch(
        name=name,
        argv=argv,
        env=_codex_env(home, codex_home, api_key),
        cwd=workspace,
        home=home,
        config_dir=codex_home,
        temp_dirs=[top],
    )
