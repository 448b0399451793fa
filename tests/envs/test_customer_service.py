"""The customer-service environment over a generated domain, the scripted and LLM users, and forced tool calls.

Loop tests talk to `fake_chat_server` (tests/envs/conftest.py), a scripted OpenAI-compatible peer on
127.0.0.1; the tests marked `vllm` run the same loop against the tiny model served by vLLM.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import pytest
from openai import AsyncOpenAI
from openai.types.chat.chat_completion import Choice

from art_core.envs.customer_service.domain import Followup, Action, Task
from art_core.envs.customer_service.env import CustomerServiceEnv
from art_core.envs.customer_service.users import STOP, LLMUser, LLMUserSettings, ScriptedUser, action_verb
from art_core.envs.retail import RETAIL
from art_core.envs.tool_use.forced_calls import tool_call_regex
from art_core.trajectories import Trajectory


@pytest.fixture(scope="module")
def env():
    return CustomerServiceEnv(RETAIL, seed=0, max_turns=12)


def find(env, split: str, pred):
    return next(s for s in env.scenarios(split) if pred(Task.model_validate(s.data["task"])))


def single(name: str):
    return lambda t: len(t.actions) == 1 and t.actions[0].name == name and not t.outputs and "email" in t.known_info


def cancel_task() -> Task:
    return Task(
        id="t1",
        user_id="ava_lopez_1234",
        request="Hi! I'd like to cancel an order.",
        instruction="...",
        known_info={
            "name": "Ava Lopez",
            "email": "ava@example.com",
            "order_id": "#W1234567",
            "reason": "no longer needed",
        },
        actions=[Action(name="cancel_pending_order", kwargs={"order_id": "#W1234567", "reason": "no longer needed"})],
    )


# ---- the scripted user ----


def test_scripted_user_reveals_what_it_is_asked_and_only_that():
    user = ScriptedUser(cancel_task())
    assert user.respond("Could you tell me your email?") == "My email is ava@example.com."
    reply = user.respond("Thanks. Which order, and what's the reason for cancelling? Please give the order id.")
    assert "#W1234567" in reply and "no longer needed" in reply and "ava@" not in reply
    assert user.respond("What is your zip code?").startswith("I'm not sure")  # a fact it does not have


def test_scripted_user_confirms_only_the_gold_action():
    user = ScriptedUser(cancel_task(), patience=5)  # each refused proposal uses up some patience
    assert user.respond("Shall I cancel order #W7654321 because it is no longer needed? (yes/no)").startswith("No")
    assert user.respond("Shall I cancel order #W1234567 because you ordered it by mistake?").startswith("No")
    assert user.respond("Shall I return order #W1234567 because it is no longer needed?").startswith("No")  # wrong verb
    assert not user.confirmed
    assert (
        user.respond("To confirm: cancel order #W1234567, reason: no longer needed. Shall I proceed?")
        == "Yes, please go ahead."
    )
    assert user.confirmed == {0}
    assert user.respond("Your order has been cancelled.").endswith(STOP)


def test_scripted_user_on_refusal_and_output_tasks_and_patience():
    refusal = cancel_task().model_copy(update={"actions": []})
    user = ScriptedUser(refusal)
    assert user.respond("Sorry, I can't find that account; could you give me your name?") == "My name is Ava Lopez."
    assert user.respond("Please confirm: cancel order #W1234567 for the reason no longer needed?").startswith("No")
    assert user.respond("I'm sorry, but a delivered order cannot be cancelled.").endswith(STOP)

    info = cancel_task().model_copy(update={"actions": [], "outputs": ["54.20"]})
    user = ScriptedUser(info)
    assert STOP not in user.respond("Let me check that for you.")
    assert user.respond("Your refund will be $54.20.").endswith(STOP)

    user = ScriptedUser(cancel_task(), patience=2)
    assert STOP not in user.respond("The weather is nice.")
    assert user.respond("I like turtles.").endswith(STOP)


def test_scripted_user_with_two_requests_asks_the_second_once_the_first_is_dealt_with():
    """The opening says a second request will follow; it comes once the first's write is confirmed (or, where the
    first must be refused, once the agent declines it), with its own facts; the chat ends after both."""
    first = cancel_task()
    returned = Action(
        name="return_delivered_order_items",
        kwargs={"order_id": "#W7654321", "item_ids": ["1111"], "payment_method_id": "gift_card_1"},
    )
    two = first.model_copy(
        update={
            "request": "Hi! I'd like to cancel an order. And I have a second thing to sort out after that.",
            "actions": [*first.actions, returned],
            "outputs": ["54.20"],
            "followups": [
                Followup(
                    request="I'd like to return some things I received.",
                    known_info={"order_id": "#W7654321", "payment_method": "my gift card (gift_card_1)"},
                    actions=1,
                    outputs=["54.20"],
                )
            ],
        }
    )
    user = ScriptedUser(two)
    assert user.respond("Which order id?") == "The order id is #W1234567."
    assert user.respond("What else can I do?").startswith("I'm not sure")  # not before the first is dealt with
    assert user.respond("Cancel order #W1234567, reason: no longer needed. Shall I proceed?") == "Yes, please go ahead."
    assert (
        user.respond("Done: it is cancelled.")
        == "Thank you. The other thing: I'd like to return some things I received."
    )
    assert user.respond("Which order id? Which payment method for the refund?") == (
        "The order id is #W7654321. Please use my gift card (gift_card_1)."
    )
    assert user.respond("What is your email?") == "My email is ava@example.com."  # who they are stays known
    assert user.respond("Return item 1111 of order #W7654321 to gift_card_1. Shall I proceed?").startswith("Yes")
    assert STOP not in user.respond("Done.")  # the second request's output is not said yet
    assert user.respond("Your refund is 54.20.").endswith(STOP)

    refused_first = two.model_copy(update={"actions": [returned]})  # the cancel must be declined
    user = ScriptedUser(refused_first)
    assert user.respond("Shall I cancel order #W1234567 (reason: no longer needed)?").startswith("No")
    assert user.respond("I'm sorry, a delivered order cannot be cancelled.").startswith("Thank you. The other thing")
    assert user.confirmed == set()


def test_action_verbs_tell_writes_apart():
    names = [
        "cancel_pending_order",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
    ]
    assert [action_verb(n) for n in names] == ["cancel", "address", "item", "payment", "return", "exchange"]


# ---- episodes against the fake peer ----


async def test_episode_solves_a_cancel_task_and_keeps_choices(env, fake_chat_server):
    scenario = find(env, "train", single("cancel_pending_order"))
    task = Task.model_validate(scenario.data["task"])
    a = task.actions[0].kwargs
    f = fake_chat_server
    f.script(
        "agent",
        [
            f.say("Hello! Could you tell me your email?"),
            f.tool_call("find_user_id_by_email", {"email": task.known_info["email"]}),
            f.say("Which order id, and what's the reason?"),
            f.tool_call("get_order_details", {"order_id": a["order_id"]}),
            f.say(f"To confirm: cancel order {a['order_id']} because it is {a['reason']}. Shall I proceed (yes/no)?"),
            f.tool_call("cancel_pending_order", a),
            f.say("Done: your order is cancelled."),
        ],
    )
    client = AsyncOpenAI(base_url=f.base_url, api_key="test")
    traj = await env.rollout(client, "agent", scenario, temperature=0.7, max_tokens=64)

    assert traj.reward == 1.0 and traj.metrics["r_actions"] == 1.0 and traj.metrics["r_outputs"] == 1.0
    assert traj.metadata["task_id"] == task.id and traj.metadata["stop_reason"] == "user_stop"
    assert traj.metrics["turns"] == 7 and traj.metrics["writes"] == 1 and traj.metrics["tool_errors"] == 0
    items = traj.messages_and_choices
    assert items[0] == {"role": "system", "content": RETAIL.policy} and items[1]["content"] == task.request
    choices = [m for m in items if isinstance(m, Choice)]
    assert len(choices) == 7 and all(c.logprobs.content[0].token.startswith("token_id:") for c in choices)
    tool_msgs = [m for m in items if isinstance(m, dict) and m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == [
        c.message.tool_calls[0].id for c in choices if c.message.tool_calls
    ]
    assert items[-1]["role"] == "user" and items[-1]["content"].endswith(STOP)
    # what was sent: the conversation so far, the tools, and the sampling knobs for training
    first, last = f.requests[0], f.requests[-1]
    assert (
        first["tools"] == RETAIL.tool_schemas
        and first["logprobs"] is True
        and first["return_tokens_as_token_ids"] is True
    )
    assert first["temperature"] == 0.7 and first["max_tokens"] == 64 and "structured_outputs" not in first
    assert [m["role"] for m in last["messages"]][:3] == ["system", "user", "assistant"] and len(last["messages"]) == 14
    # the trajectory survives a JSONL round trip with its choices
    again = Trajectory.model_validate_json(traj.model_dump_json())
    assert len(again.choices()) == 7 and again.reward == 1.0


def oracle_turns(f, task: Task) -> list[dict]:
    """A perfect agent's turns for `task`: identify, then per request (the opening's, then each followup) propose
    each gold write with all its values, run it, and report (or decline a request without writes or outputs)."""
    k = task.known_info
    lookup = (
        ("find_user_id_by_email", {"email": k["email"]})
        if "email" in k
        else (
            "find_user_id_by_name_zip",
            {"first_name": k["name"].split()[0], "last_name": k["name"].split()[1], "zip": k["zip"]},
        )
    )
    turns = [f.say("Hello! Could you give me your email, or your name and zip code?"), f.tool_call(*lookup)]
    for indices, outputs in task.requests():
        actions = [task.actions[i] for i in indices]
        for a in actions:
            values = (
                " ".join(str(v) for v in a.kwargs.values() if not isinstance(v, list))
                + " "
                + " ".join(x for v in a.kwargs.values() if isinstance(v, list) for x in v)
            )
            turns += [
                f.say(f"To confirm, I will {a.name.replace('_', ' ')}: {values}. Shall I proceed?"),
                f.tool_call(a.name, a.kwargs),
            ]
        closing = (
            "All done. " + " ".join(outputs) if actions or outputs else "Sorry, I cannot do that under our policy."
        )
        turns.append(f.say(closing))
    return turns


async def test_a_perfect_agent_scores_one_on_every_kind_of_task(env, fake_chat_server):
    f = fake_chat_server
    kinds: dict[tuple, Task] = {}
    for scenario in env.scenarios("val"):
        task = Task.model_validate(scenario.data["task"])
        kinds.setdefault((tuple(a.name for a in task.actions), bool(task.outputs), len(task.followups)), scenario)
    assert len(kinds) >= 10 and any(kind[2] for kind in kinds)  # customers with two requests among them
    client = AsyncOpenAI(base_url=f.base_url, api_key="test")
    for i, scenario in enumerate(kinds.values()):
        task = Task.model_validate(scenario.data["task"])
        f.script(f"oracle-{i}", oracle_turns(f, task))
        traj = await env.rollout(client, f"oracle-{i}", scenario)
        assert traj.reward == 1.0 and traj.metadata["stop_reason"] == "user_stop", (task.id, traj.messages()[-3:])
        assert traj.metrics["writes"] == len(task.actions) and not f.queues[f"oracle-{i}"]


async def test_episode_write_without_the_right_arguments_scores_zero(env, fake_chat_server):
    scenario = find(env, "val", single("cancel_pending_order"))
    task = Task.model_validate(scenario.data["task"])
    a = task.actions[0].kwargs
    other = "ordered by mistake" if a["reason"] == "no longer needed" else "no longer needed"
    f = fake_chat_server
    f.script(
        "agent",
        [
            f.tool_call("cancel_pending_order", {**a, "reason": other}),  # acts without asking, with the wrong reason
            f.say("Your order has been cancelled."),
            f.say("Anything else?"),
            f.say("Goodbye."),
        ],
    )
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
    assert traj.reward == 0.0 and traj.metrics["r_actions"] == 0.0 and traj.metrics["writes"] == 1
    assert traj.metrics["writes_without_yes"] == 1  # it never asked: the write is counted as made without consent
    assert traj.metadata["stop_reason"] == "user_stop"  # the scripted user gave up after 3 unhelpful turns


async def test_the_consented_progress_reward_pays_no_write_credit_for_a_write_made_without_a_yes(fake_chat_server):
    """train_reward="consented_progress": the same right write scores 1/3 less when the agent made it without the
    customer's yes than when it asked first; "progress" pays both alike. Evaluation splits keep the task reward."""
    f = fake_chat_server
    env = CustomerServiceEnv(RETAIL, seed=0, max_turns=12, train_reward="consented_progress")
    client = AsyncOpenAI(base_url=f.base_url, api_key="test")
    scenario = find(env, "train", single("cancel_pending_order"))
    task = Task.model_validate(scenario.data["task"])
    asked = oracle_turns(f, task)  # identifies, proposes the cancel with its values, waits for the yes, cancels
    f.script("asks", asked)
    # the same turns with the proposal left out; a customer who was not asked may need a few more turns to leave
    unasked = [t for t in asked if "Shall I proceed?" not in json.dumps(t)] + [f.say("Anything else?")] * 4
    f.script("acts", unasked)
    by_yes = {}
    for name in ("asks", "acts"):
        traj = await env.rollout(client, name, scenario)
        assert traj.metrics["task_reward"] == 1.0 and traj.metrics["writes"] == 1  # the database is right either way
        by_yes[name] = traj
    assert by_yes["asks"].metrics["writes_without_yes"] == 0 and by_yes["acts"].metrics["writes_without_yes"] == 1
    assert by_yes["asks"].reward == by_yes["asks"].metrics["consented_progress"] == 1.0
    assert by_yes["acts"].metrics["progress"] == 1.0  # "progress" cannot tell the two apart
    assert by_yes["acts"].reward == by_yes["acts"].metrics["consented_progress"] == pytest.approx(2 / 3)

    val = find(env, "val", single("cancel_pending_order"))
    on_val = [t for t in oracle_turns(f, Task.model_validate(val.data["task"])) if "Shall I" not in json.dumps(t)]
    f.script("acts-on-val", on_val + [f.say("Anything else?")] * 4)
    traj = await env.rollout(client, "acts-on-val", val)
    assert traj.reward == traj.metrics["task_reward"] == 1.0  # evaluation reads the task reward, consent or not


