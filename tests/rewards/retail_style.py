"""Retail-style trajectory groups for RULER's tests: one scenario, varied endings, real Choices."""

from __future__ import annotations

import json
from typing import Any

from openai.types.chat.chat_completion import Choice

from art_core.trajectories import Trajectory, TrajectoryGroup

POLICY = (
    "You are a customer service agent for an online store. Authenticate the user by email or by name "
    "and zip code before anything else. Only pending orders can be cancelled, and only for the reasons "
    "'no longer needed' or 'ordered by mistake'. Before any change to an order, list what you will do "
    "and get the user's explicit yes. Make one tool call at a time."
)
REQUEST = "Hi, I'm mia.garcia@example.com. Please cancel order #W2611340, I ordered it by mistake."
ORDER = {"order_id": "#W2611340", "status": "pending", "items": [{"name": "Desk Lamp", "price": 154.1}]}

# (last assistant text, whether it cancels): varied endings of the same opening, best first.
ENDINGS = [
    ("Done: order #W2611340 is cancelled and $154.10 goes back to your card.", True),
    ("Order #W2611340 is cancelled.", True),
    ("I cancelled it, though I did not ask you to confirm first.", True),
    ("Your order is pending; I can cancel it if you confirm with yes.", False),
    ("I cannot cancel orders, let me transfer you to a human agent.", False),
    ("Sorry, I could not find that order.", False),
    ("Could you tell me your zip code?", False),
    ("Have a nice day!", False),
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in params}},
        },
    }
    for name, desc, params in [
        ("find_user_id_by_email", "Find a user id by email.", ["email"]),
        ("get_order_details", "Status and items of an order.", ["order_id"]),
        ("cancel_pending_order", "Cancel a pending order.", ["order_id", "reason"]),
    ]
]


def tool_call_choice(name: str, args: dict[str, Any], call_id: str, text: str | None = None) -> Choice:
    """An assistant turn as the sampler returns it: a Choice whose message holds one tool call."""
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                ],
            },
        }
    )


def text_choice(text: str) -> Choice:
    return Choice.model_validate(
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
    )


def retail_trajectory(k: int, ending: str, cancels: bool, reward: float = 0.0) -> Trajectory:
    """One rollout: policy, request, lookups by tool, then (maybe) the cancellation and a last reply.

    Tool-call ids differ per rollout (`k`), as they do when a server samples them."""
    msgs: list[Any] = [
        {"role": "system", "content": POLICY},
        {"role": "user", "content": REQUEST},
        tool_call_choice("find_user_id_by_email", {"email": "mia.garcia@example.com"}, f"call_{k}_a"),
        {"role": "tool", "tool_call_id": f"call_{k}_a", "content": "mia_garcia_4516"},
        tool_call_choice("get_order_details", {"order_id": "#W2611340"}, f"call_{k}_b"),
        {"role": "tool", "tool_call_id": f"call_{k}_b", "content": json.dumps(ORDER)},
    ]
    if cancels:
        msgs += [
            tool_call_choice(
                "cancel_pending_order", {"order_id": "#W2611340", "reason": "ordered by mistake"}, f"call_{k}_c"
            ),
            {"role": "tool", "tool_call_id": f"call_{k}_c", "content": json.dumps({**ORDER, "status": "cancelled"})},
        ]
    msgs.append(text_choice(ending))
    return Trajectory(messages_and_choices=msgs, tools=TOOLS, reward=reward)


def retail_group(endings: list[tuple[str, bool]] = ENDINGS, **metadata: Any) -> TrajectoryGroup:
    """A group of retail-style rollouts of one scenario; reward = 1.0 when the order got cancelled."""
    return TrajectoryGroup(
        [retail_trajectory(k, text, cancels, reward=float(cancels)) for k, (text, cancels) in enumerate(endings)],
        metadata=metadata,
    )
