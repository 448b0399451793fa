"""A tau2 episode end to end: the greeting, the LLM customer, tools on the episode's database, tau2's stop
signals and cut-offs, and the reward in the trajectory's metrics.

The agent and the customer are played by the loopback fake chat server (tests/envs/conftest.py) for the
episode logic; the last tests play both with the tiny model served by vLLM (run under the heavy lock).
"""

from __future__ import annotations

import json

import pytest
from openai import AsyncOpenAI
from openai.types.chat.chat_completion import Choice

from art_core.envs import load_environment
from art_core.envs.tau2.user import GREETING, STOP, TRANSFER, system_prompt
from art_core.trajectories import Trajectory


def env_for(f, name: str = "tau2-retail", **options):
    return load_environment(
        name, user={"model": "openai/user-sim", "api_base": f.base_url, "api_key": "test"}, **options
    )


def gold_agent_turns(f, task) -> list[dict]:
    """A perfect agent: every gold action as a tool call, then a reply that says what must be said."""
    actions = task["evaluation_criteria"]["actions"] or []
    infos = task["evaluation_criteria"]["communicate_info"] or []
    return [f.tool_call(a["name"], a["arguments"]) for a in actions] + [f.say("All done. " + " ".join(infos))]


def tool_messages(traj) -> list[dict]:
    return [m for m in traj.messages_and_choices if isinstance(m, dict) and m["role"] == "tool"]


async def test_a_perfect_episode_scores_one_with_every_component_in_metrics(fake_chat_server):
    f = fake_chat_server
    env = env_for(f, "tau2-airline")
    scenario = next(s for s in env.scenarios("test") if s.data["task"]["evaluation_criteria"]["communicate_info"])
    task = scenario.data["task"]
    f.script("user-sim", [f.say("Hi, I need help with my trip."), f.say(f"Great, thank you. {STOP}")])
    f.script("agent", gold_agent_turns(f, task))
    traj = await env.rollout(
        AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario, temperature=0.0, max_tokens=2048
    )

    assert (
        traj.reward == 1.0 and traj.metadata["stop_reason"] == "user_stop" and traj.metadata["task_id"] == scenario.id
    )
    assert {"r_db": 1.0, "r_communicate": 1.0, "truncated": 0.0}.items() <= traj.metrics.items()
    assert traj.metrics["tool_calls"] == len(task["evaluation_criteria"]["actions"]) and not f.queues["agent"]
    items = traj.messages_and_choices
    assert (
        items[0]["role"] == "system"
        and items[0]["content"].startswith("<instructions>")
        and env.data.policy in items[0]["content"]
    )
    assert (
        items[1] == {"role": "assistant", "content": GREETING}
        and items[2]["content"] == "Hi, I need help with my trip."
    )
    assert all(isinstance(c, Choice) for c in traj.choices()) and len(traj.choices()) == traj.metrics["turns"]
    # the customer's model saw tau2-style instructions with this task's scenario, and the agent as "user"
    to_user = [r for r in f.requests if r["model"] == "user-sim"]
    assert to_user[0]["messages"] == [
        {"role": "system", "content": system_prompt(task)},
        {"role": "user", "content": GREETING},
    ]
    assert (
        "<scenario>" in to_user[0]["messages"][0]["content"]
        and "###OUT-OF-SCOPE###" in to_user[0]["messages"][0]["content"]
    )
    assert [m["role"] for m in to_user[1]["messages"][1:]] == ["user", "assistant", "user"]
    assert not any(m["role"] == "tool" for m in to_user[1]["messages"])  # the customer never sees tool results
    to_agent = [r for r in f.requests if r["model"] == "agent"]
    assert (
        to_agent[0]["tools"] == env.tools() and to_agent[0]["temperature"] == 0.0 and to_agent[0]["max_tokens"] == 2048
    )
    # it survives the rollout file's JSONL round trip, with the checks behind the reward
    again = Trajectory.model_validate_json(traj.model_dump_json())
    assert again.reward == 1.0 and again.metrics == traj.metrics and len(again.choices()) == len(traj.choices())
    assert json.loads(again.metadata["reward_details"])["communicate_checks"][0]["met"] is True


async def test_transfer_is_not_terminal_the_customer_ends_it(fake_chat_server):
    f = fake_chat_server
    env = env_for(f)
    scenario = env.scenarios("train")[0]
    f.script("user-sim", [f.say("I want a human."), f.say(f"Okay. {TRANSFER}")])
    f.script(
        "agent",
        [
            f.tool_call("transfer_to_human_agents", {"summary": "wants a human"}),
            f.say("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT."),
        ],
    )
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
    assert traj.metadata["stop_reason"] == "user_stop" and tool_messages(traj)[0]["content"] == "Transfer successful"
    assert (
        traj.reward == 0.0 and traj.metrics["r_db"] == 0.0 and traj.metrics["truncated"] == 0.0
    )  # task 0 wanted an exchange


