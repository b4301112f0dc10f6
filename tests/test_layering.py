"""The layers of fedlib (the book's page *Inside fedlib*): no import cycle, no function-local
import that exists only to dodge one, and the round loop imports no method."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fedlib"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, node: ast.ImportFrom | ast.Import, is_package: bool) -> list[str]:
    """The fedlib modules an import statement in ``module`` names (submodules when they exist)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "fedlib"]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "fedlib":
        return []
    out = []
    for a in node.names:
        sub = f"{target}.{a.name}"
        out.append(sub if sub in MODULES else target)
    return out


def _imports(module: str) -> tuple[set[str], list[tuple[int, str]]]:
    """(module-level fedlib imports, function-local fedlib imports as (line, target))."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    top, local = set(), []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                targets = _resolve(module, child, is_package)
                if in_function:
                    local.extend((child.lineno, t) for t in targets)
                else:
                    top.update(t for t in targets if t != module)
            visit(child, inside)

    visit(tree, False)
    return top, local


def _graph() -> dict[str, set[str]]:
    graph = {}
    for m in MODULES:
        deps = set()
        for t in _imports(m)[0]:
            # importing a.b.c runs a and a.b first: a package's __init__ is a dependency too
            parts = t.split(".")
            deps.update(".".join(parts[:i]) for i in range(2, len(parts) + 1) if ".".join(parts[:i]) in MODULES)
        deps.discard(m)
        # a package's own __init__ importing its submodules is not a cycle with them
        graph[m] = {d for d in deps if not (m + ".").startswith(d + ".")}
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def dfs(v: str) -> list[str] | None:
        colour[v] = GREY
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if colour.get(w, BLACK) == GREY:
                return stack[stack.index(w):] + [w]
            if colour.get(w) == WHITE:
                found = dfs(w)
                if found:
                    return found
        stack.pop()
        colour[v] = BLACK
        return None

    for v in sorted(graph):
        if colour[v] == WHITE:
            found = dfs(v)
            if found:
                return found
    return None


def test_the_import_graph_has_no_cycle():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_function_local_import_of_fedlib():
    local = {m: _imports(m)[1] for m in MODULES}
    offenders = {m: v for m, v in local.items() if v}
    assert not offenders, f"function-local imports of fedlib modules (import at module level instead): {offenders}"


@pytest.mark.parametrize(
    "module, forbidden",
    [
        ("fedlib.protocol", ("fedlib.loop", "fedlib.algorithms", "fedlib.deployment", "fedlib.engines")),
        ("fedlib.loop", ("fedlib.algorithms", "fedlib.deployment")),
        ("fedlib.engines", ("fedlib.loop", "fedlib.algorithms", "fedlib.deployment")),
        ("fedlib.federation", ("fedlib.loop", "fedlib.protocol")),
        ("fedlib.data", ("fedlib.federation", "fedlib.loop")),
    ],
)
def test_a_layer_does_not_load_the_layers_above(module, forbidden):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('fedlib')))"
    loaded = eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden)]
    assert not bad, f"importing {module} loads {bad}"


def test_the_book_tooling_is_the_top_layer():
    """fedlib.book (the chapters' setup, tables and claims report) may import any module of fedlib;
    no module of fedlib imports it."""
    importers = sorted(m for m, deps in _graph().items() if "fedlib.book" in deps)
    assert not importers, f"fedlib.book is the top layer, but {importers} import it"
    assert "fedlib.claims" in _graph()["fedlib.book"]  # its claims report decides with fedlib.claims
