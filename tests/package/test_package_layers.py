"""The package's floors, read from the source: no import circle, collectors never reach into
engine, the shared floor depends on nothing above it, rule matching on no part of engine
built on it, no command imported by the rest, and no private name imported across modules.
Every import counts, the ones inside functions too: a lazy import is still a dependency.
One is allowed upwards: the package root gives the Python API's names (``qcdoctor.triage``)
from ``qcdoctor.engine.api``, only on first use (``ROOT_API``).
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.paths import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:                                        # the project depends on tomli before 3.11
    import tomli as tomllib



@cache
def modules() -> dict[str, Path]:
    """Dotted module name -> source file, from pyproject's package folders."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    folders = config["tool"]["setuptools"]["package-dir"]
    found = {}
    for package, folder in folders.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            # a sub-folder mapped on its own (qcdoctor.engine inside qcdoctor) wins
            if name not in found or len(folder) > len(str(found[name].parent)):
                found[name] = path
    return found


def _target(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def imports() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """module -> [(imported module, names taken from it)], every import in the file."""
    known = modules()
    out = {}
    for module, path in known.items():
        found = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                target = _target(module, path, node)
                for alias in node.names:
                    child = f"{target}.{alias.name}"
                    if child in known:           # "from package import module"
                        found.append((child, ()))
                    elif target in known:
                        found.append((target, (alias.name,)))
            elif isinstance(node, ast.Import):
                found += [(a.name, ()) for a in node.names if a.name in known]
        out[module] = [(t, names) for t, names in found if t != module]
    return out


# the one import upwards: ``import qcdoctor`` then ``qcdoctor.triage`` loads the API from
# the root's module ``__getattr__``, once the package is imported. Made only there (or for
# type checkers), it is no dependency of any floor below the API, so it is left out of the
# floor and circle checks, and test_the_root_reaches_the_api_only_on_first_use keeps it so
ROOT_API = ("qcdoctor", "qcdoctor.engine.api")


def _graph_imports() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """``imports()`` without the root's import of the API."""
    return {m: [(t, names) for t, names in targets if (m, t) != ROOT_API]
            for m, targets in imports().items()}


def _floor(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["qcdoctor", "engine"] and len(parts) > 2:
        return ".".join(parts[:3])
    if len(parts) > 1 and parts[1] in ("collectors", "probe", "engine"):
        return ".".join(parts[:2])
    return "qcdoctor"                             # the shared floor at the package's root


def test_the_source_is_found():
    found = modules()
    assert "qcdoctor" in found and "qcdoctor.collectors.case_file" in found
    assert len(found) > 80


def test_no_import_circle():
    graph = {m: {t for t, _ in targets} for m, targets in _graph_imports().items()}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):                                 # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in graph:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    assert not circles, circles


# floor -> the floors it must never import
FORBIDDEN = {
    "qcdoctor": ("qcdoctor.engine", "qcdoctor.collectors", "qcdoctor.probe"),
    "qcdoctor.collectors": ("qcdoctor.engine", "qcdoctor.probe"),
    "qcdoctor.engine.matching": ("qcdoctor.engine.diagnosis", "qcdoctor.engine.reports",
                                 "qcdoctor.engine.intake.session", "qcdoctor.engine.commands"),
    "qcdoctor.engine.diagnosis": ("qcdoctor.engine.intake.session", "qcdoctor.engine.commands"),
    "qcdoctor.engine.reports": ("qcdoctor.engine.intake.session", "qcdoctor.engine.commands"),
    "qcdoctor.engine.intake.session": ("qcdoctor.engine.commands",),
    "qcdoctor.probe": ("qcdoctor.engine.commands",),
}


@pytest.mark.parametrize("floor", sorted(FORBIDDEN))
def test_a_floor_imports_nothing_above_it(floor):
    # ``python -m qcdoctor`` starts the command line: the one way down the floors
    wrong = [(m, t) for m, targets in _graph_imports().items()
             if _floor(m) == floor and m != "qcdoctor.__main__"
             for t, _ in targets if t.startswith(FORBIDDEN[floor])
             and (t + ".").startswith(tuple(f + "." for f in FORBIDDEN[floor]))]
    assert not wrong, wrong


def test_the_root_reaches_the_api_only_on_first_use():
    """The root imports qcdoctor.engine.api only inside its module ``__getattr__`` (and
    for type checkers), never as it is imported, and imports nothing else above it."""
    path = modules()["qcdoctor"]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    upward = {t for t, _ in imports()["qcdoctor"]
              if t.startswith(("qcdoctor.engine", "qcdoctor.collectors", "qcdoctor.probe"))}
    assert upward == {ROOT_API[1]}

    def places(node, inside: tuple[str, ...] = ()):
        for child in ast.iter_child_nodes(node):
            here = inside
            if isinstance(child, ast.FunctionDef):
                here = (*inside, child.name)
            elif isinstance(child, ast.If) and isinstance(child.test, ast.Name):
                here = (*inside, child.test.id)
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith(
                    "qcdoctor.engine"):
                yield here
            yield from places(child, here)
    found = list(places(tree))
    assert found and all(where in (("__getattr__",), ("TYPE_CHECKING",)) for where in found), found


def test_every_engine_module_lives_on_a_floor():
    loose = [m for m in modules() if m.startswith("qcdoctor.engine.") and m.count(".") == 2
             and modules()[m].name != "__init__.py"]
    assert not loose, f"modules directly in engine/: {loose}"


def test_no_private_name_is_imported_across_modules():
    crossing = [(m, t, n) for m, targets in imports().items() for t, names in targets
                for n in names if n.startswith("_") and not n.startswith("__")]
    assert not crossing, crossing
