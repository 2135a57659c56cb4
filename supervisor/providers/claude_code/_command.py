"""The CLI's argv and environment, built here rather than by the SDK's subprocess transport.

A custom SDK transport gets none of the SDK's command-line options applied, so this
module owns them.  It mirrors what claude-agent-sdk 0.2.189's ``SubprocessCLITransport``
would run for the unattended options this provider uses (``_build_command`` and the
environment of ``connect``), pinned by tests.  No SDK import here: it is pure.
"""

from __future__ import annotations

from pathlib import Path

from supervisor.provider import RUN_TAG_VARIABLE, child_environment
from supervisor.providers.claude_code._config import Config, PermissionMode

# Tools an unattended child must never be offered: they block on a human.
ALWAYS_DISALLOWED = ("AskUserQuestion",)
PLAN_MODE_DISALLOWED = ("ExitPlanMode",)

SDK_ENTRYPOINT = "sdk-py"
# Asks the CLI for the ``session_state_changed`` frames the SDK's Query reads.
_READS_SESSION_STATE = "CLAUDE_CODE_SDK_READS_SESSION_STATE"
# Ambient names the SDK drops so a nested CLI does not think it runs inside a parent CLI.
_AMBIENT_DROPPED = ("CLAUDECODE", "CLAUDE_AGENT_SDK_DERIVED_CLIENT_APP")


def bundled_cli(sdk_package_dir: Path) -> Path | None:
    """The CLI bundled in the claude-agent-sdk wheel, if this platform's wheel has one."""
    path = sdk_package_dir / "_bundled" / "claude"
    return path if path.is_file() else None


def disallowed_tools(mode: PermissionMode) -> tuple[str, ...]:
    if mode is PermissionMode.PLAN:
        return (*ALWAYS_DISALLOWED, *PLAN_MODE_DISALLOWED)
    return ALWAYS_DISALLOWED


def asks_permission_over_stdio(mode: PermissionMode) -> bool:
    """Whether the CLI routes permission prompts to the SDK's ``can_use_tool`` callback."""
    return mode is not PermissionMode.BYPASS_PERMISSIONS


def cli_argv(cli: Path, config: Config, *, keep: bool = False, resume: str | None = None) -> list[str]:
    """The CLI's argv: stream-json both ways, the unattended policy, and no session
    persistence unless the session is to be kept (``keep``) or is being continued
    (``resume``: ``--resume <session id>``, from the same cwd and config directory)."""
    argv = [str(cli), "--output-format", "stream-json", "--verbose", "--system-prompt", ""]
    if config.max_turns is not None:
        argv += ["--max-turns", str(config.max_turns)]
    argv += ["--disallowedTools", ",".join(disallowed_tools(config.permission_mode))]
    if asks_permission_over_stdio(config.permission_mode):
        argv += ["--permission-prompt-tool", "stdio"]
    argv += ["--permission-mode", str(config.permission_mode)]
    if resume is not None:
        argv += ["--resume", resume]
    elif not keep:
        argv += ["--no-session-persistence"]
    argv += ["--input-format", "stream-json"]
    return argv


def cli_environment(
    config: Config,
    *,
    run_tag: str,
    cwd: Path,
    sdk_version: str,
    ambient: dict[str, str] | None = None,
) -> dict[str, str]:
    """The scrubbed parent env plus the config's explicit ``env``, plus what the SDK sets.

    Like the SDK: ``CLAUDE_CODE_ENTRYPOINT`` defaults to ``sdk-py`` (explicit config
    wins), ``CLAUDE_AGENT_SDK_VERSION`` is always the SDK's, session-state frames are
    requested unless configured, and ``PWD`` is the run's working directory.
    """
    env = child_environment(config.env, remove=config.env_remove, run_tag=run_tag, ambient=ambient)
    for name in _AMBIENT_DROPPED:
        if name not in config.env:
            env.pop(name, None)
    if "CLAUDE_CODE_ENTRYPOINT" not in config.env:
        env["CLAUDE_CODE_ENTRYPOINT"] = SDK_ENTRYPOINT
    env["CLAUDE_AGENT_SDK_VERSION"] = sdk_version
    if not any(name.upper() == _READS_SESSION_STATE for name in env):
        env[_READS_SESSION_STATE] = "1"
    env["PWD"] = str(cwd)
    env[RUN_TAG_VARIABLE] = run_tag
    return env