async def test_a_run_cut_off_by_its_step_limit_scores_zero(fake_chat_server):
    f = fake_chat_server
    env = env_for(f, max_steps=6)
    scenario = next(s for s in env.scenarios("test") if s.id == "5")  # one return, no NL assertion
    task = scenario.data["task"]
    f.script("user-sim", [f.say("I want to return something.")])
    f.script("agent", gold_agent_turns(f, task))  # right writes, but the conversation is cut before it ends
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
    assert traj.metadata["stop_reason"] == "max_steps" and traj.metrics["steps"] == 6
    assert traj.reward == 0.0 and traj.metrics["truncated"] == 1.0


async def test_a_turn_cut_by_max_tokens_or_too_many_errors_scores_zero(fake_chat_server):
    f = fake_chat_server
    answer = f.answer

    def cut(body):  # the fake's reply to "CUT" says the model hit max_tokens
        status, payload = answer(body)
        if payload.get("choices") and payload["choices"][0]["message"]["content"] == "CUT":
            payload["choices"][0]["finish_reason"] = "length"
        return status, payload

    f.answer = cut
    env = env_for(f, max_errors=2)
    scenario = env.scenarios("test")[0]
    f.script("user-sim", [f.say("Hello."), f.say("Hello."), f.say("Hello.")])
    f.script("agent", [f.say("CUT")])
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
    assert traj.metadata["stop_reason"] == "max_tokens" and traj.reward == 0.0 and traj.metrics["truncated"] == 1.0
    f.script(
        "agent",
        [f.tool_call("get_order_details", {"order_id": "#W0"}), f.tool_call("get_order_details", {"order_id": "#W1"})],
    )
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
    assert traj.metadata["stop_reason"] == "too_many_errors" and traj.reward == 0.0 and traj.metrics["tool_errors"] == 2
    assert tool_messages(traj)[0]["content"] == "Error: Order not found"


async def test_the_customer_may_end_at_once_and_forced_calls_send_a_regex(fake_chat_server):
    f = fake_chat_server
    env = env_for(f, force_tool_calls=True, forced_message_chars=40)
    assert env.constrains_sampling and "<tool_call>" in env.forced_regex() and "{0,39}" in env.forced_regex()
    scenario = next(s for s in env.scenarios("test") if s.id == "12")  # nothing to write: doing nothing is right
    f.script("user-sim", [f.say(f"Never mind. {STOP}")])
    traj = await env.rollout(AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", scenario)
    assert traj.metadata["stop_reason"] == "user_stop" and traj.metrics["turns"] == 0 and traj.metrics["r_db"] == 1.0


async def test_a_hosted_agent_is_not_sent_vllms_extras(fake_chat_server):
    f = fake_chat_server
    env = env_for(f, sampler_extras=False)
    f.script("user-sim", [f.say("Hello."), f.say(f"Bye. {STOP}")])
    f.script("agent", [f.say("Goodbye.")])
    await env.rollout(
        AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", env.scenarios("test")[0], temperature=0.0
    )
    sent = [r for r in f.requests if r["model"] == "agent"][0]
    assert "return_tokens_as_token_ids" not in sent and sent["logprobs"] is False  # OpenAI's API refuses the former


# ---- the tiny model served by vLLM plays the agent and the customer ----


@pytest.mark.vllm
async def test_full_tau2_retail_episode_against_the_tiny_model(vllm_endpoint, monkeypatch):
    """tau2's full policy and all 16 tool schemas in the prompt (6,325 tokens on the tiny model's
    tokenizer: it needs the 16k context), forced calls or short messages for the agent, the LLM customer
    played by the same server. A random model never says ###STOP###, so the run ends at its step limit."""
    monkeypatch.setenv("ART_JUDGE_MODEL", "openai/unused-judge")  # a cut-off run must not reach any judge
    ep = vllm_endpoint
    user = {
        "model": f"openai/{ep.model}",
        "api_base": ep.base_url,
        "api_key": ep.api_key or "none",
        "max_tokens": 24,
        "temperature": 1.0,
    }
    env = load_environment("tau2-retail", user=user, force_tool_calls=True, forced_message_chars=40, max_steps=10)
    scenario = env.scenarios("test")[0]
    client = AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key or "none")
    traj = await env.rollout(client, ep.model, scenario, temperature=1.0, max_tokens=256)

    assert traj.messages_and_choices[0]["content"] == env.system_prompt and env.data.policy in env.system_prompt
    assert len(traj.tools) == 16 and traj.metadata["stop_reason"] in ("max_steps", "too_many_errors", "user_stop")
    choices = traj.choices()
    assert choices and all(c.logprobs.content and c.logprobs.content[0].token.startswith("token_id:") for c in choices)
    customer = [m for m in traj.messages_and_choices if isinstance(m, dict) and m["role"] == "user"]
    assert customer  # the opening came from the user model through litellm
    assert traj.metrics["tool_calls"] + sum(1 for c in choices if not c.message.tool_calls) >= len(choices)
    # scored: every component present; a cut-off run is 0 whatever its database
    assert {"r_db", "r_communicate", "truncated"} <= set(traj.metrics) and traj.reward in (0.0, 1.0)
    if traj.metadata["stop_reason"] != "user_stop":
        assert traj.reward == 0.0 and traj.metrics["truncated"] == 1.0
