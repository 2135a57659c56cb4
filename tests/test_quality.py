"""The code's own checks, run as tests so CI's one line covers them: ruff and mypy --strict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def check(*command: str) -> None:
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_lint() -> None:
    check(str(BIN / "ruff"), "check", ".")


def test_ruff_format() -> None:
    check(str(BIN / "ruff"), "format", "--check", ".")


def test_mypy_strict() -> None:
    check(str(BIN / "mypy"))
