"""The demo's environment: pick the color out of four words. A task the tiny random model visibly learns.

    >>> env = load_environment()                       # or environment={"name": "art_core.testing.color_quiz"}
    >>> env.scenarios("val")[0].data
    {'options': ['onion', 'red', 'pasta', 'paper'], 'answer': 'red'}
    >>> trajectory = await env.rollout(client, "agent-001@3", env.scenarios("val")[0],   # doctest: +SKIP
    ...                                temperature=1.0)

Each scenario asks "Which of these words is a color?" with one color among three other words, in a
random order; vLLM's structured outputs (`choice`) hold the answer to one of the four words, so the
untrained model picks one at random and scores about 0.25. Reward 1.0 for the color, 0.0 otherwise.

Why this task for the demo: a random-weight model understands no question, but it can learn to prefer a
set of words, and GRPO teaches exactly that from the reward alone. The train, val and test splits hold
different combinations of words and orders, so an evaluation on val measures a preference that
carries over to questions the model never trained on, not memorised answers. The shipped environments
(retail, airline, tau2, 2048, tic-tac-toe) need a real base model to learn in a few steps.

Constrained answers: vLLM reports logprobs after the grammar's mask, so train with
`TrainConfig(old_logprobs="recompute")` (the train flow refuses otherwise).
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from art_core.envs.base import Environment, Scenario, Split, SplitSizes, split_part, turn_sampling
from art_core.trajectories import Trajectory

# Four colors, and other words none of which starts like a color in the tiny model's tokenizer, so the
# answer is settled by its first token and GRPO has one clear thing to learn: raise those four tokens.
COLORS = ("red", "blue", "green", "yellow")
OTHERS = (
    "otter",
    "tiger",
    "horse",
    "eagle",
    "camel",
    "apple",
    "cheese",
    "pasta",
    "onion",
    "lamp",
    "chair",
    "spoon",
    "table",
    "clock",
    "river",
    "cloud",
    "stone",
    "forest",
    "island",
    "piano",
    "violin",
    "drum",
    "flute",
    "paper",
    "pencil",
    "window",
    "rocket",
)
QUESTION = "Which of these words is a color? {options}. Answer with the color only."


class ColorQuizOptions(BaseModel):
    """Options of `load_environment("art_core.testing.color_quiz", **options)`."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="Draws the questions and their split.")
    choices: int = Field(
        4, ge=2, le=8, description="Words per question (one color); the untrained model scores 1/choices."
    )
    split_sizes: SplitSizes = Field(default_factory=lambda: {"train": 400, "val": 100, "test": 100})


class ColorQuizEnv(Environment):
    """Pick the color among `choices` words; see the module docstring."""

    name = "color-quiz"

    def __init__(self, **options: Any) -> None:
        self.options = ColorQuizOptions(**options)
        self._questions = _questions(self.options.seed, self.options.choices, sum(self.options.split_sizes.values()))

    @property
    def constrains_sampling(self) -> bool:
        return True  # answers go through vLLM's `choice` grammar

    def scenarios(self, split: Split) -> list[Scenario]:
        split = self.check_split(split)
        return [
            Scenario(id=f"color-quiz-{split}-{i:04d}", split=split, data=q)
            for i, q in enumerate(split_part(self._questions, split, self.options.split_sizes))
        ]

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Ask the question once; the answer is one of the options (vLLM `choice`), scored 1 if it is the color."""
        sampling, extra_body = turn_sampling(sampling)
        options, answer = scenario.data["options"], scenario.data["answer"]
        extra_body["structured_outputs"] = {"choice": list(options)}
        traj = Trajectory(
            messages_and_choices=[{"role": "user", "content": QUESTION.format(options=", ".join(options))}],
            metadata={"env": self.name, "scenario_id": scenario.id, "split": scenario.split},
        )
        response = await client.chat.completions.create(
            model=model, messages=traj.messages(), logprobs=True, extra_body=extra_body, **sampling
        )
        choice = response.choices[0]
        traj.messages_and_choices.append(choice)
        said = (choice.message.content or "").strip().lower()
        traj.reward = 1.0 if said == answer else 0.0
        traj.metadata["answer"] = said
        traj.metrics.update(correct=said == answer)
        return traj.finish()


def _questions(seed: int, choices: int, count: int) -> list[dict[str, Any]]:
    """`count` distinct questions (distinct word sets), shuffled; the same seed gives the same list."""
    rng = random.Random(f"color-quiz-{seed}")
    seen: set[frozenset[str]] = set()
    out: list[dict[str, Any]] = []
    while len(out) < count:
        color = rng.choice(COLORS)
        words = [color, *rng.sample(OTHERS, choices - 1)]
        if frozenset(words) in seen:
            continue
        seen.add(frozenset(words))
        rng.shuffle(words)
        out.append({"options": words, "answer": color})
    return out


def load_environment(**options: Any) -> ColorQuizEnv:
    """The color quiz (see `ColorQuizOptions` for the options)."""
    return ColorQuizEnv(**options)
