"""Fixtures for the claude-code provider: an isolated CLI home, a mock Messages API, providers.

The real CLI (bundled in the claude-agent-sdk wheel) talks only to the mock on
127.0.0.1: ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` keeps it off the network and
``CLAUDE_CODE_MAX_RETRIES=0`` keeps an HTTP error from being retried for minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.mockmodel import MockModelServer
from tests.support import require_module
from tests.support.peers import seed_claude_config

require_module("claude_agent_sdk")

from supervisor.providers.claude_code import Config, Provider  # noqa: E402  (after the check)

# Ambient names that must never reach a CLI under test (a developer's real setup).
_AMBIENT_PREFIXES = ("ANTHROPIC_", "CLAUDE")


@dataclass
class ClaudeHome:
    """An isolated HOME / CLAUDE_CONFIG_DIR and a workspace for one test."""

    root: Path
    home: Path
    config_dir: Path
    work: Path

    def env(self, server: MockModelServer, **extra: str | None) -> dict[str, str | None]:
        """The explicit child env: the mock as the model, no retries, no nonessential traffic."""
        env: dict[str, str | None] = {
            name: None for name in os.environ if name.upper().startswith(_AMBIENT_PREFIXES)
        }
        env.update(
            {
                "HOME": str(self.home),
                "CLAUDE_CONFIG_DIR": str(self.config_dir),
                "ANTHROPIC_BASE_URL": server.anthropic_base_url,
                "ANTHROPIC_API_KEY": "dummy",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "CLAUDE_CODE_MAX_RETRIES": "0",
                "DISABLE_AUTOUPDATER": "1",
                "DISABLE_TELEMETRY": "1",
                "DISABLE_ERROR_REPORTING": "1",
                "DISABLE_BUG_COMMAND": "1",
                "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
                "NO_COLOR": "1",
                "CLAUDE_CODE_TMPDIR": str(self.root / "tmp"),
            }
        )
        env.update(extra)
        return env

    def allow(self, *rules: str) -> None:
        """User settings that pre-approve ``rules`` (so ``dontAsk`` runs those tools)."""
        settings = {"permissions": {"allow": list(rules)}}
        (self.config_dir / "settings.json").write_text(json.dumps(settings), encoding="utf-8")


@pytest.fixture
def claude_home(tmp_path: Path) -> Iterator[ClaudeHome]:
    root = tmp_path / "claude"
    home = root / "home"
    config_dir = home / ".claude"
    work = root / "work"
    work.mkdir(parents=True)
    seed_claude_config(config_dir)
    yield ClaudeHome(root=root, home=home, config_dir=config_dir, work=work.resolve())
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def mock_model() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


def claude_provider(
    home: ClaudeHome,
    server: MockModelServer,
    *,
    name: str | None = None,
    env: dict[str, str | None] | None = None,
    **keys: Any,
) -> Provider:
    """A provider for the real bundled CLI against ``server``."""
    settings: dict[str, Any] = {"dispose_grace_ms": 2000, **keys}
    config = Config(env=home.env(server, **(env or {})), **settings)
    return Provider(config, name=name)


# -- a scripted fake CLI (tests/claude_code/fake_cli.py) for protocol edge cases -----------

FAKE_CLI = Path(__file__).resolve().parent / "fake_cli.py"


@dataclass
class FakeCli:
    """A ``cli_path`` that runs the scripted fake; ``provider(script)`` configures one run."""

    root: Path
    executable: Path
    script_file: Path
    log_file: Path
    work: Path

    def provider(self, script: dict[str, Any], *, name: str | None = None, **keys: Any) -> Provider:
        self.script_file.write_text(json.dumps(script), encoding="utf-8")
        env: dict[str, str | None] = {
            "FAKE_CLAUDE_SCRIPT": str(self.script_file),
            "FAKE_CLAUDE_LOG": str(self.log_file),
        }
        env.update(keys.pop("env", {}))
        settings: dict[str, Any] = {"dispose_grace_ms": 2000, **keys}
        return Provider(Config(cli_path=self.executable, env=env, **settings), name=name)

    def seen(self, kind: str) -> list[Any]:
        """What the fake logged under ``kind``, in order."""
        if not self.log_file.exists():
            return []
        entries = [json.loads(line) for line in self.log_file.read_text(encoding="utf-8").splitlines()]
        return [entry["value"] for entry in entries if entry["kind"] == kind]


@pytest.fixture
def fake_cli(tmp_path: Path) -> FakeCli:
    root = tmp_path / "fake"
    work = root / "work"
    work.mkdir(parents=True)
    executable = root / "claude"
    executable.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I "{FAKE_CLI}" "$@"\n', encoding="utf-8")
    executable.chmod(0o755)
    return FakeCli(
        root=root,
        executable=executable,
        script_file=root / "script.json",
        log_file=root / "log.jsonl",
        work=work.resolve(),
    )


def result_message(
    subtype: str = "success", *, is_error: Any = False, result: Any = "the answer", **extra: Any
) -> dict[str, Any]:
    """A stream-json ``result`` frame."""
    return {
        "type": "result",
        "subtype": subtype,
        "duration_ms": 5,
        "duration_api_ms": 3,
        "is_error": is_error,
        "num_turns": 1,
        "session_id": "child-session",
        "result": result,
        **extra,
    }


def assistant_message(text: str, **extra: Any) -> dict[str, Any]:
    """A stream-json ``assistant`` frame with one text block."""
    return {
        "type": "assistant",
        "message": {"role": "assistant", "model": "mock", "content": [{"type": "text", "text": text}]},
        "parent_tool_use_id": None,
        "session_id": "child-session",
        **extra,
    }
