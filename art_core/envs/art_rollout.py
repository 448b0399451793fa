"""Train an ART-style rollout as is: `async def rollout(model, scenario)` that makes plain OpenAI calls and sets
`art.current_trajectory().reward`, with no Trajectory built by hand, run by the train flow or `rollouts`.

    environment={"name": "art_core.envs.art_rollout",
                 "options": {"rollout": "my_pkg.agent:rollout", "scenarios": "my_pkg.env"}}

Each episode runs `await art_core.trajectory(rollout(model, scenario.data))`: every chat completion the
rollout makes with `model.openai_client()` lands in the trajectory (art_core.capture). `model` is what ART
rollouts talk to: `openai_client()`, `get_inference_name()`, `name`. The run's sampling settings (the flow
form's `sampling`, e.g. max_tokens) are defaults under each call's own keywords. Scenarios come from another
environment (`scenarios`: its name; `scenario_options`: its options), so a rollout sees `scenario.data`.

The shipped example, `color_quiz_rollout`, is the color quiz (art_core.testing.color_quiz) written ART's way.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from art_core.capture import current_trajectory, trajectory
from art_core.envs.base import Environment, Scenario, Split, turn_sampling
from art_core.trajectories import Trajectory


async def color_quiz_rollout(model: Any, scenario: dict[str, Any]) -> None:
    """An ART-style rollout: one plain chat call, its reward set on the captured trajectory."""
    from art_core.testing.color_quiz import QUESTION

    client = model.openai_client()
    reply = await client.chat.completions.create(
        model=model.get_inference_name(),
        messages=[{"role": "user", "content": QUESTION.format(options=", ".join(scenario["options"]))}],
        extra_body={"structured_outputs": {"choice": list(scenario["options"])}},  # one of the words
    )
    said = (reply.choices[0].message.content or "").strip().lower()
    current_trajectory(required=True).reward = 1.0 if said == scenario["answer"] else 0.0


class ArtRolloutOptions(BaseModel):
    """Options of `load_environment("art_core.envs.art_rollout", **options)`."""

    model_config = ConfigDict(extra="forbid")

    rollout: str = Field(
        "art_core.envs.art_rollout:color_quiz_rollout",
        description="'module:function' of an ART-style `async def rollout(model, scenario)`.",
    )
    scenarios: str = Field("art_core.testing.color_quiz", description="The environment whose scenarios it plays.")
    scenario_options: dict[str, Any] = Field(default_factory=dict, description="That environment's options.")
    constrains_sampling: bool | None = Field(
        None,
        description="Whether the rollout samples through a grammar (then train with old_logprobs="
        "'recompute'); default: what the scenarios' environment says.",
    )


class _ClientWithDefaults:
    """The run's client, with its sampling settings under each chat call's own keywords."""

    def __init__(self, client: Any, defaults: dict[str, Any], extra_body: dict[str, Any]) -> None:
        self._client, self._defaults, self._extra_body = client, defaults, extra_body
        self.chat = self  # client.chat.completions.create(...) lands on create below
        self.completions = self

    async def create(self, **kwargs: Any) -> Any:
        extra_body = {**self._extra_body, **(kwargs.pop("extra_body", None) or {})}
        return await self._client.chat.completions.create(**{**self._defaults, **kwargs, "extra_body": extra_body})

    def __getattr__(self, name: str) -> Any:  # models, completions of other kinds, base_url, ...
        return getattr(self._client, name)


class RolloutModel:
    """What an ART rollout receives as `model` here: the run's client and the step's served name."""

    def __init__(self, client: Any, name: str) -> None:
        self._client, self.name = client, name

    def openai_client(self) -> Any:
        return self._client

    def get_inference_name(self, step: int | None = None) -> str:
        return self.name


def _import(path: str) -> Callable[..., Any]:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"rollout={path!r}: give it as 'module:function' (e.g. 'my_pkg.agent:rollout')")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"rollout={path!r} cannot be imported: {e}") from None


class ArtRolloutEnv(Environment):
    """Scenarios from one environment, played by an ART-style rollout; see the module docstring."""

    def __init__(self, **options: Any) -> None:
        from art_core.envs import load_environment

        self.options = ArtRolloutOptions(**options)
        self._rollout = _import(self.options.rollout)
        self._source = load_environment(self.options.scenarios, **self.options.scenario_options)
        self.name = f"art-rollout:{self.options.rollout.rpartition(':')[2]}"

    @property
    def constrains_sampling(self) -> bool:
        if self.options.constrains_sampling is not None:
            return self.options.constrains_sampling
        return bool(getattr(self._source, "constrains_sampling", False))

    def scenarios(self, split: Split) -> list[Scenario]:
        return self._source.scenarios(split)

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Run the ART rollout inside `trajectory(...)`; a rollout that made no captured call is an error."""
        defaults, extra_body = turn_sampling(sampling)
        target = RolloutModel(_ClientWithDefaults(client, defaults, extra_body), model)
        traj = await trajectory(self._rollout(target, scenario.data))
        if not traj.messages_and_choices:
            raise RuntimeError(
                f"{self.options.rollout} made no chat completion call that could be captured (calls "
                "must go through an openai client, not streaming, outside no_capture())"
            )
        traj.metadata.update(env=self.name, scenario_id=scenario.id, split=scenario.split)
        return traj


def load_environment(**options: Any) -> ArtRolloutEnv:
    """An ART-style rollout over another environment's scenarios (see `ArtRolloutOptions`)."""
    return ArtRolloutEnv(**options)
