"""Every `from <our module> import name` in the repository names something that exists.

Most of our imports of our own modules sit inside functions (to keep `import art_core` light), so a rename
breaks them only when that function runs: bench/trainer.py kept importing `train_step` after it
became `train_grpo_step`, and its first run on a GPU failed on it. This test reads every Python file of
the repository (ast), imports each of our modules that is named, and checks each imported name is there
(an attribute or a submodule).

    pytest tests/test_imports_resolve.py
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
OURS = ("art_core", "art_pipeline", "deployments")
FOLDERS = ("art_core", "art_pipeline", "tasks", "flows", "deployments", "bench", "scripts", "tests")


def _our_from_imports():
    """(file, line, module, name) for each `from <ours> import name`, in every Python file we keep."""
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    if node.module.split(".")[0] in OURS:
                        for alias in node.names:
                            yield path.relative_to(ROOT), node.lineno, node.module, alias.name


def _has(module, name: str) -> bool:
    try:
        getattr(module, name)
    except AttributeError:
        return False
    except NotImplementedError:  # art_core._unavailable: an ART name we answer with an explanation, on purpose
        return True
    return True


def test_every_import_of_our_modules_names_something_that_exists():
    missing = []
    seen = 0
    for path, line, module, name in _our_from_imports():
        seen += 1
        mod = importlib.import_module(module)
        if name == "*" or _has(mod, name):
            continue
        if hasattr(mod, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None:
            continue  # a submodule of a package, not yet imported
        missing.append(f"{path}:{line}: from {module} import {name}")
    assert seen > 300, f"only {seen} imports found: is the walk reading the repository?"
    assert not missing, "imports of names that do not exist (renamed or removed?):\n" + "\n".join(missing)
