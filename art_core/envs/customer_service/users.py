"""User simulators for customer-service episodes: a deterministic scripted user and an LLM user.

Both speak first with `await user.opening()`, answer each agent message with `await user.reply(text)`,
and end the conversation by putting `STOP` ("###STOP###") in a reply.

    >>> task = Task(id="t1", user_id="ava", request="Please cancel order #W1.", instruction="You are Ava; cancel #W1.",
    ...             known_info={"email": "ava@example.com"})
    >>> user = ScriptedUser(task)                        # for tests: no model, same replies every time
    >>> user = LLMUser(task, LLMUserSettings(model="openai/gpt-4o-mini"))   # any litellm model

The scripted user reveals a fact of `task.known_info` when the agent's message mentions it (by the cue
words in `CUES`, else the key's own words, e.g. "reservation id"), says "yes" to a confirmation only
when the proposal names every value of a not-yet-confirmed gold action together with that action's
verb, declines any other proposal, and stops once every gold action is confirmed and every required
output has been said (or, on a task with neither, once the agent refuses). A customer with a second request
(`task.followups`) asks it once the first is dealt with by the same rule (its writes confirmed and outputs said,
or, where it has neither, the agent refused), and from then on gives that request's facts.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from pydantic import BaseModel, Field, SecretStr

from art_core.envs.customer_service.domain import Action, Task

STOP = "###STOP###"

# known_info key -> words in an agent message that ask for it (matched on lowercased text)
CUES: dict[str, tuple[str, ...]] = {
    "name": ("name",),
    "email": ("email", "e-mail"),
    "zip": ("zip", "postal"),
    "order_id": ("order id", "order number", "which order", "order's id", "id of the order"),
    "reason": ("reason", "why"),
    "items": ("which item", "what item", "which product", "items", "item id"),
    "new_items": (
        "instead",
        "new item",
        "which option",
        "what option",
        "replacement",
        "variant",
        "exchange for",
        "change it to",
    ),
    "payment_method": ("payment", "refund", "pay with", "pay for", "card"),
    "address": ("address",),
}
# how the scripted user says a fact; "{}" is the value
PHRASES: dict[str, str] = {
    "name": "My name is {}.",
    "email": "My email is {}.",
    "zip": "My zip code is {}.",
    "order_id": "The order id is {}.",
    "reason": "The reason: {}.",
    "items": "It's about {}.",
    "new_items": "I'd like {} instead.",
    "payment_method": "Please use {}.",
    "address": "The address is {}.",
}
CONFIRM_CUES = (
    "confirm",
    "proceed",
    "go ahead",
    "shall i",
    "should i",
    "would you like me to",
    "do you want me to",
    "yes/no",
    "(yes",
    "is that correct",
    "is this correct",
)
REFUSAL_CUES = ("cannot", "can't", "can not", "unable", "not able", "not possible", "not allowed", "not eligible")
# a "please confirm" message that uses one of these and names a number proposes a change rather than asks a question
WRITE_VERBS = ("cancel", "return", "exchange", "modify", "update", "swap", "replace", "book", "send", "upgrade")
# leading words of tool names that say nothing about what a write does
_NOT_VERBS = {"modify", "update", "change", "set", "pending", "delivered", "order", "user", "reservation", "get"}


class User(Protocol):
    """What an episode needs from a user simulator."""

    async def opening(self) -> str: ...

    async def reply(self, agent_message: str) -> str: ...


def normalize(text: str) -> str:
    """Lowercase, commas removed: the same normalization the reward uses for outputs."""
    return text.lower().replace(",", "")


def action_values(action: Action, skip: set[str] = frozenset()) -> list[list[str]]:
    """What a proposal must name for `action`: per argument value, the spellings that count.

    >>> action_values(Action(name="cancel_pending_order", kwargs={"order_id": "#W1", "reason": "no longer needed"}))
    [['#w1'], ['no longer needed']]
    """
    out: list[list[str]] = []

    def walk(v: Any) -> None:
        if isinstance(v, bool) or v is None:
            return  # true/false/null cannot be "named" in prose
        if isinstance(v, str):
            if v and v not in skip:
                out.append([normalize(v)])
        elif isinstance(v, (int, float)):
            out.append(sorted({str(v), f"{v:g}", f"{v:.2f}"}))
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk(action.kwargs)
    return out


def action_verb(tool_name: str) -> str:
    """The word a proposal of this tool must use: the first telling word of its name, singular.

    >>> action_verb("cancel_pending_order"), action_verb("modify_pending_order_items"), action_verb("return_delivered_order_items")
    ('cancel', 'item', 'return')
    """
    words = [w for w in tool_name.split("_") if w not in _NOT_VERBS]
    word = words[0] if words else tool_name
    return word[:-1] if word.endswith("s") and not word.endswith("ss") and len(word) > 3 else word


class ScriptedUser:
    """A deterministic customer for tests; see the module docstring for its rules.

    >>> task = Task(id="t1", user_id="ava", request="Please cancel order #W1.", instruction="You are Ava; cancel #W1.",
    ...             known_info={"email": "ava@example.com"})
    >>> user = ScriptedUser(task)
    >>> user.respond("Could you tell me your email?")
    'My email is ava@example.com.'
    """

    def __init__(self, task: Task, patience: int = 3) -> None:
        self.task = task
        self.patience = patience  # unhelpful agent turns tolerated before giving up
        self.confirmed: set[int] = set()
        self.heard: list[str] = []
        self.idle = 0
        self.done = False
        self.part = 0  # the request being dealt with: 0 the opening's, i the i-th of task.followups

    async def opening(self) -> str:
        return self.task.request

    async def reply(self, agent_message: str) -> str:
        return self.respond(agent_message)

    def respond(self, agent_message: str) -> str:
        """The reply to one agent message (synchronous, for tests)."""
        text = normalize(agent_message)
        self.heard.append(text)
        if self.done:
            return STOP
        proposal = any(c in text for c in CONFIRM_CUES)
        if proposal:
            matched = [
                i for i, a in enumerate(self.task.actions) if i not in self.confirmed and self._proposes(a, text)
            ]
            if matched:
                self.confirmed.update(matched)
                return "Yes, please go ahead."
        known = self._known()
        facts = [k for k in known if self._asks_for(k, text)]
        if self._part_done(text, asked=bool(facts)):
            if self.part == len(self.task.followups):
                self.done = True
                return f"Thank you, that's all I needed. {STOP}"
            self.part += 1
            return f"Thank you. The other thing: {self._request()}"
        # "please confirm which items to return" asks for a fact; "please confirm: return item 1234 ..." proposes a write
        names_a_write = any(v in text for v in self._verbs()) and any(ch.isdigit() for ch in text)
        if proposal and (names_a_write or not facts):
            return self._unhelpful("No, that is not what I want. ")
        if facts:
            return " ".join(PHRASES.get(k, "My " + k.replace("_", " ") + " is {}.").format(known[k]) for k in facts)
        return self._unhelpful("I'm not sure what you need from me. ")

    def _verbs(self) -> set[str]:
        return set(WRITE_VERBS) | {action_verb(a.name) for a in self.task.actions}

    def _asks_for(self, key: str, text: str) -> bool:
        return any(c in text for c in CUES.get(key, (key.replace("_", " "),)))

    def _proposes(self, action: Action, text: str) -> bool:
        if action_verb(action.name) not in text:
            return False
        # the customer's own user id is implied by the conversation; everything else must be named
        return all(any(s in text for s in spellings) for spellings in action_values(action, skip={self.task.user_id}))

    def _known(self) -> dict[str, str]:
        """The facts the customer gives now: the task's, with the current request's over them."""
        if self.part == 0:
            return self.task.known_info
        return {**self.task.known_info, **self.task.followups[self.part - 1].known_info}

    def _request(self) -> str:
        return self.task.request if self.part == 0 else self.task.followups[self.part - 1].request

    def _part_done(self, text: str, asked: bool) -> bool:
        """Whether the current request is dealt with: its gold actions confirmed and its outputs said, or, for a
        request with neither, the agent declining it in `text`."""
        actions, outputs = self.task.requests()[self.part]
        if not actions and not outputs:
            # a refusal ends when the agent declines ("I can't find that email, what's your zip?" does not count)
            return not asked and any(c in text for c in REFUSAL_CUES)
        said = " ".join(self.heard)
        return all(normalize(o) in said for o in outputs) and self.confirmed.issuperset(actions)

    def _unhelpful(self, prefix: str) -> str:
        self.idle += 1
        if self.idle >= self.patience:
            self.done = True
            return f"This isn't going anywhere, goodbye. {STOP}"
        return prefix + self._request().removeprefix("Hi! ")


USER_PROMPT = """You play a customer writing to a company's customer service agent in a chat. You are not an \
assistant: you are the person who needs help, and the other side of the chat is the agent.

