"""The one tool-using episode loop: the agent model calls tools and talks to a customer until a stop rule fires.

    >>> rules = Rules(stop_signals=("###STOP###",), max_turns=30)
    >>> episode = await run_episode(client, "agent@3", traj, sampling, extra_body,   # doctest: +SKIP
    ...                             call_tool=call, customer=user.reply, rules=rules)
    >>> episode.stop_reason, episode.turns, episode.tool_errors                     # doctest: +SKIP

`traj` arrives holding the opening messages (system prompt, and the customer's first message or the task) and
the tools; the loop appends to it. Each turn the agent model is called once with the tools, and the returned
`Choice` is kept as it is (its sampled token ids and logprobs are what the trainer trains on). Its tool calls
(the server's parsed `tool_calls`, else Hermes-style `<tool_call>` blocks in the text: a server without a tool
parser, or a test model forced by `forced_calls`) go to `call_tool`, one `tool` message each; a reply without a
call goes to `customer`, whose answer is the next user message, or, with no customer, is the final answer.

The hooks are what the environments differ in:
- `call_tool(name, arguments) -> (text, is_error)`: the tools (a database, an MCP server); mistakes come back
  as `Error: ...` text, see `tools.run_tool`;
- `customer(agent_text) -> reply`: a simulated customer, or None when the first reply without a tool call ends it;
- `rules`: the stop signals (texts by which the customer ends the conversation, in the opening message or any
  reply) and the limits (turns, messages, failed calls, a reply cut by max_tokens, terminal tools);
- a conversation that outgrows the model's context on the way (the server refuses the next call with its 400)
  ends as "context_full", scored like any other cut-off episode, rather than failing the rollout and with it
  the gather; the same refusal of the first call (the opening alone, or with max_tokens, is too long) is raised.
- scoring is the caller's: it reads the returned `Episode` (stop reason, counts, what the customer was told).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from art_core.trajectories import Trajectory

if TYPE_CHECKING:
    from openai.types.chat.chat_completion import Choice

WRITES_WITHOUT_YES = "writes_without_yes"  # the trajectory metric of `Episode.writes_without_yes` (evaluate reads it)

CallTool = Callable[[str, str], Awaitable[tuple[str, bool]]]  # (name, JSON arguments) -> (text, is_error)
Customer = Callable[[str], Awaitable[str]]  # what the agent said -> the customer's reply

_CALL_IN_TEXT = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class Rules:
    """When an episode ends: properly by a customer's stop signal, else cut off by a limit (None: no such limit)."""

    stop_signals: tuple[str, ...] = ()  # a customer message holding one of these ends it: "user_stop"
    max_turns: int | None = None  # agent turns (model calls): "max_turns"
    max_steps: int | None = None  # messages as tau2 counts them, the opening ones after the system prompt included,
    # then each agent turn, each turn's batch of tool results and each customer reply: "max_steps"
    max_errors: int | None = None  # failed tool calls: "too_many_errors"
    stop_at_length: bool = True  # a reply cut by max_tokens ends it: "max_tokens"
    terminal_tools: frozenset[str] = frozenset()  # a call to one of these ends it, later calls of the turn unrun
    write_tools: frozenset[str] = frozenset()  # counted as `writes` when they succeed


@dataclass
class Episode:
    """How an episode went: why it ended and what was counted on the way."""

    stop_reason: str  # user_stop, answered, terminal_tool, max_turns, max_steps, max_tokens, too_many_errors,
    # context_full
    turns: int = 0
    steps: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    writes: int = 0
    writes_without_yes: int = 0  # successful writes the customer's last reply had not agreed to (`agrees`)
    said: list[str] = field(default_factory=list)  # the agent's replies without tool calls, in order

    def counts(self) -> dict[str, int]:
        """The tool counts as trajectory metrics."""
        return {
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
            "writes": self.writes,
            WRITES_WITHOUT_YES: self.writes_without_yes,
        }


_AGREES = re.compile(r"\W*(yes|yeah|yep|sure|ok|okay|go ahead|please do|please go ahead|confirm|confirmed|correct)\b")


def agrees(reply: str) -> bool:
    """Whether a customer's reply opens with agreement ("Yes, please go ahead.", "Sure", "OK, do it"): the consent
    a policy asks for before a write. Task rewards check the database, not consent, so this is counted apart.

    >>> agrees("Yes, please go ahead."), agrees("No, that is not what I want."), agrees("Okay, do it")
    (True, False, True)
    """
    return _AGREES.match(reply.lower()) is not None


