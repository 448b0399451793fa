"""Environments: scenarios, tools and a scored rollout. `load_environment(name, **options)` finds one.

>>> env = load_environment("tic-tac-toe")          # a shipped one
>>> env = load_environment("my_pkg.my_env")         # a module with load_environment(**options)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

from art_core.envs.base import SPLITS, Environment, Scenario, Split

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


__all__ = ["SPLITS", "Environment", "Scenario", "Split", "evaluation_options", "load_environment"]
