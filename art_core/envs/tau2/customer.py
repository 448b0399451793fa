"""A scripted tau2 customer: plays a tau2 task's `user_scenario` by rules, with no LLM.

tau2-bench's customer is an LLM reading the scenario (`user.Tau2User`). This one is for machines without a
capable model, and for expert demonstrations. **It is a deviation from tau2's protocol**: scores played against
it are not tau2 scores, and reports say so (`published.reference_markdown` names it).

    >>> from art_core.envs import load_environment
    >>> from art_core.envs.tau2.user import GREETING
    >>> env = load_environment("tau2-retail", user="scripted")      # every episode uses it
    >>> user = ScriptedTau2User(env.scenarios("train")[0].data["task"], env.toolset.write_tools)
    >>> user.respond(GREETING)              # `await user.reply(GREETING)` in an episode: the reason for the call
    "I received my order #W2378156 and wish to exchange the mechanical keyboard ..."

What it says comes from the scenario's own text, turned to the first person, and nothing else:
- its opening is the scenario's `reason_for_call` (sentences that tell it to hide something are left out);
- asked who it is (name, email, zip, user id, account), or for an id it knows, it gives its `known_info`, and
  its `unknown_info` when that is what was asked for;
- asked anything else, it gives its `task_instructions` once (its preferences), then restates its request; a
  statement that asks nothing gets "Okay.";
- it says yes to a proposal only when the proposal names the action and every value of a gold write it has not
  yet agreed to (the customer's own user id excepted), as the generated domains' `ScriptedUser` does; any other
  proposal gets a no;
- it ends with ###STOP### once every gold write is agreed and every `communicate_info` was said (on a task with
  neither: once the agent declines), with ###TRANSFER### when told it is being transferred, and gives up after
  `patience` unhelpful agent turns in a row (an agreed write resets the count).

Every reply is checked before it is sent: each token holding a digit (ids, zips, amounts, dates) and each email
must appear in the scenario's text, else `ScenarioLeak` is raised; the customer cannot reveal what the
scenario does not give. Knowing the gold writes (to say yes) and the communicate_info (to know when it is
done) is what a rule-based customer needs in place of an LLM's understanding; it never says them.
"""

from __future__ import annotations

import re
from typing import Any

from art_core.envs.customer_service.domain import Action
from art_core.envs.customer_service.users import (
    CONFIRM_CUES,
    REFUSAL_CUES,
    STOP,
    action_values,
    action_verb,
    normalize,
)
from art_core.envs.tau2.user import TRANSFER

