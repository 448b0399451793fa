"""Nothing outside art_core/training reaches into the trainer's privates (issue 34).

The trainer's state (the loaded model, its lock, restore and hyperparameters) is used through one public
session (art_core.training.session); SFT once called `trainer._load`, `_restore` and `_LOCK` from beside it,
and every such reach is a second copy of the trainer's rules that drifts. This test reads every Python file
we keep outside art_core/training (ast, nothing is imported) and fails on any use of a `_name` of the
trainer's modules (the session, the GRPO step, the SFT step): `from art_core.training.trainer import _name`,
`trainer._name` where `trainer` is such a module, `art_core.training.trainer._name`, and
`monkeypatch.setattr(trainer, "_name", ...)` (or getattr/setattr). The other training modules (attention,
packing...) are the trainer's parts, not its state, and are left out.

    pytest tests/test_trainer_privates.py
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("art_core", "art_pipeline", "tasks", "flows", "deployments", "bench", "scripts", "tests")
TRAINING = "art_core.training"
TRAINER = {f"{TRAINING}.{name}" for name in ("session", "trainer", "sft")}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def reaches(source: str, filename: str = "<source>") -> list[str]:
    """Each use of a private of the trainer's modules in `source`, as 'line: what'."""
    tree = ast.parse(source, filename)
    modules: set[str] = set(TRAINER)  # names bound to one of the trainer's modules: its dotted names, aliases
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in TRAINER and alias.asname:
                    modules.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in TRAINER:
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == TRAINING:
            for alias in node.names:  # `from art_core.training import trainer`: a module
                if f"{TRAINING}.{alias.name}" in TRAINER:
                    modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = ast.unparse(node.value)
            if owner in modules:
                found.append(f"{node.lineno}: {owner}.{node.attr}")
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            name = ast.unparse(node.func)
            target, attr = node.args[0], node.args[1]
            if (
                name.split(".")[-1] in ("setattr", "getattr", "delattr")
                and isinstance(attr, ast.Constant)
                and isinstance(attr.value, str)
                and _private(attr.value)
                and ast.unparse(target) in modules
            ):
                found.append(f"{node.lineno}: {name}({ast.unparse(target)}, {attr.value!r}, ...)")
    return found


def test_nothing_outside_art_core_training_uses_a_private_of_the_trainer():
    offenders, files = [], 0
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("art_core", "training"):
                continue
            files += 1
            offenders += [f"{rel}:{hit}" for hit in reaches(path.read_text(), str(path))]
    assert files > 200, f"only {files} files read: is the walk reading the repository?"
    assert not offenders, (
        "privates of art_core.training used outside it (use art_core.training.session's public names, or make "
        "what is needed public there):\n" + "\n".join(offenders)
    )


def test_the_walk_sees_each_kind_of_reach():
    """The checker itself: each form is found; public names, dunders and other modules' privates are not."""
    source = "\n".join(
        [
            "from art_core.training.trainer import _load, train_grpo_step",
            "from art_core.training import trainer, attention",
            "import art_core.training.session as session",
            "import art_core.training.session",
            "trainer._LOCK",
            "session._CACHE",
            "art_core.training.session._CACHE",
            "monkeypatch.setattr(trainer, '_run', None)",
            "trainer.train_grpo_step, trainer.__name__, other._private, attention._COMPILED_FLEX",
        ]
    )
    assert [hit.split(": ", 1)[1] for hit in reaches(source)] == [
        "from art_core.training.trainer import _load",
        "trainer._LOCK",
        "session._CACHE",
        "art_core.training.session._CACHE",
        "monkeypatch.setattr(trainer, '_run', ...)",
    ]
