"""The documentation's promises that can drift: the README's test line (CI runs it), the
diagrams it shows, and every example on the README and the pages under ``docs/``.

Every fenced block is checked for what it is: Python compiles, TOML and JSON parse, shell
passes ``bash -n``.  The worked examples run as they stand: the ones named below, and any
block right after an ``<!-- example: run -->`` comment (its output, when the next block is
marked ``<!-- example: output -->``, must be what it prints).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from supervisor._version import DISTRIBUTION
from supervisor.cli import _diagrams

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = {
    path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "docs").rglob("*.md"))
}
DOCUMENTS = {"README.md": README, **PAGES}

FENCE = re.compile(
    r"^(?P<marker><!-- example: (?P<role>run|output) -->\n)?```(?P<lang>[a-z]*)[^\n]*\n(?P<body>.*?)^```$",
    re.S | re.M,
)


def page(name: str) -> str:
    return PAGES[f"docs/{name}"]


def blocks(text: str) -> list[tuple[str, str, str | None]]:
    """(language, body, role) of every fenced block, in order."""
    return [(m["lang"], m["body"], m["role"]) for m in FENCE.finditer(text)]


def _all_blocks(lang: str) -> list[object]:
    """Every ``lang`` block of the README and the pages, as test parameters named by where they are."""
    return [
        pytest.param(f"{name}#{n}", body, id=f"{name}#{n}")
        for name, text in DOCUMENTS.items()
        for n, (kind, body, _) in enumerate(blocks(text))
        if kind == lang
    ]


def test_ci_runs_exactly_the_readme_test_line() -> None:
    ci_line = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert f"```sh\n{ci_line}\n```" in README


def test_the_docs_show_every_current_lifecycle_diagram() -> None:
    shown = "\n".join(PAGES.values())
    for name, text in _diagrams.render(DISTRIBUTION).items():
        if name == "ladder.md":
            continue
        current = re.search(r"```mermaid\n.*?```", text, re.S)
        assert current is not None
        assert current.group(0) in shown, f"the docs lack the current {name} diagram"


@pytest.mark.parametrize(("where", "code"), _all_blocks("python"))
def test_every_python_example_compiles(where: str, code: str) -> None:
    compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


@pytest.mark.parametrize(("where", "text"), _all_blocks("toml"))
def test_every_toml_example_parses(where: str, text: str) -> None:
    tomllib.loads(text)


@pytest.mark.parametrize(("where", "text"), _all_blocks("toml"))
def test_every_provider_entry_example_uses_keys_its_kind_has(where: str, text: str) -> None:
    """A ``[[provider]]`` example names an installed kind and only keys of that kind's config."""
    from supervisor._kinds import installed_kinds, kind

    for entry in tomllib.loads(text).get("provider", []):
        assert entry["kind"] in installed_kinds(), f"{where}: {entry['kind']}"
        fields = kind(entry["kind"]).config.model_fields
        assert sorted(set(entry) - {"kind"} - set(fields)) == [], where


@pytest.mark.parametrize(("where", "text"), _all_blocks("json"))
def test_every_json_example_parses(where: str, text: str) -> None:
    json.loads(text)


@pytest.mark.parametrize(("where", "script"), _all_blocks("sh"))
def test_every_shell_example_is_valid_shell(where: str, script: str) -> None:
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def _marked_examples() -> list[tuple[str, str, str, str | None]]:
    """(where, language, body, expected output) of every block marked to run."""
    found = []
    for name, text in DOCUMENTS.items():
        listed = blocks(text)
        for n, (lang, body, role) in enumerate(listed):
            if role != "run":
                continue
            after = listed[n + 1] if n + 1 < len(listed) else None
            expected = after[1] if after is not None and after[2] == "output" else None
            found.append((f"{name}#{n}", lang, body, expected))
    return found


def test_only_python_and_shell_blocks_are_marked_to_run() -> None:
    for where, lang, _, _ in _marked_examples():
        assert lang in ("python", "sh"), f"{where}: a {lang or 'plain'} block cannot run"
    for name, text in DOCUMENTS.items():
        listed = blocks(text)
        for n, (_, _, role) in enumerate(listed):
            if role == "output":
                assert n > 0, f"{name}#{n}: an output that follows no run"
                assert listed[n - 1][2] == "run", f"{name}#{n}: an output that follows no run"


