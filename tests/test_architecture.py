"""The house's directions that already hold, pinned: which rooms may import which.

Read from the same import graph as ``tests/test_imports.py`` (every ``import`` with ``ast``,
function-level and ``TYPE_CHECKING`` ones included).  ``machines`` is pure; the process and
wire layers know nothing above them; the front-ends (``cli``, ``batching``, ``mcp``) name
no kind; the built-in providers are plug-ins that know no front-end and no other provider;
the core imports no provider and no front-end (the package root's lazy re-export of the
batch API aside).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

from tests.test_imports import ROOT, import_graph, module_files

FRONT_ENDS = ("supervisor.cli", "supervisor.batching", "supervisor.mcp")
PROVIDERS = "supervisor.providers"
LAYERS = ("supervisor.process", "supervisor.wire")
ROOMS = (*FRONT_ENDS, PROVIDERS, *LAYERS, "supervisor.telemetry", "supervisor.run")

# What a chart may import: no module that reads or writes anything outside the process.
IO_MODULES = frozenset(
    {"os", "io", "sys", "pathlib", "subprocess", "socket", "select", "signal", "asyncio", "anyio", "threading",
     "multiprocessing", "shutil", "tempfile", "logging", "psutil", "json", "pickle", "sqlite3"}
)  # fmt: skip


def _in(module: str, *rooms: str) -> bool:
    return any(module == room or module.startswith(f"{room}.") for room in rooms)


def _edges(source: tuple[str, ...], target: tuple[str, ...]) -> list[tuple[str, str]]:
    graph = import_graph()
    return sorted(
        (module, imported)
        for module, imports in graph.items()
        if _in(module, *source)
        for imported in imports
        if _in(imported, *target)
    )


def _provider_of(module: str) -> str:
    return module.split(".")[2]


def test_machines_import_nothing_of_supervisor() -> None:
    assert _edges(("machines",), ("supervisor",)) == []


def test_machines_import_no_io_module() -> None:
    found = []
    for name, path in module_files().items():
        if not _in(name, "machines"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [(name, a.name) for a in node.names if a.name.partition(".")[0] in IO_MODULES]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found += [(name, node.module)] if node.module.partition(".")[0] in IO_MODULES else []
    assert found == []


MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """A module a reader can hold: one job each, none over 600 lines (the run engine was one
    class of 1,327 lines before it was composed from parts)."""
    over = {
        name: lines
        for name, path in module_files().items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert over == {}


def test_the_process_and_wire_layers_import_no_front_end_provider_or_telemetry() -> None:
    assert _edges(LAYERS, (*FRONT_ENDS, PROVIDERS, "supervisor.telemetry")) == []


def test_front_ends_name_no_built_in_provider() -> None:
    assert _edges(FRONT_ENDS, (PROVIDERS,)) == []


def test_built_in_providers_import_no_front_end_and_no_telemetry() -> None:
    assert _edges((PROVIDERS,), (*FRONT_ENDS, "supervisor.telemetry")) == []


def test_a_built_in_provider_imports_no_other_provider() -> None:
    crossing = [
        (module, imported)
        for module, imported in _edges((PROVIDERS,), (PROVIDERS,))
        if module.count(".") >= 2
        and imported.count(".") >= 2
        and _provider_of(module) != _provider_of(imported)
    ]
    assert crossing == []


def test_the_core_imports_no_provider_and_no_front_end() -> None:
    core = tuple(name for name in module_files() if name.startswith("supervisor.") and not _in(name, *ROOMS))
    assert core, "no core module found"
    assert _edges(core, (PROVIDERS, *FRONT_ENDS)) == []


# -- the house (the fourth release): providers as third parties, a small root, no outside citations


def _provider_imports_outside_the_public_surfaces(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every ``(module, imported)`` where a built-in provider's module imports a module of
    ``supervisor`` other than ``supervisor``, ``supervisor.provider``, ``supervisor.wire`` and its
    own package (``supervisor.providers.<kind>``): what a third-party kind could not import."""
    public = {"supervisor", "supervisor.provider", "supervisor.wire"}
    found = []
    for module, imports in graph.items():
        if not _in(module, PROVIDERS) or module == PROVIDERS:
            continue
        own = ".".join(module.split(".")[:3])
        found += [
            (module, imported)
            for imported in imports
            if _in(imported, "supervisor") and imported not in public and not _in(imported, own)
        ]
    return sorted(found)


def test_a_built_in_provider_imports_only_what_a_third_party_can() -> None:
    """A built-in kind is written as a third party's would be: from the authors' surface
    (``supervisor.provider``), the wire toolkit (``supervisor.wire``), the callers' surface
    (``supervisor``) and its own package; never a private module of the core (function-level
    and ``TYPE_CHECKING`` imports included)."""
    assert _provider_imports_outside_the_public_surfaces(import_graph()) == []


