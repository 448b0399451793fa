"""The `mcp` environment over streamable HTTP: a server at a URL (the toy server of test_mcp_bad_inputs.py, which
this test starts on 127.0.0.1 and stops by its process id), then the same server gone."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from openai import AsyncOpenAI

from art_core.envs import load_environment
from art_core.envs.mcp import McpServerError
from tests.envs.test_mcp_bad_inputs import SERVER


@pytest.fixture
def toy_url(tmp_path):
    path = tmp_path / "toy_server.py"
    path.write_text(SERVER)
    with socket.socket() as s:  # a free port on loopback for the server to take
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(path)],
        env={**os.environ, "TOY_MODE": "http", "TOY_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.2)
    yield url, proc
    proc.terminate()
    proc.wait(timeout=10)


async def test_a_url_server_is_discovered_and_called_then_its_loss_fails_the_rollout(toy_url, fake_chat_server, caplog):
    url, proc = toy_url
    f = fake_chat_server
    with caplog.at_level(logging.WARNING, logger="art_core.envs.mcp.env"):
        env = load_environment("mcp", url=url, scenarios=["Keep two notes."], tool_timeout_s=5)
    assert "offers no state key and no reset tool: concurrent rollouts share its state" in caplog.text
    assert {t["function"]["name"] for t in env.tools()} == {
        "add_note",
        "slow",
        "fail",
        "crash",
        "read_resource",
    } and env.server_name == "toy"
    client, scenario = AsyncOpenAI(base_url=f.base_url, api_key="test"), env.scenarios("train")[0]
    f.script(
        "agent", [f.tool_call("add_note", {"text": "a"}), f.tool_call("add_note", {"text": "b"}), f.say("Two notes.")]
    )
    traj = await env.rollout(client, "agent", scenario, max_tokens=64)
    assert [m["content"] for m in traj.messages_and_choices if isinstance(m, dict) and m["role"] == "tool"] == [
        "1 notes",
        "2 notes",
    ]
    proc.terminate()
    proc.wait(timeout=10)
    f.script("agent", [f.tool_call("add_note", {"text": "c"})])
    with pytest.raises(McpServerError, match=f"MCP server '{url}' did not answer initialize"):
        await env.rollout(client, "agent", scenario, max_tokens=64)
