"""Task categories for evaluating a customer-service agent: what a scenario asks of it.

- `write`: the gold actions change the database (cancel, return, book, ...);
- `refuse`: nothing may change and nothing need be said: the policy forbids the request, so the agent must decline;
- `answer`: nothing may change, but the agent must state something (a status, a balance, a fare).

A policy that never acts scores 1.0 on most `refuse` tasks (a polite "I can't" is a correct refusal) and 0 on
`write` tasks, so a headline reward over all tasks flatters it; report rewards per category.

    >>> scenario_category(env.scenarios("val")[0])                          # doctest: +SKIP
    'write'
    >>> mean_by_category(trajectories, scenarios)                           # doctest: +SKIP
    {'write': 0.0, 'refuse': 0.92, 'answer': 0.0}
"""

from __future__ import annotations

from typing import Any, Iterable, Literal

from art_core.envs.base import Scenario
from art_core.envs.customer_service.domain import Task

Category = Literal["write", "refuse", "answer"]
CATEGORIES: tuple[Category, ...] = ("write", "refuse", "answer")


def task_category(task: Task) -> Category:
    """`write` if the task has gold actions, else `answer` if it has outputs, else `refuse`."""
    if task.actions:
        return "write"
    return "answer" if task.outputs else "refuse"


def scenario_category(scenario: Scenario | Task | dict[str, Any]) -> Category:
    """The category of a customer-service scenario (a `Scenario` of retail or airline, its `Task`, or the
    scenario's data dict).

    >>> scenario_category(Task(id="t", user_id="u", request="r", instruction="i", outputs=["12.00"]))
    'answer'
    """
    if isinstance(scenario, Scenario):
        scenario = scenario.data
    if isinstance(scenario, dict):
        scenario = Task.model_validate(scenario["task"])
    return task_category(scenario)


def mean_by_category(rewards: Iterable[float], scenarios: Iterable[Scenario | Task]) -> dict[str, float]:
    """Mean reward per category (categories with no scenario are left out); `rewards` in the scenarios' order.

    >>> t = lambda **k: Task(id="t", user_id="u", request="r", instruction="i", **k)
    >>> mean_by_category([1.0, 0.0, 0.5], [t(), t(outputs=["x"]), t(outputs=["y"])])
    {'refuse': 1.0, 'answer': 0.25}
    """
    sums: dict[str, list[float]] = {}
    for reward, scenario in zip(rewards, scenarios, strict=True):
        sums.setdefault(scenario_category(scenario), []).append(reward)
    return {c: sum(sums[c]) / len(sums[c]) for c in CATEGORIES if c in sums}
