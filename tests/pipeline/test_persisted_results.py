"""Cached Prefect results survive an upgrade that adds a field: every pydantic model a persisted task returns is
`Persisted` (a pickle from before the field reads back with its default), so a resumed run after `git pull`
reuses its cached steps instead of failing on the first `model_dump`."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import typing

from prefect import Task
from pydantic import BaseModel

import art_pipeline.tasks
from art_core.persisted import Persisted
from art_core.step import GatherOutcome


def persisted_tasks() -> dict[str, Task]:
    found = {}
    for info in pkgutil.iter_modules(art_pipeline.tasks.__path__, "art_pipeline.tasks."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, Task) and value.persist_result:
                found[value.name] = value
    return found


def test_every_model_a_persisted_task_returns_reads_old_pickles():
    tasks = persisted_tasks()
    assert {"gather_trajectories", "score_groups", "evaluate", "generate_mcp_scenarios"} <= set(tasks)
    models = {}
    for name, t in tasks.items():
        returned = typing.get_type_hints(t.fn).get("return")
        if isinstance(returned, type) and issubclass(returned, BaseModel):
            models[name] = returned
    assert len(models) >= 4, models
    not_persisted = {name: m.__name__ for name, m in models.items() if not issubclass(m, Persisted)}
    assert not not_persisted, f"derive these from art_core.persisted.Persisted: {not_persisted}"


def test_a_gather_outcome_cached_before_a_field_was_added_reads_back_with_its_default():
    outcome = GatherOutcome(
        step=3, uri="file:///runs/0003.jsonl", fingerprint="ab", summary={"reward": 0.5}, reused=False
    )
    del outcome.__dict__["seconds"]  # as a version without `seconds` pickled it
    old = pickle.loads(pickle.dumps(outcome))
    assert old.seconds == 0.0 and old.model_dump()["summary"] == {"reward": 0.5}