Who you are and what you want:
{instruction}

How to play:
- Write only the customer's next message: short, plain, one or two sentences.
- Start by saying what you need; give details (identity, order or booking numbers, preferences) only when the \
agent asks for them or they are clearly needed.
- Never make up facts that are not in your situation. If asked something you do not know, say you don't know.
- Use your own words rather than repeating the text above.
- Say yes to a proposed change only if it is exactly what you want; otherwise say no and what you want instead.
- When everything you wanted is done, or the agent says it cannot be done, or you are transferred to a human, \
end the chat by writing {stop} (you may say goodbye before it)."""


class LLMUserSettings(BaseModel):
    """Which model plays the customer, through litellm (any provider or OpenAI-compatible endpoint)."""

    model: str = Field(default_factory=lambda: os.environ.get("USER_SIM_MODEL", "openai/gpt-4o-mini"))
    api_base: str | None = Field(default_factory=lambda: os.environ.get("USER_SIM_API_BASE"))
    api_key: SecretStr | None = None  # None: litellm reads the provider's own variable; never dumped in clear
    temperature: float = 0.0
    max_tokens: int = 256
    completion_kwargs: dict[str, Any] = Field(default_factory=dict)  # anything else litellm.acompletion takes


class LLMUser:
    """A customer played by an LLM from `task.instruction`; ends the chat with STOP."""

    def __init__(self, task: Task, settings: LLMUserSettings | None = None) -> None:
        self.task = task
        self.settings = settings or LLMUserSettings()
        # roles are flipped: the agent speaks as "user" to the simulator, the simulator answers as "assistant"
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": USER_PROMPT.format(instruction=task.instruction, stop=STOP)},
            {"role": "user", "content": "Hello, how can I help you today?"},
        ]

    async def opening(self) -> str:
        return await self._next()

    async def reply(self, agent_message: str) -> str:
        self.messages.append({"role": "user", "content": agent_message})
        return await self._next()

    async def _next(self) -> str:
        return await customer_turn(self.settings, self.messages)


async def customer_turn(settings: LLMUserSettings, messages: list[dict[str, str]]) -> str:
    """The simulated customer's next message through litellm, appended to `messages` (roles flipped: the
    agent speaks as "user" to the simulator). Shared by the tau-style and the tau2 customers.

        text = await customer_turn(LLMUserSettings(model="openai/gpt-4.1"), messages)   # doctest: +SKIP
    """
    from art_core.rewards.accounting import import_litellm

    litellm = import_litellm()  # with the bundled price map: importing litellm never reaches for the network
    s = settings
    response = await litellm.acompletion(
        model=s.model,
        messages=messages,
        api_base=s.api_base,
        api_key=s.api_key.get_secret_value() if s.api_key else None,
        temperature=s.temperature,
        max_tokens=s.max_tokens,
        **s.completion_kwargs,
    )
    text = response.choices[0].message.content or ""
    messages.append({"role": "assistant", "content": text})
    return text