async def test_episode_bad_tool_calls_come_back_as_errors(env, fake_chat_server):
    scenario = env.scenarios("test")[0]
    f = fake_chat_server
    f.script(
        "agent",
        [
            f.tool_call("get_order_details", "{not json"),
            f.tool_call("get_order_details", '["#W1"]'),
            f.tool_call("get_order_details", {"order_id": 12}),
            f.tool_call("launch_rocket", {}),
            f.tool_call("transfer_to_human_agents", {"summary": "customer wants help"}),
        ],
    )
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
    results = [m["content"] for m in traj.messages_and_choices if isinstance(m, dict) and m["role"] == "tool"]
    assert [r.startswith("Error") for r in results] == [True, True, True, True, False]
    assert "not valid JSON" in results[0] and "JSON object" in results[1] and "unknown tool" in results[3]
    assert traj.metadata["stop_reason"] == "terminal_tool" and traj.metrics["tool_errors"] == 4
    assert len(f.requests) == 5  # the transfer ended the episode: no further model call


async def test_episode_stops_after_max_turns(fake_chat_server):
    env = CustomerServiceEnv(RETAIL, max_turns=2)
    f = fake_chat_server
    f.script("agent", [f.tool_call("list_all_product_types", {}), f.tool_call("list_all_product_types", {})])
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", env.scenarios("train")[1])
    assert (
        traj.metadata["stop_reason"] == "max_turns" and traj.metrics["truncated"] is True and traj.metrics["turns"] == 2
    )


