"""The layers of fedlib and fedbook (the book's page *Inside fedlib*), declared here as data: every
module of both packages belongs to exactly one layer, every import edge goes to the same layer or
one below it (every layer of fedbook is above every layer of fedlib: the library never imports the
book's machinery), a few pairs of layers do not import each other at all (the loop, the engines
and the methods), there is no import cycle and no function-local import that exists only to dodge
one."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"fedlib": ROOT / "fedlib", "fedbook": ROOT / "book" / "fedbook"}
"""The two packages and their folders: the library, and the book's machinery."""


def _module_name(package: str, path: Path) -> str:
    parts = [package, *path.relative_to(PACKAGES[package]).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(pkg, p): p for pkg, folder in PACKAGES.items() for p in sorted(folder.rglob("*.py"))}


def _resolve(module: str, node: ast.ImportFrom | ast.Import, is_package: bool) -> list[str]:
    """The fedlib modules an import statement in ``module`` names (submodules when they exist)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] in PACKAGES]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] not in PACKAGES:
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
    top.update(_lazy_imports(module, tree, is_package))
    return top, local


def _lazy_imports(module: str, tree: ast.Module, is_package: bool) -> set[str]:
    """The submodules a package imports on demand (PEP 562): the string values of its module-level
    ``_LAZY`` mapping and ``_SUBMODULES`` tuple, as ``fedlib.algorithms`` and
    ``fedlib.engines.flower`` declare them. They are import edges like any other."""
    if not is_package:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in ("_LAZY", "_SUBMODULES") for t in targets):
                values = node.value.values if isinstance(node.value, ast.Dict) else getattr(node.value, "elts", [])
                names.update(v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return {f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES}


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


LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # (layer, its modules), from the bottom up; "pkg.*" is every module of a package but the package's own __init__
    ("foundation", ("fedlib", "fedlib.validation", "fedlib.rng", "fedlib.io", "fedlib.messages", "fedlib.aggregate",
                    "fedlib.store", "fedlib.memory")),
    ("data", ("fedlib.data", "fedlib.data.*")),
    ("models and local training", ("fedlib.models", "fedlib.training")),
    ("statistics, metrics and the papers' mathematics",
     ("fedlib.stats", "fedlib.metrics", "fedlib.heads", "fedlib.heads.*", "fedlib.geometry", "fedlib.tracking", "fedlib.cgrl",
      "fedlib.clustering", "fedlib.encoders", "fedlib.distill")),
    ("federation", ("fedlib.federation",)),
    ("the method contract", ("fedlib.protocol",)),
    ("methods", ("fedlib.algorithms", "fedlib.algorithms.*")),
    ("the transport contract", ("fedlib.transport",)),
    ("engines", ("fedlib.engines", "fedlib.engines.inprocess", "fedlib.engines.vectorized",
                 "fedlib.engines.flower.records", "fedlib.engines.flower.remote", "fedlib.engines.flower.loopback")),
    ("results", ("fedlib.results",)),
    ("the round loop", ("fedlib.loop",)),
    ("running and post-hoc heads", ("fedlib.run", "fedlib.posthoc")),
    ("Flower's job, apps and drivers", ("fedlib.engines.flower", "fedlib.engines.flower.job", "fedlib.engines.flower.apps", "fedlib.engines.flower.entrypoint",
                                        "fedlib.engines.flower.deployment", "fedlib.engines.flower.watchdog", "fedlib.engines.flower.cli",
                                        "fedlib.engines.flower.__main__")),
    # fedbook: the book's machinery, every layer of it above the library
    ("the book's foundation", ("fedbook", "fedbook.sources", "fedbook.parallel", "fedbook.tables")),
    ("evidence", ("fedbook.intervals", "fedbook.claims", "fedbook.checks")),
    ("the study runner", ("fedbook.study",)),
    ("pages", ("fedbook.page",)),
    ("the book's catalog", ("fedbook.catalog", "fedbook.course", "fedbook.confirm")),
    ("chapter studies", ("fedbook.studies", "fedbook.studies.*")),
    ("measurements", ("fedbook.benchmarks", "fedbook.studies.performance")),
]
"""fedlib's layers, then fedbook's, bottom up (the book's page *Inside fedlib* draws them)."""

INDEPENDENT = [("the round loop", "engines"), ("the round loop", "methods"), ("engines", "methods"),
               ("the transport contract", "methods")]
"""Pairs of layers with no import edge between them, in either direction: the loop takes a
transport and imports no engine and no method; an engine carries any method's messages."""


def layer_of(module: str) -> str:
    """The layer that declares ``module`` (an exact name before a ``pkg.*`` pattern)."""
    exact = [name for name, mods in LAYERS if module in mods]
    pattern = [name for name, mods in LAYERS for m in mods if m.endswith(".*") and module.startswith(m[:-1])]
    found = exact or pattern
    if len(found) != 1:
        raise KeyError(f"{module} is declared in {len(found)} layers ({found}); declare it in exactly one of LAYERS")
    return found[0]


def test_every_module_is_declared_in_exactly_one_layer():
    for module in MODULES:
        layer_of(module)


def test_every_import_edge_goes_to_the_same_layer_or_below():
    rank = {name: i for i, (name, _) in enumerate(LAYERS)}
    bad = [f"{m} ({layer_of(m)}) imports {d} ({layer_of(d)})" for m, deps in _graph().items() for d in sorted(deps)
           if rank[layer_of(d)] > rank[layer_of(m)]]
    assert not bad, "imports of a layer above:\n" + "\n".join(bad)


def test_independent_layers_do_not_import_each_other():
    pairs = {frozenset(p) for p in INDEPENDENT}
    bad = [f"{m} imports {d}" for m, deps in _graph().items() for d in sorted(deps)
           if frozenset((layer_of(m), layer_of(d))) in pairs]
    assert not bad, "\n".join(bad)


def test_the_layer_check_finds_an_edge_upwards(monkeypatch):
    """The check itself can fail: an edge from the loop to an engine, and from data to the loop."""
    import test_layering as me

    graph = {m: set(d) for m, d in _graph().items()}
    graph["fedlib.loop"].add("fedlib.engines.inprocess")
    graph["fedlib.data.partition"].add("fedlib.loop")
    monkeypatch.setattr(me, "_graph", lambda: graph)
    with pytest.raises(AssertionError, match="fedlib.data.partition \\(data\\) imports fedlib.loop"):
        test_every_import_edge_goes_to_the_same_layer_or_below()
    with pytest.raises(AssertionError, match="fedlib.loop imports fedlib.engines.inprocess"):
        test_independent_layers_do_not_import_each_other()


@pytest.mark.parametrize(
    "module, forbidden",
    [
        ("fedlib.protocol", ("fedlib.loop", "fedlib.algorithms", "fedlib.posthoc", "fedlib.engines", "fedlib.transport")),
        ("fedlib.loop", ("fedlib.algorithms", "fedlib.posthoc", "fedlib.engines", "fedlib.run")),
        ("fedlib.engines", ("fedlib.loop", "fedlib.algorithms", "fedlib.posthoc", "fedlib.run")),
        ("fedlib.federation", ("fedlib.loop", "fedlib.protocol")),
        ("fedlib.data", ("fedlib.federation", "fedlib.loop")),
    ],
)
def test_a_layer_does_not_load_the_layers_above(module, forbidden):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('fedlib')))"
    loaded = eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden)]
    assert not bad, f"importing {module} loads {bad}"


