"""The house has no import cycle: every ``import`` statement of ``supervisor`` and ``machines``,
at module level, inside functions and under ``TYPE_CHECKING`` alike, read with ``ast``.

An edge goes from a module to each module of ours it names (``from supervisor import
telemetry`` names the subpackage ``supervisor.telemetry``; ``from supervisor.run._base import
X`` names ``supervisor.run._base``).  A package's ``__init__`` is the package's own node.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("supervisor", "machines")


def module_files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """Our modules that ``name`` (at ``path``) imports anywhere in its source."""

    def ours(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    edges: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            edges.update(ours(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            for alias in node.names:  # ``from pkg import sub`` names the submodule when there is one
                sub = f"{module}.{alias.name}"
                edges.add(sub if sub in modules else ours(module))
    return {edge for edge in edges if edge is not None and edge != name}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_there_is_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_walk_sees_function_level_imports(tmp_path: Path) -> None:
    """The oracle itself: a cycle made only of a function-level import is found."""
    modules = {"p", "p.a", "p.b"}
    (tmp_path / "a.py").write_text("import p.b\n")
    (tmp_path / "b.py").write_text("def f():\n    from p import a\n")
    graph = {
        "p.a": imports_of("p.a", tmp_path / "a.py", modules),
        "p.b": imports_of("p.b", tmp_path / "b.py", modules),
    }
    assert cycles(graph) == [["p.a", "p.b"]]


@pytest.mark.parametrize("room", ["machines"])
def test_machines_imports_nothing_of_supervisor(room: str) -> None:
    graph = import_graph()
    assert {t for name, targets in graph.items() if name.startswith(room) for t in targets} <= {
        n for n in graph if n.startswith(room)
    }
