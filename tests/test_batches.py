"""ART's `trajectory_group_batches`: batches of finished groups, in the order they finish; names we cannot serve."""

from __future__ import annotations

import asyncio

import pytest

import art_core as art


async def _rollout(tag: str, delay: float) -> art.Trajectory:
    await asyncio.sleep(delay)
    return art.Trajectory(messages_and_choices=[{"role": "user", "content": tag}], metadata={"tag": tag})


def _groups(delays: list[float]) -> list[art.TrajectoryGroup]:
    return [art.TrajectoryGroup(_rollout(f"g{i}", d) for _ in range(2)) for i, d in enumerate(delays)]


def _tags(batch: list[art.TrajectoryGroup]) -> list[str]:
    return [g.trajectories[0].metadata["tag"] for g in batch]


async def test_batches_come_in_finishing_order_and_skip_resumes():
    batches = [
        sorted(_tags(b)) async for b in art.trajectory_group_batches(_groups([0.3, 0.0, 0.1, 0.0, 0.2]), batch_size=2)
    ]
    assert batches == [["g1", "g3"], ["g2", "g4"], ["g0"]]  # g0 is slow: it does not hold the first batch back
    resumed = [
        _tags(b) async for b in art.trajectory_group_batches(_groups([0, 0, 0, 0]), batch_size=2, skip_batches=1)
    ]
    assert sorted(sum(resumed, [])) == ["g2", "g3"]
    # max_concurrent_batches bounds the groups in flight: with one batch of one, they run one after another.
    one_by_one = [
        _tags(b)
        async for b in art.trajectory_group_batches(_groups([0.2, 0.0]), batch_size=1, max_concurrent_batches=1)
    ]
    assert one_by_one == [["g0"], ["g1"]]


def test_names_we_cannot_serve_say_why():
    with pytest.raises(NotImplementedError, match="W&B's hosted training"):
        art.ServerlessBackend()
    assert art.LocalTrainResult(step=1, metrics={}).step == 1
