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

from pathlib import Path
from typing import Any

from art_core.envs.airline.db import make_db
from art_core.envs.airline.scenarios import make_tasks
from art_core.envs.airline.tools import TOOL_SCHEMAS, TOOLS, WRITE_TOOLS
from art_core.envs.customer_service.domain import Domain
from art_core.envs.customer_service.env import TRAIN_ONLY_OPTIONS, CustomerServiceEnv

POLICY = (Path(__file__).parent / "policy.md").read_text()

AIRLINE = Domain(
    name="airline",
    policy=POLICY,
    make_db=make_db,
    tools=TOOLS,
    tool_schemas=TOOL_SCHEMAS,
    make_tasks=make_tasks,
    write_tools=WRITE_TOOLS,
)


def load_environment(**options: Any):
    """The airline environment: `CustomerServiceEnv(AIRLINE, **options)` (see art_core.envs.customer_service.env)."""
    return CustomerServiceEnv(AIRLINE, **options)


__all__ = ["AIRLINE", "POLICY", "TRAIN_ONLY_OPTIONS", "load_environment"]
