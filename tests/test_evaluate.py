"""pass^k and the evaluation summary: the figures a user compares steps by."""

import pytest

from art_core.evaluate import pass_hat_k, eval_report
from art_core.trajectories import RolloutError, Trajectory, TrajectoryGroup


def test_pass_hat_k_is_the_chance_that_k_draws_all_succeed():
    assert pass_hat_k(3, 4, 1) == 0.75
    assert pass_hat_k(3, 4, 2) == 0.5  # C(3,2)/C(4,2) = 3/6
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(3, 4, 4) == 0.0
    with pytest.raises(ValueError, match="k <= attempts"):
        pass_hat_k(1, 2, 3)


def _group(scenario, rewards, failed=0):
    errors = [RolloutError(type="RuntimeError", message="boom", traceback="") for _ in range(failed)]
    return TrajectoryGroup(
        [Trajectory(reward=r) for r in rewards], exceptions=errors, metadata={"scenario_id": scenario}
    )


def test_summarize_averages_over_scenarios_and_counts_failures_as_misses():
    groups = [_group("a", [1.0, 1.0, 0.0, 1.0]), _group("b", [1.0, 0.0], failed=2)]
    report = eval_report(groups, model="agent@3", step=3, split="val", trials=4)
    assert report.reward == pytest.approx(4 / 6)
    assert report.pass_k[1] == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert report.pass_k[2] == pytest.approx((3 / 6 + 0 / 6) / 2)
    assert report.per_scenario == {"a": [1.0, 1.0, 0.0, 1.0], "b": [1.0, 0.0]}


def test_success_threshold_decides_what_passes():
    groups = [_group("a", [0.5, 0.5])]
    assert eval_report(groups, model="m", step=0, split="val", trials=2).pass_k[1] == 0.0
    assert eval_report(groups, model="m", step=0, split="val", trials=2, success_threshold=0.5).pass_k[1] == 1.0
