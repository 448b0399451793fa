"""`art.trajectory_group(...)` with ART 2026's options: `return_exceptions=True` returns failed rollouts in the
group's exceptions (ART's tests/unit/trajectories/test_capture.py checks the same), without it the first failure
raises as itself, and a keyword it does not know is refused rather than taken as metadata. No server."""

from __future__ import annotations

import asyncio

import pytest

import art_core as art


async def rollout(reward: float = 1.0) -> None:
    await asyncio.sleep(0)
    art.current_trajectory(required=True).reward = reward


async def failed() -> art.Trajectory:
    raise ValueError("boom")


async def test_return_exceptions_keeps_failures_in_the_group() -> None:
    """ART's check, ported with only the import changed."""
    successful = art.trajectory(rollout())
    result = await art.trajectory_group([successful, failed()], return_exceptions=True)
    assert len(result.trajectories) == 1
    assert result.exceptions[0].message == "boom"
    assert result.exceptions[0].type == "ValueError" and "boom" in result.exceptions[0].traceback


async def test_without_return_exceptions_the_failure_raises_as_itself() -> None:
    with pytest.raises(ValueError, match="boom"):
        await art.trajectory_group([art.trajectory(rollout()), failed()])


async def test_a_non_finite_reward_is_a_returned_failure() -> None:
    group = await art.trajectory_group(
        [art.trajectory(rollout(float("nan"))), art.trajectory(rollout(0.5))], return_exceptions=True
    )
    assert [t.reward for t in group.trajectories] == [0.5]
    assert group.exceptions[0].type == "NonFiniteReward"


async def test_in_a_gather_returned_failures_do_not_count_against_max_exceptions() -> None:
    kept, strict = await art.gather_trajectory_groups(
        [
            art.trajectory_group([art.trajectory(rollout()), failed()], return_exceptions=True),
            art.trajectory_group([art.trajectory(rollout()), art.trajectory(rollout())]),
        ],
        max_exceptions=0,
        pbar_desc=None,
    )
    assert len(kept.trajectories) == 1 and len(kept.exceptions) == 1
    assert len(strict.trajectories) == 2 and not strict.exceptions
    with pytest.raises(art.TooManyExceptions):  # a group that did not ask still counts against the gather
        await art.gather_trajectory_groups(
            [art.trajectory_group([art.trajectory(rollout()), failed()])], max_exceptions=0, pbar_desc=None
        )


async def test_metadata_is_a_keyword_of_its_own() -> None:
    group = await art.trajectory_group([art.trajectory(rollout())], metadata={"scenario_id": "s1"})
    assert group.metadata == {"scenario_id": "s1"}


@pytest.mark.parametrize("keyword", ["max_exceptions", "after_each", "pbar_desc", "scenario_id", "return_exception"])
def test_an_unknown_keyword_is_refused(keyword: str) -> None:
    coroutine = rollout()
    with pytest.raises(TypeError, match=keyword):
        art.trajectory_group([coroutine], **{keyword: 1})
    coroutine.close()


def test_a_pending_trajectory_group_refuses_keywords_it_cannot_hold() -> None:
    coroutine = rollout()
    with pytest.raises(TypeError, match="return_exceptions"):
        art.TrajectoryGroup([coroutine], return_exceptions=True)
    coroutine.close()
    assert art.TrajectoryGroup([art.Trajectory()], metadata={"a": 1}).metadata == {"a": 1}
