"""Benchmark: RULER judge prompt tokens per group with the shared beginning sent once vs every trajectory whole.

    python bench/ruler.py                  # about a minute on 2 busy cores; writes bench/results/ruler.txt
    python bench/ruler.py --groups 100 --seed 1

No model and no judge are called: this measures what the judge would be sent. For each of the first N
train tasks of the retail environment, a group of 8 retail-style trajectories is built the way a rollout
would leave it (system = the store's policy, the customer's request, then the agent's turns as sampled
Choices with tool calls whose results come from running the retail tools on a copy of the database).
The 8 attempts are the task's gold actions with varied endings: done right, done without asking the
customer first, a transfer to a human, a wrong argument, giving up, repeated lookups, only part of the
work, asking again for what was already given.

Two ways the attempts can diverge:
- "first agent turn": each attempt words its first reply differently (as sampled rollouts usually do),
  so only the policy and the customer's request are shared;
- "after lookups": all attempts authenticate the customer and look up the order identically, and part
  only at the end.
The judge's prompt (instructions, rubric, tool list, trajectories) is rendered exactly as RULER sends it,
once with the shared beginning sent once and once with every trajectory sent whole, and its tokens are
counted with litellm.token_counter(model="gpt-4o"), i.e. tiktoken's o200k_base bundled with litellm.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "ruler.txt")

from openai.types.chat.chat_completion import Choice  # noqa: E402

from art_core.envs import load_environment  # noqa: E402
from art_core.envs.customer_service.domain import Action, Task, call_tool  # noqa: E402
from art_core.rewards import DEFAULT_RUBRIC  # noqa: E402
from art_core.rewards.render import judge_messages, render_messages, shared_prefix_len  # noqa: E402
from art_core.trajectories import Trajectory  # noqa: E402

ENDINGS = ["gold", "no_confirm", "transfer", "wrong_argument", "gives_up", "redundant", "partial", "asks_again"]
OPENERS = [
    "I can help with that. First, could you tell me your {how}?",
    "Sure! To verify your identity, please give me your {how}.",
    "Happy to help. What is your {how}?",
    "Before we start, I need your {how}, please.",
    "Of course. May I have your {how} to look up your account?",
    "Thanks for reaching out! Please share your {how}.",
    "Let me look into it. Which {how} is on your account?",
    "I'll need to authenticate you first: your {how}?",
]


class Rollout:
    """Builds one trajectory: assistant turns as Choices, tools run on this rollout's own database copy."""

    def __init__(self, env: Any, task: Task, member: int) -> None:
        self.env, self.db, self.member, self.calls = env, copy.deepcopy(env.db), member, 0
        self.traj = Trajectory(
            messages_and_choices=[
                {"role": "system", "content": env.domain.policy},
                {"role": "user", "content": task.request},
            ],
            tools=env.tools(),
        )

    def say(self, text: str) -> None:
        self.traj.messages_and_choices.append(
            Choice.model_validate(
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
            )
        )

    def user(self, text: str) -> None:
        self.traj.messages_and_choices.append({"role": "user", "content": text})

    def call(self, name: str, **kwargs: Any) -> str:
        self.calls += 1
        call_id = f"call_{self.member}_{self.calls}"  # sampled ids differ per rollout, as on a real server
        self.traj.messages_and_choices.append(
            Choice.model_validate(
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": json.dumps(kwargs)},
                            }
                        ],
                    },
                }
            )
        )
        result = call_tool(self.env.domain, self.db, name, kwargs)
        self.traj.messages_and_choices.append({"role": "tool", "tool_call_id": call_id, "content": result})
        return result


def _describe(action: Action) -> str:
    args = ", ".join(f"{k}={v}" for k, v in action.kwargs.items())
    return f"{action.name.replace('_', ' ')} ({args})"


