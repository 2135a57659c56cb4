"""The codex kind's configuration, binary resolution, argv and lifecycle table."""

from __future__ import annotations

import os
import stat
import sys
import types
from pathlib import Path

import pytest
from pydantic import ValidationError

from machines import SETTLED
from machines.codex import STAGES, CodexLifecycle
from supervisor import ConfigurationError, SubagentRequest, installed_kinds
from supervisor._seam import Capabilities
from supervisor.providers.codex import (
    WHEEL,
    Config,
    PermissionMode,
    Provider,
    app_server_argv,
    resolve_binary,
)

PINNED_WHEEL = "0.163.0"
"""The newest openai-codex-cli-bin on the index (0.171.0, the protocol's version, is not published)."""


def executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "codex_cli_bin", None)  # import raises ImportError


@pytest.fixture
def wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    binary = executable(tmp_path / "wheel-codex")
    module = types.ModuleType("codex_cli_bin")
    module.bundled_codex_path = lambda: binary  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "codex_cli_bin", module)
    return binary


def test_defaults() -> None:
    config = Config()
    assert config.permission_mode is PermissionMode.NEVER
    assert config.codex_path is None
    assert config.config == []
    assert config.dispose_eof_grace_ms == 1000
    assert config.dispose_grace_ms == 3000


@pytest.mark.parametrize(
    "keys",
    [
        {"permission_mode": "ask"},
        {"permission_mode": "bypassPermissions"},
        {"config": ["no-equals-sign"]},
        {"config": ["=value"]},
        {"config": "model=x"},
        {"dispose_eof_grace_ms": 0},
        {"dispose_grace_ms": -1},
        {"codex_path": ""},
        {"cli_path": "/bin/true"},
        {"command": "codex"},
    ],
)
def test_bad_keys_are_configuration_errors(keys: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Config.model_validate(keys)


def test_the_three_modes_parse() -> None:
    modes = ["never", "approve-for-me", "dangerously-bypass-approvals-and-sandbox"]
    assert [Config.model_validate({"permission_mode": m}).permission_mode.value for m in modes] == modes


def test_codex_path_is_resolved_against_the_base_and_must_be_executable(tmp_path: Path) -> None:
    executable(tmp_path / "codex")
    config = Config.model_validate({"codex_path": "codex"}, context={"base_dir": tmp_path})
    assert config.codex_path == tmp_path / "codex"
    (tmp_path / "plain").write_text("", encoding="utf-8")
    with pytest.raises(ValidationError, match="not an executable file"):
        Config.model_validate({"codex_path": "plain"}, context={"base_dir": tmp_path})
    with pytest.raises(ValidationError, match="not an executable file"):
        Config.model_validate({"codex_path": str(tmp_path / "missing")})
    with pytest.raises(ValidationError, match="base directory"):
        Config.model_validate({"codex_path": "codex"})


def test_codex_path_wins_over_the_wheel(tmp_path: Path, wheel: Path) -> None:
    mine = executable(tmp_path / "mine")
    assert resolve_binary(Config(codex_path=mine)) == mine
    assert resolve_binary(Config()) == wheel


@pytest.mark.usefixtures("no_wheel")
def test_without_either_it_is_a_configuration_error_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executable(tmp_path / "codex")
    monkeypatch.setenv("PATH", str(tmp_path))  # a codex on PATH is never used
    with pytest.raises(ConfigurationError) as info:
        Provider(Config())
    assert "codex_path" in str(info.value)
    assert WHEEL in str(info.value)
    assert info.value.code == "INVALID_CONFIG"


def test_a_wheel_without_its_binary_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("codex_cli_bin")

    def missing() -> Path:
        raise FileNotFoundError("openai-codex-cli-bin is installed but missing its packaged codex binary")

    module.bundled_codex_path = missing  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "codex_cli_bin", module)
    with pytest.raises(ConfigurationError, match="codex_path"):
        resolve_binary(Config())


@pytest.mark.anyio
async def test_the_provider_shape(wheel: Path) -> None:
    provider = Provider(Config())
    assert provider.name == "codex"
    assert provider.capabilities == Capabilities(conversation=True, resume=True)
    assert provider.inherits_parent_context is False
    assert provider.binary == wheel
    assert Provider(Config(name="reviewer")).name == "reviewer"
    assert Provider(Config(name="reviewer"), name="explicit").name == "explicit"
    run = provider.create_run(SubagentRequest(task="t"))
    assert run.stage == "initialize"
    assert run.vocabulary.label == "Codex"


def test_the_kind_registry_loads_this_module() -> None:
    kind = installed_kinds()["codex"]
    assert kind.load().config is Config
    assert kind.load().provider is Provider
    assert kind.extra == "codex"


def test_argv_spawns_the_native_binary_with_the_fixed_features_last() -> None:
    assert app_server_argv(Path("/opt/codex"), ['model="m"', "features.shell_snapshot=true"]) == [
        "/opt/codex",
        "app-server",
        "-c",
        'model="m"',
        "-c",
        "features.shell_snapshot=true",
        "-c",
        "features.unbounded_connection_retries=false",
        "-c",
        "features.shell_snapshot=false",
    ]


def test_the_lifecycle_table() -> None:
    assert (
        CodexLifecycle.STAGES
        == STAGES
        == (
            "initialize",
            "thread-start",
            "turn-start",
            "turn",
            "process",
            "teardown",
        )
    )
    rows = set(CodexLifecycle.TABLE)
    assert ("turn_completed", "turn", SETTLED) in rows
    assert {
        ("app_server_exited", s, "process") for s in ("initialize", "thread-start", "turn-start", "turn")
    } <= rows
    machine = CodexLifecycle()
    for event in ("initialized", "thread_started", "turn_started", "app_server_exited", "failed"):
        machine.send(event)
    assert machine.stages_entered == ("initialize", "thread-start", "turn-start", "turn", "process")
    assert machine.stage == "process"
    assert machine.state_name == SETTLED


def test_the_default_binary_is_the_installed_wheels() -> None:
    """No fake: the ``codex`` extra's wheel is installed by the README's test command."""
    import importlib.metadata

    import codex_cli_bin

    binary = resolve_binary(Config())
    assert binary.is_file()
    assert os.access(binary, os.X_OK)
    assert Path(codex_cli_bin.__file__).resolve().parent in binary.resolve().parents
    assert importlib.metadata.version("openai-codex-cli-bin") == PINNED_WHEEL


def test_the_codex_extra_pins_the_wheel() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["codex"] == [f"openai-codex-cli-bin=={PINNED_WHEEL}"]
