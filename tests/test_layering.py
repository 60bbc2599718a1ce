"""The package's import graph: imports point down the layers, and nothing imports in a cycle.

The layers (README "How it is built"), lowest first. A module may import modules of its own
layer or of a lower one, never of a higher one; and the graph of top-level packages (and of
modules) has no cycle, so layers can be read, tested and replaced bottom-up.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import geofl

ROOT = Path(geofl.__file__).parent

#: Top-level package or module → layer (0 = foundation).
LAYERS: dict[str, int] = {
    # foundation
    "__init__": 0,
    "errors": 0,
    "rng": 0,
    "registry": 0,
    "io": 0,
    "rundir": 0,
    "hashing": 0,
    "device": 0,
    # what flows: tasks, models, data, the update and round-record types, run events
    "tasks": 1,
    "models": 1,
    "data": 1,
    "update": 1,
    "records": 1,
    "events": 1,
    # mechanisms: client and server functions, privacy, network, attacks
    "client": 2,
    "server": 2,
    "privacy": 2,
    "network": 2,
    "attacks": 2,
    "security": 2,
    "hierarchy": 2,
    # algorithms: a strategy plus a client half each
    "algorithms": 3,
    # the plug-in index and the config that names plug-ins
    "plugins": 4,
    "config": 4,
    # the engine and what observes it
    "engine": 5,
    "report": 5,
    "governance": 5,
    "inference": 5,
    "tracking": 5,
    # deployment on a distributed runtime (Flower): runs the engine's rounds across sites
    "deploy": 6,
    # user interface: the command line and the Python API
    "cli": 6,
    "api": 6,
    # the package root's lazy public entry points (see _facade_nodes)
    "<facade>": 7,
}

#: The package root re-exports entry points of any layer (``geofl.load_model``) lazily:
#: imports inside its PEP 562 ``__getattr__`` (and under ``if TYPE_CHECKING:``, for type
#: checkers) run only on attribute access, after the package is initialised, so they are
#: checked as a separate top-layer node, not as imports of layer-0 ``geofl``.
FACADE = "geofl.<facade>"


def _facade_nodes(tree: ast.Module) -> set[int]:
    """ids of the AST nodes of the root's lazy façade (``__getattr__``, TYPE_CHECKING)."""
    ids: set[int] = set()
    for node in tree.body:
        lazy = isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
        typing_only = isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        if lazy or typing_only:
            ids |= {id(n) for n in ast.walk(node)}
    return ids


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Module → geofl modules it imports (anywhere in the file, lazily or not).

    ``from geofl.pkg import sub`` counts as an import of ``geofl.pkg.sub`` when that is a
    module, else of ``geofl.pkg``.
    """
    modules = {_module_name(p) for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        mod = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        facade = _facade_nodes(tree) if mod == "geofl" else set()
        for node in ast.walk(tree):
            owner = FACADE if id(node) in facade else mod
            deps: set[str] = set()
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "geofl" or node.module.startswith("geofl."):
                    for alias in node.names:
                        sub = f"{node.module}.{alias.name}"
                        deps.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("geofl")}
            graph[owner] |= deps - {owner}
        graph.setdefault(mod, set())
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (found := visit(m)) is not None:
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)) is not None:
            return found
    return None


def test_facade_imports_are_only_the_lazy_ones() -> None:
    graph = _imports()
    assert "geofl.inference.load" in graph[FACADE]
    assert all(LAYERS[_top(d)] == 0 for d in graph["geofl"]), graph["geofl"]


def test_every_package_has_a_layer() -> None:
    tops = {_top(_module_name(p)) for p in ROOT.rglob("*.py")}
    assert tops <= set(LAYERS), f"assign a layer to {sorted(tops - set(LAYERS))}"


def test_imports_point_down_the_layers() -> None:
    upward = sorted(
        f"{mod} (layer {LAYERS[_top(mod)]}) imports {dep} (layer {LAYERS[_top(dep)]})"
        for mod, deps in _imports().items()
        for dep in deps
        if LAYERS[_top(dep)] > LAYERS[_top(mod)]
    )
    assert not upward, "\n".join(upward)


def test_no_import_cycles_between_packages_or_modules() -> None:
    graph = _imports()
    packages: dict[str, set[str]] = defaultdict(set)
    for mod, deps in graph.items():
        packages[_top(mod)] |= {_top(d) for d in deps if _top(d) != _top(mod)}
    assert _cycle(packages) is None, f"package cycle: {' -> '.join(_cycle(packages) or [])}"
    assert _cycle(graph) is None, f"module cycle: {' -> '.join(_cycle(graph) or [])}"


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
