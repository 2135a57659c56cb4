"""The claude-code provider's configuration, construction and lifecycle table (no CLI runs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from machines import SETTLED
from machines.claude_code import STAGES, ClaudeCodeLifecycle
from supervisor import Capabilities, ConfigurationError, installed_kinds
from supervisor.providers.claude_code import MISSING_SDK, Config, PermissionMode, Provider
from supervisor.providers.claude_code._command import cli_argv, cli_environment
from supervisor.providers.claude_code._results import ResultFacts, classify


def test_the_kind_is_registered_with_its_extra() -> None:
    kind = installed_kinds()["claude-code"]
    assert kind.extra == "claude-code"
    assert kind.load().provider is Provider
    assert kind.load().config is Config


def test_defaults() -> None:
    config = Config()
    assert config.permission_mode is PermissionMode.DONT_ASK
    assert config.cli_path is None
    assert config.max_turns is None
    assert config.dispose_eof_grace_ms == 1000
    assert config.dispose_grace_ms == 3000


@pytest.mark.parametrize("mode", ["dontAsk", "acceptEdits", "plan", "bypassPermissions"])
def test_the_four_permission_modes(mode: str) -> None:
    assert Config(permission_mode=mode).permission_mode == mode  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"permission_mode": "auto"}, "permission_mode"),
        ({"permission_mode": "default"}, "permission_mode"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_turns": True}, "max_turns"),
        ({"max_turns": "3"}, "max_turns"),
        ({"cli_path": "/nonexistent/claude"}, "cli_path"),
        ({"cli_path": "claude"}, "cli_path"),
        ({"dispose_eof_grace_ms": 0}, "dispose_eof_grace_ms"),
        ({"max_budget_usd": 1.0}, "max_budget_usd"),
    ],
)
def test_bad_keys_are_configuration_errors_naming_the_key(keys: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        Config(**keys)  # type: ignore[arg-type]
    assert [error["loc"][0] for error in info.value.errors()] == [field]


def test_a_relative_cli_path_is_resolved_against_the_base_directory(tmp_path: Path) -> None:
    cli = tmp_path / "bin" / "claude"
    cli.parent.mkdir()
    cli.write_text("#!/bin/sh\n", encoding="utf-8")
    cli.chmod(0o755)
    config = Config.model_validate({"cli_path": "bin/claude"}, context={"base_dir": tmp_path})
    assert config.cli_path == cli
    cli.chmod(0o644)
    with pytest.raises(ValidationError, match="not an executable file"):
        Config.model_validate({"cli_path": "bin/claude"}, context={"base_dir": tmp_path})


def test_the_provider_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = Provider(Config())
    assert provider.name == "claude-code"
    assert provider.capabilities == Capabilities(conversation=True, resume=True)
    assert provider.inherits_parent_context is False
    assert provider.cli.name == "claude"
    assert provider.cli.is_file()
    assert provider.sdk_version == "0.2.189"
    assert Provider(Config(name="reviewer")).name == "reviewer"
    assert Provider(Config(name="reviewer"), name="explicit").name == "explicit"


def test_without_the_sdk_construction_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)
    with pytest.raises(ConfigurationError) as info:
        Provider(Config())
    assert str(info.value) == MISSING_SDK
    assert "pip install 'subagent-supervisor[claude-code]'" in str(info.value)
    assert info.value.code == "INVALID_CONFIG"


def test_argv_per_mode(tmp_path: Path) -> None:
    cli = tmp_path / "claude"
    base = ["--output-format", "stream-json", "--verbose", "--system-prompt", ""]
    tail = ["--no-session-persistence", "--input-format", "stream-json"]
    assert cli_argv(cli, Config(permission_mode=PermissionMode.BYPASS_PERMISSIONS)) == [
        str(cli), *base,
        "--disallowedTools", "AskUserQuestion",
        "--permission-mode", "bypassPermissions",
        *tail,
    ]  # fmt: skip
    assert cli_argv(cli, Config(permission_mode=PermissionMode.PLAN, max_turns=2)) == [
        str(cli), *base,
        "--max-turns", "2",
        "--disallowedTools", "AskUserQuestion,ExitPlanMode",
        "--permission-prompt-tool", "stdio",
        "--permission-mode", "plan",
        *tail,
    ]  # fmt: skip


def test_env_scrubs_the_parent_and_explicit_config_wins(tmp_path: Path) -> None:
    ambient = {
        "PATH": "/bin",
        "ANTHROPIC_API_KEY": "ambient-secret",
        "GH_TOKEN": "ambient-secret",
        "CLAUDECODE": "1",
        "CLAUDE_CODE_ENTRYPOINT": "cli",
        "DSH_THING": "x",
        "REMOVE_ME": "x",
    }
    config = Config(
        env={"ANTHROPIC_API_KEY": "explicit", "PATH": None, "CLAUDE_CODE_SDK_READS_SESSION_STATE": "0"},
        env_remove=["REMOVE_ME"],
    )
    env = cli_environment(config, run_tag="run-1", cwd=tmp_path, sdk_version="9.9", ambient=ambient)
    assert env == {
        "ANTHROPIC_API_KEY": "explicit",
        "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
        "CLAUDE_AGENT_SDK_VERSION": "9.9",
        "CLAUDE_CODE_SDK_READS_SESSION_STATE": "0",
        "PWD": str(tmp_path),
        "SUBAGENT_SUPERVISOR_RUN": "run-1",
    }
    explicit = Config(env={"CLAUDE_CODE_ENTRYPOINT": "mine", "CLAUDECODE": "1"})
    env = cli_environment(explicit, run_tag="run-2", cwd=tmp_path, sdk_version="9.9", ambient={})
    assert env["CLAUDE_CODE_ENTRYPOINT"] == "mine"
    assert env["CLAUDECODE"] == "1"


@pytest.mark.parametrize(
    ("fields", "category"),
    [
        ({"subtype": "success", "is_error": False, "result": "answer"}, None),
        ({"subtype": "success", "is_error": False, "result": " \n"}, "invalid-result"),
        ({"subtype": "success", "is_error": False, "result": None}, "invalid-result"),
        ({"subtype": "success", "is_error": True, "result": "API Error: 529 Overloaded"}, "invalid-result"),
        ({"subtype": "error_max_turns", "is_error": True}, "limit"),
        ({"subtype": "error_max_budget_usd", "is_error": True}, "limit"),
        ({"subtype": "error_max_structured_output_retries", "is_error": True}, "limit"),
        ({"subtype": "error_during_execution", "is_error": True}, "product-error"),
        ({"subtype": "error_something_new", "is_error": True}, "unknown"),
    ],
)
def test_result_classification(fields: dict[str, object], category: str | None) -> None:
    assert classify(ResultFacts.model_validate(fields)).category == category


def test_a_malformed_result_is_unknown() -> None:
    assert classify(None).category == "unknown"


def test_the_lifecycle_table() -> None:
    assert ClaudeCodeLifecycle.STAGES == STAGES == ("query-start", "query-run", "process", "teardown")
    settling = {event for event, source, target in ClaudeCodeLifecycle.TABLE if target == SETTLED != source}
    assert settling == {
        "result_succeeded",
        "result_failed",
        "result_invalid",
        "result_missing",
        "cancelled",
        "failed",
    }
    machine = ClaudeCodeLifecycle()
    assert machine.stage == "query-start"
    machine.send("initialized")
    machine.send("cli_exited")
    assert machine.stage == "process"
    machine.send("failed")
    assert machine.state_name == SETTLED
    assert machine.stage == "process"
