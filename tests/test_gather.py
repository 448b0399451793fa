"""gather_trajectory_groups: concurrency, tolerated failures, after_each replacing or dropping groups."""

import asyncio

import pytest

from art_core import TooManyExceptions, Trajectory, TrajectoryGroup, gather_trajectory_groups


async def rollout(reward: float, fail: bool = False, delay: float = 0.0) -> Trajectory:
    await asyncio.sleep(delay)
    if fail:
        raise ValueError(f"rollout {reward} broke")
    return Trajectory(messages_and_choices=[{"role": "user", "content": str(reward)}], reward=reward)


async def test_groups_come_back_in_order_with_all_trajectories():
    groups = await gather_trajectory_groups(
        (TrajectoryGroup(rollout(i + j / 10, delay=0.01 * (3 - i)) for j in range(4)) for i in range(3)),
        pbar_desc=None,
    )
    assert [len(g) for g in groups] == [4, 4, 4]
    assert [g.rewards()[0] for g in groups] == [0.0, 1.0, 2.0]


async def test_rollouts_run_concurrently_up_to_the_limit():
    running, peak = 0, 0

    async def tracked() -> Trajectory:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return Trajectory(reward=1.0)

    await gather_trajectory_groups([[tracked() for _ in range(10)] for _ in range(3)], max_concurrent=7, pbar_desc=None)
    assert peak == 7


async def test_failures_within_max_exceptions_are_kept_in_the_group():
    groups = await gather_trajectory_groups(
        [TrajectoryGroup([rollout(1.0), rollout(0.0, fail=True), rollout(0.5)])], max_exceptions=1, pbar_desc=None
    )
    assert groups[0].rewards() == [1.0, 0.5]
    assert groups[0].exceptions[0].type == "ValueError"
    assert "rollout 0.0 broke" in groups[0].exceptions[0].traceback


async def test_too_many_failures_raise_with_the_first_traceback():
    with pytest.raises(TooManyExceptions, match="first failure: ValueError") as info:
        await gather_trajectory_groups(
            [[rollout(0.0, fail=True), rollout(1.0, fail=True), rollout(2.0)]], max_exceptions=1, pbar_desc=None
        )
    assert isinstance(info.value.__cause__, ValueError)


async def test_rollouts_a_failed_gather_never_started_are_closed_quietly():
    """Otherwise Python warns "coroutine ... was never awaited" for each one, long after the failure."""
    import inspect

    waiting = [rollout(float(i)) for i in range(5)]
    with pytest.raises(TooManyExceptions):
        await gather_trajectory_groups([[rollout(0.0, fail=True)], waiting], max_concurrent=1, pbar_desc=None)
    assert {inspect.getcoroutinestate(c) for c in waiting} == {inspect.CORO_CLOSED}


async def test_fractional_max_exceptions_counts_a_share_of_all_rollouts():
    groups = [[rollout(float(i), fail=(i == 0)) for i in range(10)]]
    out = await gather_trajectory_groups(groups, max_exceptions=0.1, pbar_desc=None)
    assert len(out[0]) == 9
    with pytest.raises(TooManyExceptions):
        await gather_trajectory_groups(
            [[rollout(0.0, fail=True)] + [rollout(1.0) for _ in range(4)]], max_exceptions=0.1, pbar_desc=None
        )


async def test_after_each_can_replace_or_drop_a_group():
    async def keep_rewarded(group: TrajectoryGroup):
        if max(group.rewards()) == 0:
            return None
        return TrajectoryGroup([t.model_copy(update={"reward": t.reward * 10}) for t in group])

    out = await gather_trajectory_groups(
        [[rollout(0.0), rollout(0.0)], [rollout(1.0), rollout(0.0)]], after_each=keep_rewarded, pbar_desc=None
    )
    assert len(out) == 1 and out[0].rewards() == [10.0, 0.0]


async def test_a_rollout_that_returns_something_else_is_refused():
    async def bad():
        return {"reward": 1}

    with pytest.raises(TypeError, match="must return a Trajectory"):
        await gather_trajectory_groups([[bad()]], pbar_desc=None)


async def test_after_each_may_return_a_list_of_groups_which_is_flattened():
    async def split(group):
        return [TrajectoryGroup([t]) for t in group.trajectories]

    out = await gather_trajectory_groups(
        [[rollout(1.0), rollout(2.0)], [rollout(3.0)]], after_each=split, pbar_desc=None
    )
    assert [g.rewards() for g in out] == [[1.0], [2.0], [3.0]]


