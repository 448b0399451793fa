"""Agent policies written in code, played through a customer-service environment's own `rollout` as if served.

A policy is a generator: it yields the agent's turns, a `Say` (a message to the customer) or a `Call` (one tool
call), and receives what came back, the customer's reply or the tool's result, as text. It starts from the
customer's opening message and sees nothing else: no task, no database, no gold actions.

    def polite(opening: str) -> Play:
        reply = yield Say("Could you give me your user id?")
        user = yield from call("get_user_details", user_id=reply.split()[-1].rstrip("."))
        ...

    client = PolicyClient(polite)                              # an OpenAI-compatible client for one episode
    trajectory = await env.rollout(client, "polite", scenario)  # the real episode: tools, customer, reward

`PolicyClient` answers each `chat.completions.create` with the policy's next turn as a `Choice`, so the episode
loop, the tools, the scripted customer and the reward are exactly what a served model meets.
`ReplayClient` answers with the assistant turns of a recorded conversation, checking that the environment says
again what it said then. `never_acts` is the baseline that never calls a tool and always declines.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_tool_call import ChatCompletionMessageToolCall, Function

from art_core.envs.base import Environment, Scenario
from art_core.trajectories import Trajectory


@dataclass(frozen=True)
class Say:
    """A message to the customer."""

    text: str


@dataclass(frozen=True)
class Call:
    """One tool call; the arguments as a JSON object."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


Play = Generator["Say | Call", str, None]  # yields the agent's turns, receives what came back as text
Policy = Callable[[str], Play]  # the customer's opening message -> the episode's play


@dataclass(frozen=True)
class PerScenario:
    """A policy in code made for each scenario: tau2's expert, which knows its task's gold actions (tau2's tasks
    are free text no rule can read), is one. `play_policy` and `art_core.evaluate.evaluate_policy` take it
    where they take a `Policy`."""

    make: Callable[[Scenario], Policy]


def policy_for(policy: "Policy | PerScenario", scenario: Scenario) -> Policy:
    """The policy that plays `scenario`: `policy` itself, or the one a `PerScenario` makes for it."""
    return policy.make(scenario) if isinstance(policy, PerScenario) else policy


class CannotDemonstrate(Exception):
    """The policy met something it cannot handle within its rules; the message says what."""


def ask(text: str) -> Generator[Say, str, str]:
    """Say `text` to the customer and return their reply: `reply = yield from ask("Your user id?")`."""
    return (yield Say(text))


def call(name: str, **arguments: Any) -> Generator[Call, str, Any]:
    """Call a tool and return its result parsed from JSON (or the text when it is not JSON); a tool error
    raises `CannotDemonstrate`, since an expert's calls are checked before they are made."""
    text = yield Call(name, arguments)
    if text.startswith("Error:"):
        raise CannotDemonstrate(f"{name} refused: {text}")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


DECLINE = "I'm sorry, but I can't help with that request."


def never_acts(opening: str) -> Play:
    """The do-nothing baseline: no tool call ever, every turn a polite refusal."""
    while True:
        yield Say(DECLINE)


def _completion(turn: Say | Call, n: int, model: str) -> ChatCompletion:
    if isinstance(turn, Call):
        call_ = ChatCompletionMessageToolCall(
            id=f"call_{n}", type="function", function=Function(name=turn.name, arguments=json.dumps(turn.arguments))
        )
        message = ChatCompletionMessage(role="assistant", content=None, tool_calls=[call_])
        finish = "tool_calls"
    else:
        message = ChatCompletionMessage(role="assistant", content=turn.text)
        finish = "stop"
    choice = Choice(index=0, message=message, finish_reason=finish, logprobs=None)
    return ChatCompletion(id=f"policy-{n}", object="chat.completion", created=0, model=model, choices=[choice])


class PolicyClient:
    """An OpenAI-compatible client for one episode whose model is `policy` (see the module docstring)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.play: Play | None = None
        self.turns = 0
        self.chat = self  # client.chat.completions.create(...) lands on create below
        self.completions = self

    async def create(self, *, model: str, messages: list[dict[str, Any]], **_: Any) -> ChatCompletion:
        self.turns += 1
        try:
            if self.play is None:
                self.play = self.policy(messages[-1]["content"])
                turn = next(self.play)
            else:
                turn = self.play.send(messages[-1].get("content") or "")
        except StopIteration:
            raise CannotDemonstrate("the policy had nothing more to say, but the episode went on") from None
        return _completion(turn, self.turns, model)


class ReplayClient:
    """An OpenAI-compatible client that plays back the assistant turns of `messages`, a recorded conversation;
    it raises `ValueError` where the environment's conversation parts from the recording."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.recorded = messages
        self.turns = 0
        self.chat = self
        self.completions = self

    async def create(self, *, model: str, messages: list[dict[str, Any]], **_: Any) -> ChatCompletion:
        self.turns += 1
        n = len(messages)
        if n >= len(self.recorded) or self.recorded[n]["role"] != "assistant":
            raise ValueError(
                f"replay: the episode asks for turn {self.turns}, the recording has no assistant turn there"
            )
        for i, (seen, recorded) in enumerate(zip(messages, self.recorded)):
            if (seen["role"], seen.get("content") or "") != (recorded["role"], recorded.get("content") or ""):
                raise ValueError(f"replay: message {i} differs from the recording: {seen!r} != {recorded!r}")
        m = self.recorded[n]
        if m.get("tool_calls"):
            (tc,) = m["tool_calls"]  # an expert makes one call a turn
            turn: Say | Call = Call(tc["function"]["name"], json.loads(tc["function"]["arguments"]))
        else:
            turn = Say(m["content"])
        return _completion(turn, self.turns, model)


def play_policy(
    env: Environment, scenarios: list[Scenario], policy: "Policy | PerScenario"
) -> list[Trajectory | CannotDemonstrate]:
    """Each scenario played once by `policy` through `env.rollout`, in order: the scored trajectory, or the
    `CannotDemonstrate` the policy raised (any other exception propagates).

    >>> [t.reward for t in play_policy(load_environment("retail"), scenarios[:2], never_acts)]   # doctest: +SKIP
    [0.0, 1.0]
    """

    async def one(scenario: Scenario) -> Trajectory | CannotDemonstrate:
        try:
            return await env.rollout(PolicyClient(policy_for(policy, scenario)), "policy", scenario)
        except CannotDemonstrate as e:
            return e

    async def all_() -> list[Trajectory | CannotDemonstrate]:
        return [await one(s) for s in scenarios]  # CPU only: one at a time is as fast

    return asyncio.run(all_())


def rewards_by_category(env: Environment, scenarios: list[Scenario], policy: Policy) -> dict[str, float]:
    """Mean reward of `policy` per task category (write / refuse / answer) on `scenarios`, each played once.

    >>> rewards_by_category(load_environment("retail"), scenarios, never_acts)   # doctest: +SKIP
    {'write': 0.0, 'refuse': 1.0, 'answer': 0.0}
    """
    from art_core.envs.customer_service.categories import mean_by_category

    results = play_policy(env, scenarios, policy)
    if errors := [r for r in results if isinstance(r, CannotDemonstrate)]:
        raise errors[0]
    return mean_by_category([t.reward for t in results], scenarios)  # type: ignore[union-attr]