@pytest.mark.parametrize(
    ("where", "lang", "body", "expected"), [pytest.param(*e, id=e[0]) for e in _marked_examples()]
)
def test_every_marked_example_runs(
    where: str, lang: str, body: str, expected: str | None, tmp_path: Path
) -> None:
    proc = _run_python(body, tmp_path) if lang == "python" else _run_sh(body, tmp_path)
    assert proc.returncode == 0, proc.stderr
    if expected is not None:
        assert proc.stdout == expected


def _embedding_example() -> str:
    section = README.split("## Embedding", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None
    return block.group(1)


def _run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def test_the_embedding_example_runs_verbatim(tmp_path: Path) -> None:
    proc = _run_python(_embedding_example(), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Hello!")
    assert proc.stderr == ""


def test_the_embedding_page_shows_the_readmes_example() -> None:
    assert f"```python\n{_embedding_example()}```" in page("embedding.md")


def test_the_embedding_example_handles_a_failed_start(tmp_path: Path) -> None:
    code = _embedding_example()
    agent = "example_agent_config()"
    assert code.count(agent) == 1
    failing = code.replace(agent, "example_agent_config(start_timeout_ms=0.001)")  # cannot be ready in time
    proc = _run_python(failing, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "could not start the subagent: "
        "Subagent failure (provider: ACP; stage: initialize; category: transport)\n"
    )


def test_the_docs_show_the_complete_third_party_provider() -> None:
    module = (ROOT / "tests" / "plugin_provider" / "echo_provider" / "__init__.py").read_text()
    assert f"```python\n{module.rstrip()}\n```" in page("writing-a-provider.md")


def test_the_conversation_example_runs_verbatim_and_prints_what_the_page_shows(tmp_path: Path) -> None:
    section = page("conversations.md").split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    shown = re.search(r"prints .*?\n\n```\n(.*?)```", section, re.S)
    assert code is not None
    assert shown is not None
    proc = _run_python(code.group(1), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown.group(1)
    assert proc.stderr == ""


def _section_blocks(name: str, heading: str) -> list[str]:
    """The fenced blocks of the section under ``heading`` of page ``name`` (up to the next heading)."""
    section = re.split(r"\n#{1,3} ", page(name).split(heading, 1)[1], maxsplit=1)[0]
    return re.findall(r"```[a-z]*\n(.*?)```", section, re.S)


def _run_sh(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": path},
    )


def test_the_batch_turns_example_writes_the_turns_the_page_shows(tmp_path: Path) -> None:
    script, shown = _section_blocks("batch.md", "## Conversation items: `turns`")[:2]
    proc = _run_sh(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    [record] = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [json.loads(line) for line in shown.splitlines()] == record["turns"]


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict``: every nav entry, link and anchor resolves, and the API reference
    renders from the docstrings (the ``docs`` extra, which the test command installs)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    reference = (tmp_path / "site" / "reference" / "callers" / "index.html").read_text()
    assert 'id="supervisor.Registry"' in reference
    _check_reference(tmp_path / "site" / "reference")
    for name in PAGES:
        if name.startswith("docs/") and name != "docs/index.md":
            built = tmp_path / "site" / Path(name).relative_to("docs").with_suffix("") / "index.html"
            assert built.is_file(), f"{name} was not built (is it in mkdocs.yml's nav?)"


# Each reference page and the public module it renders; the charts' names the callers' module
# re-exports are rendered on the charts' page (the callers' page says so).
REFERENCE = {
    "callers": ("supervisor", {"AuditTrail", "Transition", "TransitionSink"}),
    "provider": ("supervisor.provider", set()),
    "machines": ("machines", set()),
    "telemetry": ("supervisor.telemetry", set()),
}


def _check_reference(site: Path) -> None:
    """Every public name has an entry on its module's reference page, under its public module's
    name; the page names no private module (its hover titles included) and shows no raw Sphinx role."""
    import html
    import importlib

    for page, (module, elsewhere) in REFERENCE.items():
        built = (site / page / "index.html").read_text(encoding="utf-8")
        names = set(importlib.import_module(module).__all__) - elsewhere
        shown = set(re.findall(rf'id="{re.escape(module)}\.(\w+)"', built))
        assert sorted(names - shown) == [], f"{page}: public names without an entry"
        body = built.split("<article", 1)[1].split("</article>", 1)[0]
        text = html.unescape(re.sub(r"<[^>]+>", " ", body))
        assert re.findall(r"\b(?:supervisor|machines)(?:\.\w+)*\._\w+", body) == [], page  # hover titles too
        assert re.findall(r":(?:class|func|meth|data|attr|mod|exc|obj):", text) == [], page
