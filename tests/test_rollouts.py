"""Which scenarios a step draws: the same ones on a re-run (so the cache hits), fresh ones for later steps;
and with a sampling seed, the same rollouts from the same checkpoint."""

import math

import pytest

from art_core.envs import load_environment
from art_core.envs.base import Scenario
from art_core.rollouts import RolloutSpec, group_seeds, reward_summary, scenarios_for_step, step_sampling
from art_core.trajectories import Trajectory, TrajectoryGroup


def test_steps_draw_repeatable_and_then_fresh_scenarios():
    env = load_environment("tic-tac-toe")
    ids = lambda step, seed=0: [s.id for s in scenarios_for_step(env, "train", step, 4, seed)]  # noqa: E731
    assert ids(0) == ids(0) and ids(5) == ids(5)
    assert not set(ids(0)) & set(ids(1)), "a later step must see scenarios not seen yet"
    assert ids(0) != ids(0, seed=1)
    assert len(scenarios_for_step(env, "train", 1000, 4)) == 4


def test_a_misspelt_rollout_field_is_refused_not_dropped():
    """`options=` is not `env_options=`: silently dropped, the environment would run with its defaults."""
    import pydantic

    with pytest.raises(pydantic.ValidationError, match="options"):
        RolloutSpec(environment="retail", options={"max_turns": 4})
    assert RolloutSpec(environment="retail", env_options={"max_turns": 4}).load_environment().options.max_turns == 4


def test_reward_summary_flags_groups_without_spread():
    groups = [
        TrajectoryGroup([Trajectory(reward=1.0), Trajectory(reward=0.0)]),
        TrajectoryGroup([Trajectory(reward=0.5), Trajectory(reward=0.5)]),
    ]
    s = reward_summary(groups)
    assert s["reward"] == 0.5 and s["trajectories"] == 4 and s["groups_without_spread"] == 1
    assert math.isnan(reward_summary([])["reward"])


def test_seeds_differ_per_step_and_per_group_even_for_a_scenario_drawn_twice():
    a, b = Scenario(id="a"), Scenario(id="b")
    assert group_seeds(None, [a, b]) is None
    seeds = group_seeds(7, [a, b, a])
    assert len(set(seeds)) == 3, "a scenario drawn twice in one step must not replay its first group"
    assert group_seeds(7, [a, b, a]) == seeds and group_seeds(8, [a, b, a]) != seeds
    assert step_sampling({"max_tokens": 8}, 3) == {"max_tokens": 8}
    assert step_sampling({"seed": 7}, 3) == step_sampling({"seed": 7}, 3) != step_sampling({"seed": 7}, 4)


@pytest.mark.vllm
def test_a_seeded_step_rolls_out_the_same_trajectories_again(tmp_path, tiny_model_path, vllm_endpoint):
    """The same step from the same checkpoint, gathered for two models: the same completions, rollout for
    rollout; the rollouts of one group still differ from each other."""
    from art_core.rollouts import RolloutSpec
    from art_core.serving import Endpoint
    from art_core.step import gather_step
    from art_core.store import ModelRef

    endpoint = Endpoint(base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key, base_name=vllm_endpoint.model)
    spec = RolloutSpec(
        environment="art_core.testing.color_quiz",
        groups_per_step=2,
        group_size=8,
        sampling={"max_tokens": 8, "temperature": 1.0, "seed": 0},
    )

    def completions(name: str, spec: RolloutSpec = spec) -> list[list[str]]:
        ref = ModelRef(storage_url=str(tmp_path), project="seeded", model=name, base_model=tiny_model_path)
        gathered = gather_step(ref, spec, 0, "base", lambda rank: endpoint)
        return [[t.messages()[-1]["content"] for t in g.trajectories] for g in ref.store().read_groups(gathered.uri)]

    first = completions("one")
    assert completions("two") == first
    assert all(len(set(group)) > 1 for group in first), first
    other_seed = spec.model_copy(update={"sampling": {**spec.sampling, "seed": 1}})
    assert completions("three", other_seed) != first
