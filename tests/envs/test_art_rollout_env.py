"""The art_rollout environment's refusals, without a server: a rollout path that cannot be imported is named
at load time, and a rollout that made no capturable call fails its episode saying why."""

from __future__ import annotations

import pytest

from art_core.envs import load_environment


async def idle_rollout(model, scenario) -> None:  # an ART-style rollout that never calls the model
    assert model.get_inference_name() == "agent@1" and "options" in scenario


def test_rollout_path_is_checked_when_the_environment_loads():
    with pytest.raises(ValueError, match="'module:function'"):
        load_environment("art_core.envs.art_rollout", rollout="my_pkg.agent")
    with pytest.raises(ValueError, match="no_such_pkg.*cannot be imported"):
        load_environment("art_core.envs.art_rollout", rollout="no_such_pkg.agent:rollout")
    env = load_environment("art_core.envs.art_rollout", scenario_options={"split_sizes": {"train": 3}})
    assert len(env.scenarios("train")) == 3 and env.constrains_sampling


async def test_a_rollout_with_no_captured_call_fails_naming_it():
    env = load_environment("art_core.envs.art_rollout", rollout=f"{__name__}:idle_rollout")
    with pytest.raises(RuntimeError, match="idle_rollout made no chat completion call"):
        await env.rollout(None, "agent@1", env.scenarios("train")[0], max_tokens=4)
