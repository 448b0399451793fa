"""The airline customer-service domain (tau-bench style): bookings, changes, bags, cancellations, compensation.

`AIRLINE` bundles the seeded database, tools, customer scenarios and policy; `load_environment` wraps it in the
generic customer-service episode loop:

    >>> env = load_environment(seed=0)              # same as art_core.envs.load_environment("airline")
    >>> from art_core.envs.customer_service.domain import call_tool
    >>> db = AIRLINE.make_db(0)
    >>> call_tool(AIRLINE, db, "list_all_airports", {})[:30]
    '[{"city": "Atlanta", "code": "'
"""

from __future__ import annotations

from typing import Any

from art_core.envs.airline import tools
from art_core.envs.airline.db import make_db
from art_core.envs.airline.scenarios import make_tasks
from art_core.envs.customer_service.domain import Domain
from art_core.envs.customer_service.env import TRAIN_ONLY_OPTIONS, CustomerServiceEnv

AIRLINE = Domain.of_package("airline", __file__, tools, make_db=make_db, make_tasks=make_tasks)
POLICY = AIRLINE.policy


def load_environment(**options: Any):
    """The airline environment: `CustomerServiceEnv(AIRLINE, **options)` (see art_core.envs.customer_service.env)."""
    return CustomerServiceEnv(AIRLINE, **options)


__all__ = ["AIRLINE", "POLICY", "TRAIN_ONLY_OPTIONS", "load_environment"]