def test_the_library_never_imports_the_books_machinery():
    """fedbook (the evidence, the pages, the studies) may import any module of fedlib; no module of
    fedlib imports fedbook, so the library stands alone."""
    importers = sorted(f"{m} imports {d}" for m, deps in _graph().items() if m.startswith("fedlib")
                       for d in deps if d.split(".")[0] == "fedbook")
    assert not importers, "\n".join(importers)
    assert "fedbook.claims" in _graph()["fedbook.page"]  # its claims report decides with fedbook.claims


def test_the_inside_page_draws_the_declared_layers_in_order():
    """The page *Inside fedlib* tables the layers a reader is told the test enforces: the same
    names, packages and order as :data:`LAYERS`."""
    rows = [line.split("|")[1:3] for line in (ROOT / "book" / "inside.md").read_text().splitlines()
            if line.startswith("| fedlib |") or line.startswith("| fedbook |")]
    drawn = [(package.strip(), layer.strip()) for package, layer in rows]
    declared = [("fedbook" if any(m.startswith("fedbook") for m in mods) else "fedlib", name) for name, mods in LAYERS]
    assert drawn == declared


PAGE_PACKAGES = ("IPython", "myst_nb", "papermill", "jupytext", "nbformat")
"""What executes or renders a page: the book's packages, never the library's."""


def test_the_library_imports_no_page_machinery():
    """fedlib is the library, not the book: none of its modules imports a package that executes or
    renders pages (:data:`PAGE_PACKAGES`), at module level or inside a function."""
    found = []
    for module, path in MODULES.items():
        if not module.startswith("fedlib"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{module}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in PAGE_PACKAGES]
    assert not found, "\n".join(found)
    assert any(m.startswith("fedlib.engines") for m in MODULES)  # the walk sees the library's modules


def test_importing_every_module_of_the_library_loads_no_plotting():
    """matplotlib is imported only by the one function that draws (a partition's heat map,
    :func:`fedlib.data.partition.plot_partition`), when it is called: the library loads without it."""
    names = sorted(m for m in MODULES if m.startswith("fedlib") and not m.endswith("__main__"))
    code = (f"import importlib, sys\nfor m in {names!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'IPython')))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
