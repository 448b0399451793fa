"""ART's `art.utils.litellm`: a litellm Choice as the openai SDK's Choice, so a trajectory can hold a reply
that came through litellm (ART's auto_rl notebook)."""

from __future__ import annotations

from typing import Any

from openai.types.chat.chat_completion import Choice


def convert_litellm_choice_to_openai(litellm_choice: Any) -> Choice:
    """The same choice (message, tool calls, logprobs, finish reason) as an `openai` Choice.

    >>> convert_litellm_choice_to_openai({"index": 0, "finish_reason": "stop",
    ...     "message": {"role": "assistant", "content": "hi"}}).message.content
    'hi'
    """
    data = litellm_choice if isinstance(litellm_choice, dict) else litellm_choice.model_dump()
    if data.get("message", {}).get("role") != "assistant":
        raise ValueError("convert_litellm_choice_to_openai takes an assistant message's choice")
    data = {**data, "finish_reason": data.get("finish_reason") or "stop"}
    return Choice.model_validate(data)


__all__ = ["convert_litellm_choice_to_openai"]
