"""What a piece of code executes: the project's modules it imports, transitively.

Two caches key on it: the book's build re-executes a chapter only when the notebook, a module it
runs or its parameters change (``book/build.py``), and the study runner (:mod:`fedbook.study`)
re-runs a cell of a study only when a module its function runs changes. Both packages count:
``fedlib`` (the library, ``<root>/fedlib``) and ``fedbook`` (the book's machinery,
``<root>/book/fedbook``).

The imports are read from the source (``ast``), not from ``sys.modules``: a package that
imports lazily (``fedlib.algorithms``: a ``_LAZY`` map and a module ``__getattr__``) resolves
``from package import Name`` to the submodule that defines ``Name``, so a chapter that imports
FedAvg does not depend on MPT's module.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from pathlib import Path

PACKAGES = {"fedlib": ("fedlib",), "fedbook": ("book", "fedbook")}
"""The project's packages and their folders, relative to the repository's root."""

ROOT = Path(__file__).resolve().parent.parent.parent
"""The repository's root (this file is ``<root>/book/fedbook/sources.py``)."""


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project's packages (:data:`PACKAGES`) by its dotted name (a package by
    its ``__init__.py``)."""
    out = {}
    for package, parts in PACKAGES.items():
        folder = Path(root).joinpath(*parts)
        for path in sorted(folder.rglob("*.py")):
            rel = list(path.relative_to(folder).with_suffix("").parts)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join([package, *rel])] = path
    return out


def _lazy_names(modules: dict[str, Path], package: str) -> tuple[dict[str, str], set[str]] | None:
    """A lazily importing package's ``_LAZY`` map (name -> submodule, read as a literal) and the
    names its ``__init__`` binds itself; ``None`` for a package without one."""
    path = modules.get(package)
    if path is None or path.name != "__init__.py":
        return None
    tree = ast.parse(path.read_text())
    lazy, own = None, set()
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == "_LAZY" and node.value is not None:
            lazy = ast.literal_eval(node.value)
        elif isinstance(node, ast.ImportFrom):
            own |= {a.asname or a.name for a in node.names}
    return None if lazy is None else ({k: f"{package}.{v}" for k, v in lazy.items()}, own)


def imported(tree: ast.AST, module: str, is_package: bool, modules: dict[str, Path]) -> set[str]:
    """The project's modules the import statements anywhere in ``tree`` name (submodules where
    ``from a import b`` names one), ``module`` being the importer's name (for relative imports).

    A package that imports lazily resolves ``from package import Name`` to the submodule that
    defines ``Name``; a name it neither maps nor binds itself (``ALGORITHMS``,
    ``make_algorithm``), or a bare ``import package``, to every submodule it maps."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    found.add(a.name)
                    lazy = _lazy_names(modules, a.name)
                    if lazy is not None:
                        found |= set(lazy[0].values())
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] not in PACKAGES:
                continue
            lazy = _lazy_names(modules, target) if target != module else None
            for a in node.names:
                if f"{target}.{a.name}" in modules:
                    found.add(f"{target}.{a.name}")
                    continue
                found.add(target)
                if lazy is not None:
                    mapped, own = lazy
                    if a.name in mapped:
                        found.add(mapped[a.name])
                    elif a.name not in own:
                        found |= set(mapped.values())
    return found


def closure(start: Iterable[str], root: Path = ROOT) -> list[Path]:
    """The files of the modules ``start`` names and, transitively, of everything they import (with
    every package ``__init__`` on the way, which Python runs too), sorted."""
    modules = project_modules(root)
    todo, seen = list(start), set()
    while todo:
        mod = todo.pop()
        parents = [".".join(mod.split(".")[:i]) for i in range(1, mod.count(".") + 1)]
        for m in [*parents, mod]:
            if m in seen or m not in modules:
                continue
            seen.add(m)
            path = modules[m]
            todo.extend(imported(ast.parse(path.read_text()), m, path.name == "__init__.py", modules))
    return sorted(modules[m] for m in seen)


def source_modules(source: str, root: Path = ROOT) -> list[Path]:
    """The project's files that Python ``source`` (a notebook's code cells joined) executes:
    :func:`closure` of what it imports. IPython's ``%magic`` and ``!shell`` lines are skipped."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    return closure(imported(ast.parse(code), "__main__", False, project_modules(root)), root)


def module_files(module: str, root: Path = ROOT) -> list[Path]:
    """The project's files that importing ``module`` (a dotted name of :data:`PACKAGES`) executes."""
    return closure([module], root)


def digest(paths: Iterable[Path], root: Path = ROOT) -> str:
    """sha256 of each file's path (relative to ``root``) and bytes, in the given order."""
    h = hashlib.sha256()
    for path in paths:
        h.update(Path(path).relative_to(root).as_posix().encode())
        h.update(Path(path).read_bytes())
    return h.hexdigest()


__all__ = ["PACKAGES", "ROOT", "closure", "digest", "imported", "module_files", "project_modules", "source_modules"]
