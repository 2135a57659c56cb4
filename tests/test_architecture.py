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

from tests.test_imports import import_graph, module_files

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