async def test_force_tool_calls_sends_a_regex_and_parses_calls_from_content(fake_chat_server):
    env = CustomerServiceEnv(RETAIL, force_tool_calls=True, max_turns=1)
    f = fake_chat_server
    # a server without a tool parser returns the forced text as content
    f.script(
        "agent",
        [f.say('<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W0000001"}}\n</tool_call>')],
    )
    traj = await env.rollout(
        AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", env.scenarios("train")[0], extra_body={"top_k": 5}
    )
    body = f.requests[0]
    assert body["structured_outputs"] == {"regex": tool_call_regex(RETAIL.tool_schemas)} and body["top_k"] == 5
    assert traj.messages_and_choices[-1] == {
        "role": "tool",
        "tool_call_id": "call_1_0",
        "content": "Error: order #W0000001 not found (order ids look like #W1234567)",
    }


def test_tool_call_regex_admits_only_well_formed_calls():
    r = re.compile(tool_call_regex(RETAIL.tool_schemas))
    call = lambda name, args: "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"  # noqa: E731
    assert r.fullmatch(call("cancel_pending_order", {"order_id": "#W1234567", "reason": "no longer needed"}))
    assert r.fullmatch(
        call(
            "return_delivered_order_items", {"order_id": "#W1", "item_ids": ["1", "2"], "payment_method_id": "paypal_1"}
        )
    )
    assert r.fullmatch(call("list_all_product_types", {}))
    assert not r.fullmatch(call("launch_rocket", {}))
    assert not r.fullmatch(call("cancel_pending_order", {"order_id": "#W1"}))  # a required argument missing
    assert not r.fullmatch(call("get_order_details", {"order_id": 12}))  # wrong type
    assert not r.fullmatch(call("get_order_details", {"order_id": "x" * 40}))  # too long to be forced
    assert not r.fullmatch(call("get_order_details", {"order_id": 'a"b'}))


