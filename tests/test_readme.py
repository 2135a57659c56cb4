"""The README's promises that can drift: the test line CI runs and the diagram it shows."""

from __future__ import annotations

import re
from pathlib import Path

from supervisor import _diagrams

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_ci_runs_exactly_the_readme_test_line() -> None:
    ci_line = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"```sh\n{ci_line}\n```" in README


def test_readme_shows_every_current_lifecycle_diagram() -> None:
    for name, text in _diagrams.render().items():
        if name == "ladder.md":
            continue
        current = re.search(r"```mermaid\n.*?```", text, re.S)
        assert current is not None
        assert current.group(0) in README, f"README lacks the current {name} diagram"


def test_readme_shows_the_complete_third_party_provider() -> None:
    module = (ROOT / "tests" / "plugin_provider" / "echo_provider" / "__init__.py").read_text()
    assert f"```python\n{module.rstrip()}\n```" in README
