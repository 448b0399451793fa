"""Which step of a model is promoted (the one deploys and users get), kept in `{model}/promoted.json`.

>>> decide(new_reward=0.42, promoted_reward=0.40, min_improvement=0.0)
True
>>> decide(new_reward=0.40, promoted_reward=0.40, min_improvement=0.0)   # a tie keeps the old step
False
"""

from __future__ import annotations

import time
from typing import Any

from art_core.storage import Storage
from art_core.store import ModelStore


def promoted_path(storage: Storage, project: str, name: str) -> str:
    return ModelStore(storage, project, name).path("promoted.json")


def read_promoted(storage: Storage, project: str, name: str) -> dict[str, Any] | None:
    """The promoted step's record ({"step", "reward", "split", "promoted_at"}), or None before any promotion."""
    path = promoted_path(storage, project, name)
    return storage.read_json(path) if storage.exists(path) else None


def promote(storage: Storage, project: str, name: str, step: int, reward: float, split: str) -> dict[str, Any]:
    """Record `step` as promoted, with the reward that earned it; returns the record."""
    record = {"step": step, "reward": reward, "split": split, "promoted_at": time.time()}
    storage.write_json(promoted_path(storage, project, name), record)
    return record


def decide(new_reward: float, promoted_reward: float | None, min_improvement: float = 0.0) -> bool:
    """Promote only a strictly better step (by more than `min_improvement`); anything beats nothing."""
    if promoted_reward is None:
        return True
    return new_reward > promoted_reward + min_improvement
