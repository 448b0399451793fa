"""tau2's user simulator: an LLM (any litellm model) playing the customer of a tau2 task.

The prompt follows tau2's layout: simulation guidelines, then the task's `user_scenario` inside
`<scenario>` tags, rendered the way tau2 renders it. The customer ends the conversation with one of tau2's
three signals: ###STOP### (goal reached), ###TRANSFER### (handed to a human), ###OUT-OF-SCOPE### (the
scenario gives nothing more to say). The agent opens with tau2's fixed greeting; the simulator sees the
conversation with roles flipped (the agent's messages as "user"), and never sees tool calls or results.

    >>> from art_core.envs.tau2.data import load_tau2_data
    >>> task = load_tau2_data("retail").tasks["0"]
    >>> user = Tau2User(task, LLMUserSettings(model="openai/gpt-4.1-2025-04-14"))
    >>> first = await user.reply(GREETING)          # the customer's opening message  # doctest: +SKIP
    >>> any(s in first for s in STOP_SIGNALS)                                          # doctest: +SKIP
    False
"""

from __future__ import annotations

import os
from typing import Any

from art_core.envs.customer_service.users import STOP, LLMUserSettings, customer_turn
from art_core.envs.tau2.data import render_scenario

TRANSFER, OUT_OF_SCOPE = "###TRANSFER###", "###OUT-OF-SCOPE###"  # STOP is the customer simulators' own
STOP_SIGNALS = (STOP, TRANSFER, OUT_OF_SCOPE)
GREETING = "Hi! How can I help you today?"  # the agent's first turn in every tau2 conversation

GUIDELINES = f"""# How to play the customer
You are a customer talking to a customer service agent. Play that customer realistically, following the
scenario below to the letter.

## Principles
- Write one message at a time, as the customer would in a chat.
- Do what the scenario tells you. Everything it does not tell you is unknown to you: never invent facts.
- Say things in your own words rather than copying the scenario's text.
- Reveal information step by step: give a detail only when the agent asks for it.

## Ending the conversation
- Keep going until the task in your scenario is done.
- When your goal is reached, write {STOP} to end the conversation.
- If you are transferred to another agent, write {TRANSFER}.
- If the scenario gives you nothing to go on for what the agent now asks, write {OUT_OF_SCOPE}.

Aim for a natural conversation that stays true to the scenario and to the customer's character."""


def default_user_settings() -> LLMUserSettings:
    """tau2's user model and temperature (gpt-4.1 at 0, the v0.1.3 leaderboard's), unless USER_SIM_MODEL says otherwise."""
    return LLMUserSettings(
        model=os.environ.get("USER_SIM_MODEL", "openai/gpt-4.1-2025-04-14"), temperature=0.0, max_tokens=1024
    )


def system_prompt(task: dict[str, Any]) -> str:
    """The simulator's system prompt for one tau2 task."""
    return f"{GUIDELINES}\n\n<scenario>\n{render_scenario(task)}\n</scenario>"


class Tau2User:
    """The customer of one tau2 task, played by an LLM through litellm."""

    def __init__(self, task: dict[str, Any], settings: LLMUserSettings | None = None) -> None:
        self.settings = settings or default_user_settings()
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt(task)}]

    async def reply(self, agent_message: str) -> str:
        """The customer's answer to one agent message (the greeting first)."""
        self.messages.append({"role": "user", "content": agent_message})
        return await customer_turn(self.settings, self.messages)