def build_trajectory(env: Any, task: Task, member: int, ending: str, diverge_early: bool) -> Trajectory:
    r = Rollout(env, task, member)
    info = task.known_info
    by_email = "email" in info
    how = "email address" if by_email else "name and zip code"
    r.say(OPENERS[member if diverge_early else 0].format(how=how))
    r.user(f"It's {info['email']}." if by_email else f"I'm {info['name']}, zip {info['zip']}.")
    if by_email:
        user_id = r.call("find_user_id_by_email", email=info["email"])
    else:
        first, last = info["name"].split(" ", 1)
        user_id = r.call("find_user_id_by_name_zip", first_name=first, last_name=last, zip=info["zip"])
    r.call("get_user_details", user_id=user_id)
    order_id = info.get("order_id") or next(
        (a.kwargs["order_id"] for a in task.actions if "order_id" in a.kwargs), None
    )
    if order_id:
        r.call("get_order_details", order_id=order_id)
    outputs = ", ".join(task.outputs)
    plan = "; ".join(_describe(a) for a in task.actions) or "nothing to change"
    if ending in ("gold", "redundant", "partial"):
        if ending == "redundant" and order_id:
            r.call("get_order_details", order_id=order_id)
            r.call("get_user_details", user_id=user_id)
        r.say(f"Here is what I will do: {plan}. Do you confirm (yes/no)?")
        r.user("Yes, please go ahead.")
        for a in task.actions[: 1 if ending == "partial" else None]:
            r.call(a.name, **a.kwargs)
        r.say(f"All done. {outputs}".strip() if ending != "partial" else "I made the first change; anything else?")
    elif ending == "no_confirm":
        for a in task.actions:
            r.call(a.name, **a.kwargs)
        r.say(f"I went ahead and did it: {plan}. {outputs}".strip())
    elif ending == "transfer":
        r.call("transfer_to_human_agents", summary=f"Customer {user_id} asks: {task.request}")
    elif ending == "wrong_argument":
        if task.actions:
            a = task.actions[0]
            r.call(
                a.name,
                **{**a.kwargs, "order_id": "#W0000000"}
                if "order_id" in a.kwargs
                else {**a.kwargs, "user_id": "nobody"},
            )
        r.say("Something went wrong on my side, sorry about that.")
    elif ending == "gives_up":
        r.say("I'm sorry, I can't help with this request.")
    else:  # asks_again
        r.say(f"Could you tell me your {how} again?")
    return r.traj


def count_tokens(messages: list[dict[str, str]]) -> int:
    from art_core.rewards.accounting import import_litellm

    return import_litellm().token_counter(model="gpt-4o", messages=messages)


def measure(env: Any, tasks: list[Task], diverge_early: bool) -> list[dict[str, Any]]:
    rows = []
    for task in tasks:
        group = [build_trajectory(env, task, m, e, diverge_early) for m, e in enumerate(ENDINGS)]
        rendered = [render_messages(t.messages()) for t in group]
        ids = [f"trajectory_{i + 1}" for i in range(len(group))]
        tools = [t.tools for t in group]
        shared = count_tokens(judge_messages(rendered, ids, DEFAULT_RUBRIC, tools, share_prefix=True))
        whole = count_tokens(judge_messages(rendered, ids, DEFAULT_RUBRIC, tools, share_prefix=False))
        rows.append({"task": task.id, "prefix_msgs": shared_prefix_len(rendered), "shared": shared, "whole": whole})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=50, help="retail train tasks, one group of 8 each")
    parser.add_argument("--seed", type=int, default=0, help="retail environment seed")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()

    env = load_environment("retail", seed=args.seed)
    tasks = env.tasks["train"][: args.groups]
    instructions = count_tokens(judge_messages([("x",), ("y",)], ["a", "b"], DEFAULT_RUBRIC)[:1])
    lines = [
        f"RULER judge prompt tokens per group of 8 retail-style trajectories ({len(tasks)} groups: retail seed "
        f"{args.seed}, first {len(tasks)} train tasks; endings: {', '.join(ENDINGS)}).",
        'Tokens: litellm.token_counter(model="gpt-4o") = tiktoken o200k_base, bundled with litellm. The judge',
        f"instructions with the default rubric are {instructions} tokens of each prompt; the tool list is sent once in both.",
        "",
        f"{'attempts diverge at':<22}{'shared msgs':>12}{'prefix once':>13}{'all whole':>11}{'saving':>9}{'min':>7}{'max':>7}",
    ]
    for label, early in (("first agent turn", True), ("after lookups", False)):
        rows = measure(env, tasks, early)
        savings = [1 - r["shared"] / r["whole"] for r in rows]
        shared = statistics.mean(r["shared"] for r in rows)
        whole = statistics.mean(r["whole"] for r in rows)
        lines.append(
            f"{label:<22}{statistics.mean(r['prefix_msgs'] for r in rows):>12.1f}{shared:>13.0f}{whole:>11.0f}"
            f"{1 - shared / whole:>9.1%}{min(savings):>7.1%}{max(savings):>7.1%}"
        )
    lines += [
        "",
        "shared msgs: messages all 8 attempts begin with (mean); prefix once / all whole: mean judge prompt tokens",
        "per group; saving: 1 - prefix once / all whole on the means, min and max over groups.",
    ]
    text = "\n".join(lines)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
