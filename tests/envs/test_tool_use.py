"""The pieces every tool-using environment shares: the tool runner's conventions, the schema builder, the
forced-call regex with a message alternative, and the episode loop's stop rules (against the fake chat server)."""

from __future__ import annotations

import re

import pytest
from openai import AsyncOpenAI

from art_core.envs.tool_use.episode import Rules, run_episode
from art_core.envs.tool_use.forced_calls import tool_call_regex
from art_core.envs.tool_use.tools import ToolError, function_schema, run_tool
from art_core.trajectories import Trajectory


def add(db, a, b):
    db["sum"] = a + b
    return {"sum": a + b, "a": a}


def refuse(db):
    raise ToolError("not today")


def broken(db):
    raise KeyError("a bug")


TOOLS = {"add": add, "refuse": refuse, "broken": broken}


def test_run_tool_reads_results_and_mistakes_back_to_the_agent():
    db: dict = {}
    assert run_tool(TOOLS, db, "add", '{"b": 2, "a": 1}') == ('{"sum": 3, "a": 1}', False) and db == {"sum": 3}
    assert run_tool(TOOLS, db, "add", {"b": 2, "a": 1}, sort_keys=True) == ('{"a": 1, "sum": 3}', False)
    assert run_tool({"n": lambda db: 7}, db, "n", "") == ("7", False)  # numbers as their text, empty args as {}
    text, error = run_tool(TOOLS, db, "add", "{not json")
    assert error and text.startswith("Error: the arguments of add are not valid JSON") and "send a JSON object" in text
    assert run_tool(TOOLS, db, "add", "[1, 2]") == ("Error: the arguments of add must be a JSON object, got list", True)
    # tau2's conventions (the defaults): every exception is a refusal, an unknown tool is named without a listing
    assert run_tool(TOOLS, db, "nope", {}) == ("Error: Tool 'nope' not found.", True)
    assert run_tool(TOOLS, db, "broken", {}) == ("Error: 'a bug'", True)
    assert run_tool(TOOLS, db, "add", {"a": 1}) == ("Error: add() missing 1 required positional argument: 'b'", True)


def test_a_tool_set_that_refuses_only_by_tool_error_fails_loud_on_bugs():
    strict = {"refuse": (ToolError,), "unknown": "unknown tool {name!r}; available tools: {tools}"}
    assert run_tool(TOOLS, {}, "refuse", {}, **strict) == ("Error: not today", True)
    assert run_tool(TOOLS, {}, "nope", {}, **strict) == (
        "Error: unknown tool 'nope'; available tools: add, broken, refuse",
        True,
    )
    text, error = run_tool(TOOLS, {}, "add", {"a": 1, "c": 2}, **strict)
    assert error and text.startswith("Error: bad arguments for add: ")
    with pytest.raises(KeyError):  # a bug in a tool is not the agent's mistake
        run_tool(TOOLS, {}, "broken", {}, **strict)


def test_function_schema_requires_every_property_unless_told():
    schema = function_schema("f", "Does f.", {"x": {"type": "string"}, "y": {"type": "integer"}}, ["x"], title="F")
    assert schema == {
        "type": "function",
        "function": {
            "name": "f",
            "description": "Does f.",
            "parameters": {
                "type": "object",
                "properties": {"x": {"type": "string"}, "y": {"type": "integer"}},
                "required": ["x"],
                "title": "F",
            },
        },
    }
    assert function_schema("g", "", {"x": {}})["function"]["parameters"]["required"] == ["x"]


def test_forced_regex_can_also_admit_a_short_message():
    tools = [function_schema("f", "", {"x": {"type": "integer"}})]
    call = '<tool_call>\n{"name": "f", "arguments": {"x": 12}}\n</tool_call>'
    only_calls, with_message = tool_call_regex(tools), tool_call_regex(tools, message_chars=10)
    assert re.fullmatch(only_calls, call) and not re.fullmatch(only_calls, "Hello there")
    assert re.fullmatch(with_message, call) and re.fullmatch(with_message, "Hello ther")
    assert not re.fullmatch(with_message, "Hello there")  # 11 characters


def opening(text: str = "Add 1 and 2.") -> Trajectory:
    return Trajectory(
        messages_and_choices=[{"role": "system", "content": "You add."}, {"role": "user", "content": text}],
        tools=[function_schema("add", "Adds.", {"a": {"type": "integer"}, "b": {"type": "integer"}})],
    )


async def play(fake_chat_server, traj: Trajectory, rules: Rules, replies: list[str] | None = None):
    db: dict = {}
    heard: list[str] = []

    async def call_tool(name: str, arguments: str) -> tuple[str, bool]:
        return run_tool(TOOLS, db, name, arguments)

    async def customer(text: str) -> str:
        heard.append(text)
        return replies.pop(0)

    client = AsyncOpenAI(base_url=fake_chat_server.base_url, api_key="x")
    episode = await run_episode(
        client, "agent", traj, {}, {}, call_tool=call_tool, customer=customer if replies else None, rules=rules
    )
    return episode, heard