def test_the_provider_check_sees_a_private_import() -> None:
    """The oracle: a private import, a sibling kind and a private wire module are found; the
    public surfaces and the kind's own package are not."""
    graph = {
        "supervisor.providers.rocket._run": {
            "supervisor.provider",
            "supervisor.wire",
            "supervisor",
            "supervisor.providers.rocket._config",
            "supervisor._seam",
            "supervisor.wire._rpc",
            "supervisor.providers.comet",
        },
    }
    assert _provider_imports_outside_the_public_surfaces(graph) == [
        ("supervisor.providers.rocket._run", "supervisor._seam"),
        ("supervisor.providers.rocket._run", "supervisor.providers.comet"),
        ("supervisor.providers.rocket._run", "supervisor.wire._rpc"),
    ]


MAX_ROOT_MODULES = 14


def test_the_package_root_holds_at_most_14_modules() -> None:
    """The root keeps the contract (the seam, the registry, the errors, the surfaces); every
    other module lives in a room (a subpackage).  ``__init__.py`` counts."""
    root = sorted(path.name for path in (ROOT / "supervisor").glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


# An import cycle among supervisor's modules is pinned by ``tests/test_imports.py``.

# A citation of a file outside the repository: the contract, the design seeds and notes, the
# research notes.  ``SPEC`` is matched as a word, so names such as ``SPEC_TABLE`` are not.
OUTSIDE_FILES = re.compile(r"\bSPEC\b|\bseeds/|\bresearch/|\bshared/|\bARCHITECTURE\.md")
CITATION_ROOTS = ("supervisor", "machines", "tests", "benchmarks", "tools")
CITATION_EXCLUDED = frozenset({"tests/test_architecture.py"})  # it holds the patterns


def _texts(source: str) -> list[tuple[int, str]]:
    """Every comment and every string literal (docstrings included) of ``source``, by line."""
    return [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type in (tokenize.COMMENT, tokenize.STRING)
        or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1)
    ]


def _citations(source: str) -> list[tuple[int, str]]:
    return [(line, text) for line, text in _texts(source) if OUTSIDE_FILES.search(text)]


def test_no_comment_or_docstring_cites_a_file_outside_the_repository() -> None:
    """A reader has the repository, not the project's notes: a comment, a docstring or any
    other string of ours (a benchmark's printed goal) says the rule itself, never "SPEC
    section N" or a path into the notes.  This file is excluded (it holds the pattern)."""
    found = []
    for room in CITATION_ROOTS:
        for path in sorted((ROOT / room).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "node_modules" in path.parts or relative in CITATION_EXCLUDED:
                continue
            found += [(relative, line) for line, _ in _citations(path.read_text(encoding="utf-8"))]
    assert found == []


def test_the_citation_check_sees_comments_and_docstrings() -> None:
    source = (
        '"""Bounded runs (S' 'PEC section 15)."""\n'
        "SPEC_TABLE = 1  # a name, not a citation\n"
        "x = 1  # see re" "search/README.md\n"
        'def f():\n    """The rule itself."""\n'
    )  # fmt: skip
    assert [line for line, _ in _citations(source)] == [1, 3]


# Names only a built-in provider has: product names, the kinds' names, their agents and SDKs.
# "ACP" is not among them: it is the Agent Client Protocol, an open protocol any third-party
# kind may speak (the base's default tool kinds are that protocol's ``ToolKind``), and the
# ``acp`` kind is named after it.  An environment prefix such as ``DSH_*`` is not the name
# either (``DSH`` is matched as a word).
PROVIDER_NAMES = re.compile(
    r"Claude Code|\bCodex\b|\bcodex\b|\bDSH\b|\bdsh\b|claude-agent-acp|codex-acp|claude-agent-sdk"
    r"|\bclaude[_-]code\b|\bdsh[_-]sdk\b|supervisor\.providers\.\w"
)
NOT_CORE = (PROVIDERS, *FRONT_ENDS)


def _docstrings(source: str) -> list[tuple[int, str]]:
    """Every docstring, by first line: a string standing alone as a statement (a module's, a
    class's or a function's, and an attribute's, which the API reference shows too)."""
    return [
        (node.lineno, node.value.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]


def _provider_names(source: str) -> list[tuple[int, str]]:
    return [
        (line, match.group()) for line, text in _docstrings(source) for match in PROVIDER_NAMES.finditer(text)
    ]


def test_no_core_docstring_names_a_built_in_provider() -> None:
    """The core (``supervisor`` outside ``providers``, ``cli``, ``mcp`` and ``batching``) is
    written for any kind: its docstrings speak of "the agent's own session id" or "a kind
    whose protocol ...", never of a built-in provider by name (``PROVIDER_NAMES``: "ACP" is
    the protocol and stays allowed)."""
    found = []
    for name, path in module_files().items():
        relative = path.relative_to(ROOT).as_posix()
        if not _in(name, "supervisor") or _in(name, *NOT_CORE):
            continue
        found += [(relative, line, word) for line, word in _provider_names(path.read_text(encoding="utf-8"))]
    assert found == []


def test_the_provider_name_check_sees_a_name_and_lets_the_protocol_pass() -> None:
    source = (
        '"""The agent\'s session id (ACP ``sessionId``)."""\n'
        "class A:\n"
        '    """As Claude Code does."""\n'
        "    def f(self):\n"
        '        """A dsh_sdk run; DSH_* is scrubbed."""\n'
    )
    assert _provider_names(source) == [(3, "Claude Code"), (5, "dsh_sdk")]