async def test_llm_user_plays_through_litellm(fake_chat_server):
    task = cancel_task()
    f = fake_chat_server
    f.script("user-sim", [f.say("Hi, I need to cancel an order."), f.say(f"Great, thanks! {STOP}")])
    user = LLMUser(task, LLMUserSettings(model="openai/user-sim", api_base=f.base_url, api_key="test", temperature=0.3))
    assert await user.opening() == "Hi, I need to cancel an order."
    assert (await user.reply("Your order is cancelled.")).endswith(STOP)
    sent = f.requests[-1]
    assert sent["model"] == "user-sim" and sent["temperature"] == 0.3
    assert sent["messages"][0]["role"] == "system" and task.instruction in sent["messages"][0]["content"]
    # roles are flipped for the simulator: the agent speaks as "user", the customer as "assistant"
    assert [m["role"] for m in sent["messages"][1:]] == ["user", "assistant", "user"]
    assert sent["messages"][-1]["content"] == "Your order is cancelled."


async def test_episode_with_the_llm_user(fake_chat_server):
    f = fake_chat_server
    env = CustomerServiceEnv(RETAIL, user=LLMUserSettings(model="openai/user-sim", api_base=f.base_url, api_key="test"))
    scenario = env.scenarios("train")[2]
    f.script("user-sim", [f.say("Hello, I need help with an order."), f.say(f"Never mind then. {STOP}")])
    f.script("agent", [f.say("I'm afraid I can't help with that.")])
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
    assert [m["content"] for m in traj.messages() if m["role"] == "user"] == [
        "Hello, I need help with an order.",
        f"Never mind then. {STOP}",
    ]
    assert traj.metadata["stop_reason"] == "user_stop" and [r["model"] for r in f.requests] == [
        "user-sim",
        "agent",
        "user-sim",
    ]


