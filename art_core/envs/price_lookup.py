"""A multi-turn tool task a small real model can learn: look an item's price up, then say it.

    >>> env = load_environment()                  # or environment={"name": "price-lookup"}
    >>> env.tools()[0]["function"]["name"]
    'lookup_price'

A customer asks what an item costs. The store's prices are in a small database that only the
`lookup_price(item)` tool reads, drawn anew for every scenario, so the model cannot know or memorise them: turn 1 is the tool call, turn 2 the
answer written after reading the tool's result. The answer decides the reward:

- 1.0: the answer states the item's price (the number, with or without "$");
- 0.0: otherwise (a wrong item looked up, a number the database does not hold, or no price at all).

The metrics say where an episode went wrong: `right_item` (the call named the asked item), `price_said`.

Turn 1 is held to a well-formed call of `lookup_price` with an item of the catalogue (vLLM structured
outputs, `force_call=True`, the default): a 135M model rarely writes a `<tool_call>` by itself, and the
skill to learn is which item to look up and what to do with the result. Train such runs with
`TrainConfig(old_logprobs="recompute")` (vLLM reports logprobs after the grammar's mask; the train flow
says so). Turn 2 is free text. The tools reach the prompt through the chat template; a template that
ignores them is refused (art_core.chat_template).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from art_core.envs.base import Environment, Scenario, Split, SplitSizes, split_part, turn_sampling
from art_core.envs.tool_use.forced_calls import max_match_tokens, tool_call_regex
from art_core.envs.tool_use.tools import function_schema
from art_core.trajectories import Trajectory

# Sixteen items: the catalogue is listed in the tool's schema, so every prompt (and every trained sequence)
# carries it; on 2 cores a train step's time grows with it (30 items: about 85 s a step of 32 rollouts).
ITEMS = (
    "lamp",
    "chair",
    "pillow",
    "kettle",
    "toaster",
    "mirror",
    "candle",
    "basket",
    "ladder",
    "hammer",
    "umbrella",
    "backpack",
    "teapot",
    "clock",
    "towel",
    "wallet",
)
QUESTION = "How much does the {item} cost? Look it up with the lookup_price tool, then tell me the price."


class PriceLookupOptions(BaseModel):
    """Options of `load_environment("price-lookup", **options)`."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="Draws each scenario's prices and which item it asks about.")
    force_call: bool = Field(True, description="Hold turn 1 to a well-formed lookup_price call (structured outputs).")
    answer_tokens: int = Field(32, ge=8, description="Most tokens of the answer (turn 2).")
    split_sizes: SplitSizes = Field(default_factory=lambda: {"train": 150, "val": 40, "test": 40})


def prices(key: str) -> dict[str, int]:
    """A catalogue: item -> price in whole dollars (5-99), drawn per scenario so no price can be memorised.

    >>> prices("a") == prices("a") != prices("b")
    True
    """
    rng = random.Random(f"price-lookup-prices-{key}")
    return {item: rng.randint(5, 99) for item in ITEMS}


def states_price(answer: str, price: int) -> bool:
    """Whether the answer states this price as a number of its own.

    >>> states_price("The lamp costs $37.", 37), states_price("It is 370 dollars", 37)
    (True, False)
    """
    return re.search(rf"(?<![0-9.]){price}(?![0-9])", answer) is not None


class PriceLookupEnv(Environment):
    """Look the price up with the tool, then state it; see the module docstring."""

    name = "price-lookup"

    def __init__(self, **options: Any) -> None:
        self.options = PriceLookupOptions(**options)

    @property
    def constrains_sampling(self) -> bool:
        return self.options.force_call

    def tools(self) -> list[dict[str, Any]]:
        item = {"type": "string", "enum": sorted(ITEMS), "description": "The item's name, as the customer said it."}
        return [function_schema("lookup_price", "Look up what an item of the store costs, in dollars.", {"item": item})]

    def scenarios(self, split: Split) -> list[Scenario]:
        split = self.check_split(split)
        rng = random.Random(f"price-lookup-{self.options.seed}")
        asked = [rng.choice(ITEMS) for _ in range(sum(self.options.split_sizes.values()))]
        return [
            Scenario(
                id=f"price-lookup-{split}-{i:04d}",
                split=split,
                data={"item": item, "prices": prices(f"{self.options.seed}-{split}-{i}")},
            )
            for i, item in enumerate(split_part(asked, split, self.options.split_sizes))
        ]

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Turn 1: the lookup call; the tool answers from the catalogue; turn 2: the answer, scored."""
        sampling, extra_body = turn_sampling(sampling)
        item, catalogue = scenario.data["item"], scenario.data["prices"]
        tools = self.tools()
        traj = Trajectory(
            messages_and_choices=[{"role": "user", "content": QUESTION.format(item=item)}],
            tools=tools,
            metadata={"env": self.name, "scenario_id": scenario.id, "split": scenario.split},
        )
        call_body, call_sampling = dict(extra_body), dict(sampling)
        if self.options.force_call:
            regex = tool_call_regex(tools)
            call_body["structured_outputs"] = {"regex": regex}
            if call_sampling.get("max_tokens"):  # room for the whole call, however the model spells it
                call_sampling["max_tokens"] = max(call_sampling["max_tokens"], max_match_tokens(regex))
        first = await client.chat.completions.create(
            model=model, messages=traj.messages(), tools=tools, logprobs=True, extra_body=call_body, **call_sampling
        )
        choice = first.choices[0]
        traj.messages_and_choices.append(choice)
        calls = choice.message.tool_calls or []
        looked_up = None
        if calls:
            try:
                looked_up = json.loads(calls[0].function.arguments).get("item")
            except (ValueError, AttributeError):
                looked_up = None
            result = (
                {"item": looked_up, "price": f"${catalogue[looked_up]}"}
                if looked_up in catalogue
                else {"error": f"no item called {looked_up!r}"}
            )
            traj.messages_and_choices.append(
                {"role": "tool", "tool_call_id": calls[0].id, "content": json.dumps(result)}
            )
        answer = ""
        if calls:
            turn2 = {
                **sampling,
                "max_tokens": min(sampling.get("max_tokens") or self.options.answer_tokens, self.options.answer_tokens),
            }
            second = await client.chat.completions.create(
                model=model, messages=traj.messages(), tools=tools, logprobs=True, extra_body=extra_body, **turn2
            )
            traj.messages_and_choices.append(second.choices[0])
            answer = second.choices[0].message.content or ""
        said = states_price(answer, catalogue[item])
        traj.reward = 1.0 if said else 0.0
        traj.metrics.update(right_item=looked_up == item, price_said=said, called=bool(calls))
        traj.metadata["looked_up"] = looked_up
        return traj.finish()


def load_environment(**options: Any) -> PriceLookupEnv:
    """The price lookup task (see `PriceLookupOptions`)."""
    return PriceLookupEnv(**options)
