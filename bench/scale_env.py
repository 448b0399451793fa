"""bench/scale.py's environment: free-text answers (no grammar, so the sampler's logprobs are the trainer's
reference and asynchronous steps are allowed) with a reward every sample differs on, so every step trains.

The reward is the share of letters from the first half of the alphabet in the answer: meaningless as a
task, but the tiny random model's answers spread over it, GRPO has a signal in every group, and a step's
training takes real time, which is what overlapping gather and train is measured against.
"""

from __future__ import annotations

from typing import Any

from art_core.envs.base import Environment, Scenario, Split, turn_sampling
from art_core.trajectories import Trajectory


class FirstHalfLetters(Environment):
    name = "first-half-letters"

    def scenarios(self, split: Split) -> list[Scenario]:
        split = self.check_split(split)
        return [Scenario(id=f"{split}-{i}", split=split, data={"n": i}) for i in range(200)]

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        sampling, extra_body = turn_sampling(sampling)
        traj = Trajectory(
            messages_and_choices=[{"role": "user", "content": f"Write a line about the number {scenario.data['n']}."}]
        )
        response = await client.chat.completions.create(
            model=model, messages=traj.messages(), logprobs=True, extra_body=extra_body, **sampling
        )
        choice = response.choices[0]
        traj.messages_and_choices.append(choice)
        letters = [c for c in (choice.message.content or "").lower() if c.isalpha()]
        traj.reward = sum(c <= "m" for c in letters) / len(letters) if letters else 0.0
        return traj.finish()


def load_environment(**options: Any) -> FirstHalfLetters:
    return FirstHalfLetters(**options)