def test_options_pick_the_user_simulator():
    task = cancel_task()
    assert isinstance(CustomerServiceEnv(RETAIL).make_user(task), ScriptedUser)
    llm = CustomerServiceEnv(RETAIL, user={"model": "openai/x", "api_base": "http://127.0.0.1:9/v1"}).make_user(task)
    assert isinstance(llm, LLMUser) and llm.settings.model == "openai/x"
    assert isinstance(CustomerServiceEnv(RETAIL, user="llm").make_user(task), LLMUser)
    with pytest.raises(ValueError):
        CustomerServiceEnv(RETAIL, user="human")


# ---- against the tiny model served by vLLM ----


def _compact(domain):
    """The tiny test model has a 4096-token context and a 4k-word tokenizer, in which the full retail
    policy and schemas take about 4.6k tokens: keep one policy line and drop the schemas' descriptions."""
    schemas = copy.deepcopy(domain.tool_schemas)
    for s in schemas:
        s["function"].pop("description", None)
        for p in s["function"]["parameters"]["properties"].values():
            p.pop("description", None)
    return dataclasses.replace(
        domain,
        policy="You are the store's support agent: identify the customer, confirm before changes.",
        tool_schemas=schemas,
    )


def _client(ep) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key)


@pytest.mark.vllm
async def test_forced_episode_against_the_tiny_model(vllm_endpoint):
    env = CustomerServiceEnv(_compact(RETAIL), seed=0, user="scripted", force_tool_calls=True, max_turns=4)
    traj = await env.rollout(
        _client(vllm_endpoint), vllm_endpoint.model, env.scenarios("test")[0], temperature=1.0, max_tokens=256
    )
    choices = traj.choices()
    assert 1 <= len(choices) <= 4 and traj.metadata["stop_reason"] in ("terminal_tool", "max_turns")
    for c in choices:  # every turn is a parsed, well-formed call with its sampled token ids
        assert c.message.tool_calls or "<tool_call>" in (c.message.content or "")
        assert c.logprobs.content and all(t.token.startswith("token_id:") for t in c.logprobs.content)
    assert traj.metrics["tool_calls"] == len(choices)
    assert not any(
        "not valid JSON" in m["content"]
        for m in traj.messages_and_choices
        if isinstance(m, dict) and m["role"] == "tool"
    )
    assert traj.reward in (0.0, 1.0) and "r_actions" in traj.metrics


@pytest.mark.vllm
async def test_plain_replies_reach_the_scripted_user_against_the_tiny_model(vllm_endpoint):
    env = CustomerServiceEnv(_compact(RETAIL), seed=0, user="scripted", max_turns=6, user_patience=2)
    traj = await env.rollout(
        _client(vllm_endpoint), vllm_endpoint.model, env.scenarios("val")[0], temperature=1.0, max_tokens=24
    )
    users = [m for m in traj.messages_and_choices if isinstance(m, dict) and m["role"] == "user"]
    assert len(users) >= 2 and traj.reward in (0.0, 1.0) and len(traj.choices()) == traj.metrics["turns"]
