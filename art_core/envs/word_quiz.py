"""A free-text task a small real model can learn: name the word of a category among four, in one word.

    >>> env = load_environment()                  # or environment={"name": "word-quiz"}
    >>> env.scenarios("val")[0].data              # doctest: +SKIP
    {'category': 'fruit', 'options': ['spoon', 'pear', 'river', 'door'], 'answer': 'pear'}

"Which of these words is a fruit: spoon, pear, river, door? Answer with that one word only." Nothing holds
the reply to a grammar: the model writes what it likes, and the reward reads it.

- 1.0: a short reply (at most 3 words: "Pear", "A pear.") that names the answer and no other of the four;
- 0.5: a longer reply whose first named word of the four is the answer ("The answer is pear, not spoon");
- 0.0: otherwise (a wrong word first, or none of the four).

Why this task: SmolLM2-135M-Instruct knows colors, animals and fruits, but at temperature 0.7 it mostly
answers with a sentence about the wrong word (measured: 0.08 mean reward under a stricter rule, 1 exact
answer in 96), so its reward starts low and varies within a group, which is what GRPO needs. The splits
hold different word sets, so a held-out gain is a skill, not memorised answers.
"""

from __future__ import annotations

import random
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from art_core.envs.base import Environment, Scenario, Split, SplitSizes, split_part, turn_sampling
from art_core.trajectories import Trajectory

CATEGORIES = {
    "color": ("red", "blue", "green", "yellow", "purple", "pink", "brown", "black", "white", "gray"),
    "animal": ("dog", "cat", "horse", "tiger", "lion", "rabbit", "mouse", "cow", "sheep", "bear"),
    "fruit": ("apple", "banana", "grape", "lemon", "cherry", "peach", "pear", "mango", "plum", "melon"),
}
# Things that are none of the categories above.
OTHERS = (
    "table",
    "chair",
    "lamp",
    "window",
    "pencil",
    "river",
    "cloud",
    "stone",
    "piano",
    "spoon",
    "clock",
    "paper",
    "bottle",
    "door",
    "shoe",
    "hammer",
    "bridge",
    "candle",
    "mirror",
    "pillow",
    "rocket",
    "violin",
    "basket",
    "ladder",
)
QUESTION = "Which of these words is {article} {category}: {options}? Answer with that one word only."


class WordQuizOptions(BaseModel):
    """Options of `load_environment("word-quiz", **options)`."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="Draws the questions and their split.")
    split_sizes: SplitSizes = Field(default_factory=lambda: {"train": 300, "val": 60, "test": 60})


def words(text: str) -> list[str]:
    """The lowercase words of a reply.

    >>> words('"Pear."')
    ['pear']
    """
    return re.findall(r"[a-z]+", text.lower())


SHORT = 3  # words in a reply that counts as answering with the word


def score(reply: str, options: list[str], answer: str) -> float:
    """1.0 for a short reply naming only the answer, 0.5 when the answer is the first option named, else 0.0.

    >>> score("A pear.", ["spoon", "pear"], "pear"), score("The fruit here is pear, not spoon", ["spoon", "pear"], "pear")
    (1.0, 0.5)
    >>> score("spoon or pear", ["spoon", "pear"], "pear")
    0.0
    """
    said = words(reply)
    named = [w for w in said if w in options]
    if not named or named[0] != answer:
        return 0.0
    return 1.0 if len(said) <= SHORT and set(named) == {answer} else 0.5


class WordQuizEnv(Environment):
    """Name the word of a category among four; see the module docstring."""

    name = "word-quiz"

    def __init__(self, **options: Any) -> None:
        self.options = WordQuizOptions(**options)
        self._questions = _questions(self.options.seed, sum(self.options.split_sizes.values()))

    def scenarios(self, split: Split) -> list[Scenario]:
        split = self.check_split(split)
        return [
            Scenario(id=f"word-quiz-{split}-{i:04d}", split=split, data=q)
            for i, q in enumerate(split_part(self._questions, split, self.options.split_sizes))
        ]

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Ask once, read the free-text reply, score it (see `score`)."""
        sampling, extra_body = turn_sampling(sampling)
        q = scenario.data
        article = "an" if q["category"][0] in "aeiou" else "a"
        question = QUESTION.format(article=article, category=q["category"], options=", ".join(q["options"]))
        traj = Trajectory(
            messages_and_choices=[{"role": "user", "content": question}],
            metadata={"env": self.name, "scenario_id": scenario.id, "split": scenario.split},
        )
        response = await client.chat.completions.create(
            model=model, messages=traj.messages(), logprobs=True, extra_body=extra_body, **sampling
        )
        choice = response.choices[0]
        traj.messages_and_choices.append(choice)
        reply = choice.message.content or ""
        traj.reward = score(reply, q["options"], q["answer"])
        traj.metrics.update(
            short_and_right=traj.reward == 1.0, right_first=traj.reward > 0, reply_words=len(words(reply))
        )
        return traj.finish()


def _questions(seed: int, count: int) -> list[dict[str, Any]]:
    """`count` distinct questions, shuffled; the same seed gives the same list."""
    rng = random.Random(f"word-quiz-{seed}")
    seen: set[tuple[str, frozenset[str]]] = set()
    out: list[dict[str, Any]] = []
    while len(out) < count:
        category = rng.choice(sorted(CATEGORIES))
        answer = rng.choice(CATEGORIES[category])
        options = [answer, *rng.sample(OTHERS, 3)]
        key = (category, frozenset(options))
        if key in seen:
            continue
        seen.add(key)
        rng.shuffle(options)
        out.append({"category": category, "options": options, "answer": answer})
    return out


def load_environment(**options: Any) -> WordQuizEnv:
    """The word quiz (see `WordQuizOptions`)."""
    return WordQuizEnv(**options)