async def test_without_a_customer_the_first_plain_reply_is_the_answer(fake_chat_server):
    f = fake_chat_server
    f.script("agent", [f.tool_call("add", {"a": 1, "b": 2}), f.tool_call("nope", {}), f.say("It is 3.")])
    traj = opening()
    episode, _ = await play(f, traj, Rules(max_turns=5))
    assert (episode.stop_reason, episode.turns, episode.steps) == ("answered", 3, 6)
    assert (episode.tool_calls, episode.tool_errors, episode.said) == (2, 1, ["It is 3."])
    assert [m["role"] for m in traj.messages()] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert f.requests[0]["logprobs"] is True and f.requests[0]["tools"] == traj.tools


async def test_stop_rules(fake_chat_server):
    f = fake_chat_server
    f.script("agent", [f.say("Hello?"), f.say("Anything else?")])
    episode, heard = await play(f, opening(), Rules(stop_signals=("#BYE#",), max_turns=5), ["More.", "No. #BYE#"])
    assert (episode.stop_reason, episode.turns, heard) == ("user_stop", 2, ["Hello?", "Anything else?"])

    episode, _ = await play(f, opening("Nothing, thanks. #BYE#"), Rules(stop_signals=("#BYE#",)), ["unused"])
    assert (episode.stop_reason, episode.turns) == ("user_stop", 0)  # a customer can end it before the agent speaks

    f.script("agent", [f.tool_call("add", {"a": 1, "b": 2}), f.tool_call("refuse", {})])
    episode, _ = await play(f, opening(), Rules(max_turns=2))
    assert (episode.stop_reason, episode.turns) == ("max_turns", 2)

    f.script("agent", [f.tool_call("add", {"a": 1, "b": 2})])
    episode, _ = await play(f, opening(), Rules(terminal_tools=frozenset({"add"}), write_tools=frozenset({"add"})))
    assert (episode.stop_reason, episode.writes) == ("terminal_tool", 1)

    f.script("agent", [f.tool_call("refuse", {}), f.tool_call("refuse", {})])
    episode, _ = await play(f, opening(), Rules(max_errors=2))
    assert (episode.stop_reason, episode.tool_errors, episode.writes) == ("too_many_errors", 2, 0)

    f.script("agent", [f.say("Hi."), f.say("Hi again.")])
    episode, _ = await play(f, opening(), Rules(max_steps=4), ["Go on.", "Go on."])
    assert (episode.stop_reason, episode.steps) == ("max_steps", 5)  # opening 1, agent 1, customer 1, agent 1, ...


async def test_a_forced_call_gets_room_for_its_longest_spelling(fake_chat_server):
    """A constrained model may spell a forced call a character at a time: turn 1 of price-lookup asks for as
    many tokens as the call's longest match has characters, whatever smaller max_tokens the run set; the
    free-text answer keeps the run's budget."""
    from art_core.envs import load_environment
    from art_core.envs.tool_use.forced_calls import max_match_tokens

    env = load_environment("price-lookup")
    scenario = env.scenarios("val")[0]
    fake_chat_server.script(
        "m", [fake_chat_server.tool_call("lookup_price", {"item": scenario.data["item"]}), fake_chat_server.say("$3")]
    )
    client = AsyncOpenAI(base_url=fake_chat_server.base_url, api_key="x")
    await env.rollout(client, "m", scenario, max_tokens=16, temperature=0.7)
    call, answer = fake_chat_server.requests
    regex = call["structured_outputs"]["regex"]
    assert call["max_tokens"] == max_match_tokens(regex) == 85  # 84 characters at most, and the end token
    assert answer["max_tokens"] == 16 and "structured_outputs" not in answer
    assert max_match_tokens(tool_call_regex(env.tools())) > len('<tool_call>\n{"name": "lookup_price"}')
    with pytest.raises(ValueError, match="bound its repeats"):
        max_match_tokens("a+")


@pytest.mark.vllm
async def test_a_conversation_that_outgrows_the_context_ends_the_episode_not_the_gather(vllm_endpoint):
    """A customer whose second message pushes the conversation past the model's context (16,384 positions for the
    tiny model): vLLM refuses the next call with HTTP 400, and the episode ends as "context_full" with the turn
    it had, rather than the rollout raising and failing its whole gather (as it did in a real retail run at
    8,192). The same refusal on the first call is the run's settings at fault and is raised."""
    from openai import BadRequestError

    client = AsyncOpenAI(base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key or "x")
    sampling = {"max_tokens": 4, "temperature": 0.0}
    essay = " ".join(f"word{k}" for k in range(20_000))

    async def call_tool(name: str, arguments: str) -> tuple[str, bool]:
        return "", False

    async def long_winded(text: str) -> str:
        return essay

    cut_replies_go_on = Rules(stop_at_length=False)  # as in customer service: a cut reply reaches the customer
    traj = opening()
    episode = await run_episode(
        client,
        vllm_endpoint.model,
        traj,
        sampling,
        {},
        call_tool=call_tool,
        customer=long_winded,
        rules=cut_replies_go_on,
    )
    assert (episode.stop_reason, episode.turns) == ("context_full", 1)
    assert [m["role"] for m in traj.messages()] == ["system", "user", "assistant", "user"]
    assert len(traj.messages_and_choices[2].logprobs.content) > 0  # the turn it had is kept, trainable

    with pytest.raises(BadRequestError, match="maximum context length"):
        await run_episode(client, vllm_endpoint.model, opening(essay), sampling, {}, call_tool=call_tool, rules=Rules())
