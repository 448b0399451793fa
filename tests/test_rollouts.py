"""Which scenarios a step draws: the same ones on a re-run (so the cache hits), fresh ones for later steps."""

import math

from art_core.envs import load_environment
from art_core.rollouts import reward_summary, scenarios_for_step
from art_core.trajectories import Trajectory, TrajectoryGroup


def test_steps_draw_repeatable_and_then_fresh_scenarios():
    env = load_environment("tic-tac-toe")
    ids = lambda step, seed=0: [s.id for s in scenarios_for_step(env, "train", step, 4, seed)]  # noqa: E731
    assert ids(0) == ids(0) and ids(5) == ids(5)
    assert not set(ids(0)) & set(ids(1)), "a later step must see scenarios not seen yet"
    assert ids(0) != ids(0, seed=1)
    assert len(scenarios_for_step(env, "train", 1000, 4)) == 4


def test_reward_summary_flags_groups_without_spread():
    groups = [
        TrajectoryGroup([Trajectory(reward=1.0), Trajectory(reward=0.0)]),
        TrajectoryGroup([Trajectory(reward=0.5), Trajectory(reward=0.5)]),
    ]
    s = reward_summary(groups)
    assert s["reward"] == 0.5 and s["trajectories"] == 4 and s["groups_without_spread"] == 1
    assert math.isnan(reward_summary([])["reward"])
