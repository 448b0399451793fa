"""A cached evaluation stands for the environment's code as it is: an edited environment is evaluated again.

Found when retail's scripted customer changed (it now asks a second request): the evaluate tasks were cached on
their inputs and their own source, so a re-run after the edit would have been answered with the old report.
"""

from __future__ import annotations

import sys
import textwrap

from prefect import flow

from art_core.envs import environment_fingerprint
from art_core.rollouts import RolloutSpec
from art_pipeline.tasks import evaluate_never_acts, result_storage_for, with_result_storage

ENV = """
from art_core.envs.base import Environment, Scenario
from art_core.trajectories import Trajectory

REWARD = {reward}


class Edited(Environment):
    name = "edited"

    def scenarios(self, split):
        return [Scenario(id=f"{{split}}-{{i}}", split=split) for i in range(2)]

    async def rollout(self, client, model, scenario, **sampling):
        question = {{"role": "user", "content": "Can you help?"}}
        reply = await client.chat.completions.create(model=model, messages=[question])
        return Trajectory(messages_and_choices=[question, reply.choices[0]], reward=REWARD)


def load_environment(**options):
    return Edited()
"""


def test_an_edited_environment_is_evaluated_again_and_an_unchanged_one_comes_from_the_cache(
    prefect_api, tmp_path, monkeypatch
):
    package = tmp_path / "code" / "edited_env"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(ENV.format(reward=0.25)))
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    storage = str(tmp_path / "runs")
    rollout = RolloutSpec(environment="edited_env")

    @flow
    def never_acts_twice() -> list:
        task = with_result_storage(evaluate_never_acts, result_storage_for(storage))
        return [task(storage, "p", rollout, "val", 2, 1, 1.0, return_state=True) for _ in range(2)]

    first, again = never_acts_twice()
    assert first.result().reward == 0.25 and not first.name == "Cached"
    assert again.name == "Cached" and again.result().reward == 0.25  # nothing changed: the cache answers

    before = environment_fingerprint("edited_env")
    (package / "__init__.py").write_text(textwrap.dedent(ENV.format(reward=0.75)))  # the reward is fixed
    monkeypatch.delitem(sys.modules, "edited_env")  # the next load reads the edited file
    assert environment_fingerprint("edited_env") != before
    edited, cached = never_acts_twice()
    assert edited.name != "Cached" and edited.result().reward == 0.75
    assert cached.name == "Cached" and cached.result().reward == 0.75
