"""Retail customer service, in the style of tau-bench: an online store's orders, returns and exchanges.

    >>> env = load_environment(seed=0, user="scripted", max_turns=30)
    >>> len(env.scenarios("train")), len(env.scenarios("val")), len(env.scenarios("test"))
    (600, 100, 100)

`RETAIL` is the `Domain` (database generator, tools, schemas, task generator, policy); the
environment is the generic `CustomerServiceEnv` run on it. Options are `CustomerServiceEnv`'s.
"""

from __future__ import annotations

from typing import Any

from art_core.envs.customer_service.domain import Domain
from art_core.envs.customer_service.env import TRAIN_ONLY_OPTIONS, CustomerServiceEnv
from art_core.envs.retail import tools
from art_core.envs.retail.db import make_db
from art_core.envs.retail.scenarios import make_tasks

RETAIL = Domain.of_package("retail", __file__, tools, make_db=make_db, make_tasks=make_tasks)
POLICY = RETAIL.policy


def load_environment(**options: Any):
    """The retail environment; see `CustomerServiceEnv` for the options (seed, user, max_turns, ...)."""
    return CustomerServiceEnv(RETAIL, **options)


__all__ = ["RETAIL", "POLICY", "TRAIN_ONLY_OPTIONS", "load_environment"]