DEVIATION = (
    "scripted customer (rules reading each task's user scenario; tau2 plays the customer with an LLM, "
    "so these are not tau2 scores)"
)
# words in an agent message that ask who the customer is, or for an id the customer may know
IDENTITY_CUES = (
    "name",
    "email",
    "e-mail",
    "zip",
    "postal",
    "user id",
    "user_id",
    "account",
    "identity",
    "verify",
    "authenticate",
    "reservation id",
    "confirmation number",
    "order id",
)
# sentences of the scenario that are stage directions, not things to say
_HIDE = re.compile(r"reveal|do not mention|don't mention|not volunteer|n't volunteer", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_DIGITS = re.compile(r"[^\s,;:()'\"]*\d[^\s,;:()'\"]*")
_PRONOUNS = [
    (r"\b(tells|told|asks|asked|gives|give|offers|offered|let|lets|to|for|with|help|helps) you\b", r"\1 me"),
    (r"\bYou are\b", "I am"),
    (r"\byou are\b", "I am"),
    (r"\bYou're\b", "I'm"),
    (r"\byou're\b", "I'm"),
    (r"\bYou've\b", "I've"),
    (r"\byou've\b", "I've"),
    (r"\bYou'd\b", "I'd"),
    (r"\byou'd\b", "I'd"),
    (r"\bYou'll\b", "I'll"),
    (r"\byou'll\b", "I'll"),
    (r"\bYour\b", "My"),
    (r"\byour\b", "my"),
    (r"\byours\b", "mine"),
    (r"\byourself\b", "myself"),
    (r"\bYou were\b", "I was"),
    (r"\byou were\b", "I was"),
    (r"\bYou\b", "I"),
    (r"\byou\b", "I"),
]


class ScenarioLeak(AssertionError):
    """The customer was about to say a value its scenario does not give (a bug in the customer)."""


def first_person(text: str) -> str:
    """The scenario's second person turned into the customer's own voice.

    >>> first_person("You are Yusuf Rossi. You want to return your kettle if the agent tells you it is allowed.")
    'I am Yusuf Rossi. I want to return my kettle if the agent tells me it is allowed.'
    """
    for pattern, repl in _PRONOUNS:
        text = re.sub(pattern, repl, text)
    return text


def sayable(text: str | None) -> str:
    """The sentences of a scenario field the customer may say (stage directions about hiding left out)."""
    sentences = [s.strip() for s in _SENTENCE.split(text or "") if s.strip() and s.strip() != "."]
    return first_person(" ".join(s for s in sentences if not _HIDE.search(s)))


def leaks(reply: str, scenario_text: str) -> list[str]:
    """Tokens of `reply` holding a digit, and emails, that `scenario_text` does not contain ([] when none).

    >>> leaks("My order is #W123 and my zip is 90210.", "You ordered #W123.")
    ['90210']
    """
    known = scenario_text.lower()
    tokens = _EMAIL.findall(reply) + [t.rstrip(".!?") for t in _DIGITS.findall(_EMAIL.sub(" ", reply))]
    return [t for t in tokens if t and t.lower() not in known]


def scenario_text(task: dict[str, Any]) -> str:
    """All the text of a task's user scenario: what the customer knows."""
    scenario = task["user_scenario"]
    ins = scenario["instructions"]
    parts = [scenario.get("persona") or ""]
    parts += [ins] if isinstance(ins, str) else [str(v) for v in ins.values() if v]
    return "\n".join(parts)


def gold_writes(task: dict[str, Any], write_tools: frozenset[str]) -> list[Action]:
    """The task's gold actions that change the database, as `Action`s."""
    actions = (task.get("evaluation_criteria") or {}).get("actions") or []
    return [Action(name=a["name"], kwargs=a.get("arguments") or {}) for a in actions if a["name"] in write_tools]


class ScriptedTau2User:
    """The scripted customer of one tau2 task (see the module docstring)."""

    def __init__(self, task: dict[str, Any], write_tools: frozenset[str], patience: int = 4) -> None:
        ins = task["user_scenario"]["instructions"]
        if isinstance(ins, str):  # a free-text scenario has no fields to tell apart
            ins = {"reason_for_call": ins}
        self.text = scenario_text(task)
        self.reason = sayable(ins.get("reason_for_call")) or "I need some help."
        self.known = sayable(ins.get("known_info"))
        self.unknown = sayable(ins.get("unknown_info"))
        self.preferences = sayable(ins.get("task_instructions"))
        self.writes = gold_writes(task, write_tools)
        self.outputs = list((task.get("evaluation_criteria") or {}).get("communicate_info") or [])
        self.user_ids = {str(a.kwargs["user_id"]) for a in self.writes if "user_id" in a.kwargs}
        self.patience = patience
        self.confirmed: set[int] = set()
        self.heard: list[str] = []
        self.told_preferences = False
        self.idle = 0
        self.done = False
        self.opened = False

    async def reply(self, agent_message: str) -> str:
        return self.respond(agent_message)

    def respond(self, agent_message: str) -> str:
        """The reply to one agent message (the greeting first), checked against the scenario."""
        text = self._respond(agent_message)
        if bad := leaks(text, self.text):
            raise ScenarioLeak(f"the scripted customer would say {bad}, which its scenario does not give: {text!r}")
        return text

    def _respond(self, agent_message: str) -> str:
        if not self.opened:
            self.opened = True
            return self.reason
        text = normalize(agent_message)
        self.heard.append(text)
        if self.done:
            return STOP
        if "transfer" in text and ("human" in text or "hold on" in text):
            self.done = True
            return TRANSFER
        proposal = any(c in text for c in CONFIRM_CUES)
        if proposal:
            matched = [i for i, a in enumerate(self.writes) if i not in self.confirmed and self._proposes(a, text)]
            if matched:  # the proposal naming the most values is the one meant
                self.confirmed.add(max(matched, key=lambda i: len(action_values(self.writes[i]))))
                self.idle = 0  # patience counts unhelpful turns since the last progress
                return "Yes, please go ahead."
        identity = any(c in text for c in IDENTITY_CUES)
        if self._finished(text, asked=identity):
            self.done = True
            return f"Thank you, that's all I needed. {STOP}"
        if proposal:
            return self._unhelpful("No, that is not what I want. ")
        if identity and (self.known or self.unknown):
            return " ".join(x for x in (self.known, self._unknown_if_asked(text)) if x)
        if "?" not in text:
            return self._unhelpful("", "Okay.")
        if not self.told_preferences and self.preferences:
            self.told_preferences = True
            return self.preferences
        return self._unhelpful("")

    def _unknown_if_asked(self, text: str) -> str:
        words = {w for w in re.findall(r"[a-z]+", self.unknown.lower()) if len(w) > 4}
        return self.unknown if any(w in text for w in words) else ""

    def _proposes(self, action: Action, text: str) -> bool:
        if action_verb(action.name) not in text:
            return False
        return all(any(s in text for s in spellings) for spellings in action_values(action, skip=self.user_ids))

    def _finished(self, text: str, asked: bool) -> bool:
        said = " ".join(self.heard)
        if not self.writes and not self.outputs:
            return not asked and any(c in text for c in REFUSAL_CUES)
        return all(normalize(o) in said for o in self.outputs) and len(self.confirmed) == len(self.writes)

    def _unhelpful(self, prefix: str, reply: str | None = None) -> str:
        self.idle += 1
        if self.idle >= self.patience:
            self.done = True
            return f"This isn't going anywhere, goodbye. {STOP}"
        return reply if reply is not None else prefix + self.reason