async def run_episode(
    client: Any,
    model: str,
    traj: Trajectory,
    sampling: dict[str, Any],
    extra_body: dict[str, Any],
    *,
    call_tool: CallTool,
    customer: Customer | None = None,
    rules: Rules = Rules(),
) -> Episode:
    """Play the episode that `traj` opens with `model` served by `client` (an `openai.AsyncOpenAI`); `sampling` and
    `extra_body` are one chat call's (see `base.turn_sampling`; logprobs are asked for unless `sampling` says
    logprobs=False). Appends every turn to `traj`."""

    def stops(text: str) -> bool:
        return any(s in text for s in rules.stop_signals)

    opening = traj.messages()[-1]
    ep = Episode(stop_reason="", steps=sum(m["role"] != "system" for m in traj.messages()))
    agreed = False  # the customer's last reply agreed, and no write has used that yes yet
    stop = "user_stop" if opening["role"] == "user" and stops(opening.get("content") or "") else None
    while stop is None:
        if rules.max_turns is not None and ep.turns >= rules.max_turns:
            stop = "max_turns"
            break
        if rules.max_steps is not None and ep.steps >= rules.max_steps:
            stop = "max_steps"
            break
        try:
            completion = await client.chat.completions.create(
                model=model,
                messages=traj.messages(),
                tools=traj.tools,
                extra_body=extra_body or None,
                **{"logprobs": True, **sampling},
            )
        except Exception as error:
            if ep.turns == 0 or not context_full(error):
                raise  # an opening that alone outgrows the context is the run's settings at fault: say so loudly
            stop = "context_full"  # the conversation so far is the episode; no call was made this turn
            break
        ep.turns += 1
        choice = completion.choices[0]
        traj.messages_and_choices.append(choice)
        ep.steps += 1
        if rules.stop_at_length and choice.finish_reason == "length":
            stop = "max_tokens"  # a cut call or reply: nothing usable to act on
            break
        calls = tool_calls(choice, ep.turns)
        if calls:
            for call_id, name, arguments in calls:
                text, error = await call_tool(name, arguments)
                ep.tool_calls += 1
                ep.tool_errors += error
                if name in rules.write_tools and not error:
                    ep.writes += 1
                    ep.writes_without_yes += not agreed
                    agreed = False  # one yes, one write
                traj.messages_and_choices.append({"role": "tool", "tool_call_id": call_id, "content": text})
                if name in rules.terminal_tools:
                    stop = "terminal_tool"
                    break
            ep.steps += 1
            if stop is None and rules.max_errors is not None and ep.tool_errors >= rules.max_errors:
                stop = "too_many_errors"
            continue
        text = choice.message.content or ""
        ep.said.append(text)
        if customer is None:
            stop = "answered"
            break
        answer = await customer(text)
        agreed = agrees(answer)
        traj.messages_and_choices.append({"role": "user", "content": answer})
        ep.steps += 1
        if stops(answer):
            stop = "user_stop"
    ep.stop_reason = stop
    return ep


def context_full(error: BaseException) -> bool:
    """Whether `error` is the server's refusal of a conversation longer than the model's context: vLLM answers
    HTTP 400 naming the "maximum context length", for a prompt that alone is too long and for one that leaves
    no room for max_tokens."""
    return getattr(error, "status_code", None) == 400 and "maximum context length" in str(error)


def tool_calls(choice: Choice, turn: int) -> list[tuple[str, str, str]]:
    """(id, name, JSON arguments) of each call: the server's parsed `tool_calls`, else Hermes-style
    `<tool_call>{...}</tool_call>` blocks in the content (a server started without a tool parser)."""
    msg = choice.message
    if msg.tool_calls:
        return [(tc.id, tc.function.name, tc.function.arguments) for tc in msg.tool_calls]
    out = []
    for k, block in enumerate(_CALL_IN_TEXT.findall(msg.content or "")):
        try:
            call = json.loads(block)
            name, arguments = call["name"], json.dumps(call.get("arguments", {}))
        except (json.JSONDecodeError, KeyError, TypeError):
            name, arguments = "<unparseable tool call>", block  # comes back to the agent as an error
        out.append((f"call_{turn}_{k}", str(name), arguments))
    return out
