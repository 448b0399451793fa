"""art_core's modules import each other without cycles (issue 21).

A cycle between two modules means neither can be read, tested or changed alone, and it only works while
the imports happen in a lucky order. This test reads each module's source (ast, nothing is imported) and
follows every `from art_core... import` / `import art_core...` that runs: at module level and inside
functions too (an import deferred to keep `import art_core` light still ties the two modules together).
Imports under `if TYPE_CHECKING:` are left out: they never run, they only name types for annotations
(ART's API has `Model` and `Backend` name each other). A package's `__init__` is not counted as imported
by its own submodules.

    pytest tests/test_import_cycles.py
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "art_core"

# The two back edges ART's API forces, commented where they stand: ART's `TrajectoryGroup(coroutines)` awaits
# the rollouts it is given, so art_core.trajectories calls art_core.gather from inside a function; and
# `with art.Trajectory() as t:` captures into t, so Trajectory.__enter__ calls art_core.capture the same way.
ALLOWED = {("art_core.trajectories", "art_core.gather"), ("art_core.trajectories", "art_core.capture")}

# Cycles that exist today and are still to be broken, each with what breaks it. The test fails on any
# cycle not listed here, and on an entry that no longer is a cycle (delete it then): the list only shrinks.
# None is left (storage <-> store went when Storage kept the bytes only and ModelStore the whole layout).
KNOWN: set[frozenset[str]] = set()


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _runtime_nodes(tree: ast.Module):
    """Every node, except what sits under `if TYPE_CHECKING:` (annotations only, never run)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _imports(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The art_core modules `name` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from pkg import mod` imports the submodule; `from mod import name` imports mod
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]
        for target in targets:
            while target and target not in modules:  # `import art_core.x.y` also imports art_core.x
                target = target.rpartition(".")[0]
            if target.startswith(PACKAGE) and target != name and (name, target) not in ALLOWED:
                found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), each as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_through(graph, c) for c in components]


def _path_through(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One concrete cycle inside a component, start -> ... -> start, for the failure message."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return component


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_import_cycles_in_art_core():
    cycles = _cycles(import_graph())
    new = [c for c in cycles if frozenset(c) not in KNOWN]
    assert not new, "import cycles in art_core (move the shared names to a module both can import):\n" + "\n".join(
        "  " + " -> ".join(cycle) for cycle in new
    )
    gone = KNOWN - {frozenset(c) for c in cycles}
    assert not gone, f"no longer cycles, delete them from KNOWN: {[sorted(k) for k in gone]}"


def test_the_walk_sees_a_cycle():
    """The checker itself: a made-up two-module cycle is found and printed as a path."""
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set()}
    assert _cycles(graph) == [["a", "b", "a"]]
    typed_only = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import art_core.model\n")
    assert not [
        n for n in _runtime_nodes(typed_only) if isinstance(n, ast.Import) and n.names[0].name == "art_core.model"
    ]
    assert import_graph()["art_core.model"], "art_core.model's imports were not found: the walk is broken"
