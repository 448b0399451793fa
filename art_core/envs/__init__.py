"""Environments: scenarios, tools and a scored rollout. `load_environment(name, **options)` finds one.

>>> env = load_environment("tic-tac-toe")          # a shipped one
>>> env = load_environment("my_pkg.my_env")         # a module with load_environment(**options)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from art_core.envs.base import SPLITS, Environment, Scenario, Split

if TYPE_CHECKING:
    from pathlib import Path

# name -> module exposing load_environment(**options); imported only when asked for
SHIPPED = {
    "retail": "art_core.envs.retail",
    "airline": "art_core.envs.airline",
    "2048": "art_core.envs.game_2048",
    "tic-tac-toe": "art_core.envs.tictactoe",
    "word-quiz": "art_core.envs.word_quiz",  # free text, for a small real model (SmolLM2-135M)
    "price-lookup": "art_core.envs.price_lookup",  # a tool call, then an answer, for a small real model
    "tau2-retail": "art_core.envs.tau2.retail",  # tau2-bench's own data (the [tau2] extra)
    "tau2-airline": "art_core.envs.tau2.airline",
    "mcp": "art_core.envs.mcp",  # any MCP server: options command=[...] or url=... (the `mcp` SDK)
}


def load_environment(name: str, **options: Any) -> Environment:
    """Return the environment called `name` (a shipped name or an importable module path)."""
    module_name = SHIPPED.get(name, name)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if name in SHIPPED or e.name != module_name:
            raise
        raise ValueError(
            f"unknown environment {name!r}: use one of {', '.join(SHIPPED)} or an importable module "
            "that defines load_environment(**options)"
        ) from None
    loader = getattr(module, "load_environment", None)
    if loader is None:
        raise ValueError(f"module {module_name!r} has no load_environment(**options) function")
    return loader(**options)


def evaluation_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """`options` less those that shape only training rewards, which the environment's module lists in
    `TRAIN_ONLY_OPTIONS`: what an evaluation of `name` plays with (`Environment.for_evaluation` drops the same),
    so a pipeline's evaluation cache is one for every training-reward choice. Imports the module, builds nothing.

    >>> evaluation_options("retail", {"seed": 0, "train_reward": "progress"})
    {'seed': 0}
    """
    module = importlib.import_module(SHIPPED.get(name, name))
    drop = set(getattr(module, "TRAIN_ONLY_OPTIONS", ()))
    return {k: v for k, v in options.items() if k not in drop}


def environment_fingerprint(name: str) -> str:
    """A digest of the code an environment's episodes run: for a shipped one, every source file of art_core.envs
    (the parts they share included: the episode loop, the customers, the tools); for a module of yours, its
    package's files (or its one file). The pipeline keys cached evaluations on it, so an edited environment is
    evaluated again instead of being answered with the old report. What it cannot see (an MCP server's code, a
    file the environment reads from elsewhere) is not in it.

    >>> len(environment_fingerprint("retail"))
    12
    """
    import importlib.util
    from pathlib import Path

    if name in SHIPPED:
        root = Path(__file__).resolve().parent
    else:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ValueError(f"unknown environment {name!r}: use one of {', '.join(SHIPPED)} or an importable module")
        origin = Path(spec.origin).resolve()
        root = origin.parent if origin.name == "__init__.py" else origin
    return source_digest([root], root.parent)


def source_digest(roots: list[Path], base: Path) -> str:
    """12 hex digits of the source under `roots` (files, or folders: their .py, .md and .json files), each file
    hashed with its path relative to `base`: the digest the pipeline keys cached environment work on."""
    import hashlib

    digest = hashlib.sha256()
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in (".py", ".md", ".json"))
        for path in files:
            digest.update(path.relative_to(base).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


__all__ = [
    "SPLITS",
    "Environment",
    "Scenario",
    "Split",
    "environment_fingerprint",
    "evaluation_options",
    "load_environment",
    "source_digest",
]