async def test_progress_bar_ends_with_every_trajectory_and_group_counted(capsys):
    async def slow_judge(group):
        await asyncio.sleep(0.05)  # the judge finishes after the last trajectory
        return group

    groups = [[rollout(float(i), delay=0.01 * i) for _ in range(2)] for i in range(4)]
    await gather_trajectory_groups(groups, after_each=slow_judge, pbar_desc="gather", max_metrics=1)
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "8/8" in last and "groups=4/4" in last and "exceptions=0" in last, last
    assert "total_completion_tokens=0" in last and "reward=" in last


async def test_gather_trajectories_returns_tolerated_exceptions_in_place():
    from art_core import gather_trajectories

    out = await gather_trajectories(
        [rollout(1.0), rollout(0.0, fail=True), rollout(2.0)], max_exceptions=1, pbar_desc=None
    )
    assert out[0].reward == 1.0 and isinstance(out[1], ValueError) and out[2].reward == 2.0
    with pytest.raises(ValueError):
        await gather_trajectories([rollout(0.0, fail=True)], pbar_desc=None)


async def test_a_group_of_coroutines_can_be_awaited_on_its_own():
    group = await TrajectoryGroup(rollout(float(i)) for i in range(3))
    assert sorted(group.rewards()) == [0.0, 1.0, 2.0]


async def test_a_non_finite_reward_fails_its_rollout_naming_it_and_counts_against_max_exceptions(caplog):
    async def scored(reward: float) -> Trajectory:
        return Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}], reward=reward)

    def groups():
        return [
            TrajectoryGroup([scored(1.0), scored(float("nan")), scored(0.0)], metadata={"scenario_id": "train-7"}),
            TrajectoryGroup([scored(0.5), scored(float("-inf"))]),
        ]

    out = await gather_trajectory_groups(groups(), max_exceptions=2, pbar_desc=None)
    assert [g.rewards() for g in out] == [[1.0, 0.0], [0.5]]  # never trained on
    assert out[0].exceptions[0].type == "NonFiniteReward"
    assert out[0].exceptions[0].message == (
        "rollout 1 of group 0 (scenario train-7) returned reward nan: a reward must be a finite number"
    )
    assert out[1].exceptions[0].message.startswith("rollout 1 of group 1 returned reward -inf")
    with pytest.raises(TooManyExceptions, match=r"first failure: NonFiniteReward: rollout 1 of group 0 \(scenario"):
        await gather_trajectory_groups(groups(), max_exceptions=1, pbar_desc=None)


async def test_a_judge_that_scores_nan_fails_that_rollout_too():
    async def nan_judge(group: TrajectoryGroup) -> TrajectoryGroup:
        group.trajectories[0].reward = float("nan")
        return group

    out = await gather_trajectory_groups(
        [[rollout(1.0), rollout(2.0)]], after_each=nan_judge, max_exceptions=1, pbar_desc=None
    )
    assert out[0].rewards() == [2.0] and out[0].exceptions[0].type == "NonFiniteReward"


async def test_text_that_is_not_utf8_in_a_tool_result_is_escaped_counted_and_stored(tmp_path):
    from art_core.store import ModelStore

    async def lists_files() -> Trajectory:
        return Trajectory(
            messages_and_choices=[
                {"role": "user", "content": "list the files"},
                {"role": "tool", "content": "caf\udce9.txt  na\udcefve.md"},  # os.listdir of names with stray bytes
            ],
            reward=1.0,
            logs=["opened caf\udce9.txt"],
        )

    (group,) = await gather_trajectory_groups([[lists_files(), rollout(0.0)]], pbar_desc=None)
    t = group.trajectories[0]
    assert t.messages()[1]["content"] == "caf\\udce9.txt  na\\udcefve.md" and t.logs == ["opened caf\\udce9.txt"]
    assert t.metrics["invalid_utf8_escaped"] == 3 and "invalid_utf8_escaped" not in group.trajectories[1].metrics
    store = ModelStore(str(tmp_path), "demo", "agent")
    store.write_groups(store.trajectories("train", 0), [group])
    assert store.read_groups(store.trajectories("train", 0))[0].trajectories[0] == t


async def test_a_failed_rollout_whose_message_is_not_utf8_is_kept_and_stored(tmp_path):
    from art_core.store import ModelStore

    async def opens() -> Trajectory:
        raise FileNotFoundError("no such file: caf\udce9.txt")

    (group,) = await gather_trajectory_groups([[opens(), rollout(1.0)]], max_exceptions=1, pbar_desc=None)
    assert group.exceptions[0].message == "no such file: caf\\udce9.txt"
    store = ModelStore(str(tmp_path), "demo", "agent")
    store.write_groups(store.trajectories("train", 0), [group])
