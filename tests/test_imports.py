"""The product's module structure: no import circle inside an app, no product module
importing the benchmarks or the tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("catalog", "graph", "ingest", "privacy", "ops", "lineage_site", "pipelines")


def modules(package: str) -> dict[str, Path]:
    found = {}
    for path in (ROOT / package).rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from package import module`` imports the module, not (only) the package.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
            names.add(node.module)
    return names


def circles(package: str) -> list[list[str]]:
    """The import circles among ``package``'s modules (strongly connected components)."""
    found = modules(package)
    edges = {}
    for name, path in found.items():
        targets = {t for t in imported(path) if t in found and t != name}
        # ``from package import module`` names the package too: that is no edge to it.
        edges[name] = {t for t in targets if not any(o.startswith(t + ".") for o in targets)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for name in sorted(edges):
        if name not in index:
            visit(name)
    return out


@pytest.mark.parametrize("package", PRODUCT)
def test_no_module_of_an_app_imports_itself_through_others(package):
    assert circles(package) == []


@pytest.mark.parametrize("package", PRODUCT)
def test_no_product_module_imports_benchmarks_or_tests(package):
    for name, path in modules(package).items():
        outside = {t for t in imported(path) if t.split(".")[0] in ("benchmarks", "tests")}
        assert not outside, f"{name} imports {sorted(outside)}"
