"""ART's `art.mcp` names: MCP tools and resources, generated scenarios, and `generate_scenarios`.

    from art_core.mcp import generate_scenarios, MCPTool
    tools = [MCPTool(name="add", description="Adds two numbers.", parameters={"type": "object", ...})]
    scenarios = await generate_scenarios(tools, [], num_scenarios=24, generator_model="openai/gpt-4.1-mini")
    scenarios.get_summary()["avg_difficulty"], scenarios.usage.cost_usd

The generator is any litellm model. It is asked for a strict JSON schema (exactly `num_scenarios` items of
{task, difficulty 1-5}); a reply that breaks it (not JSON, a wrong count, a difficulty of 7) or a failed
request is retried up to `max_retries` times, then `ScenarioGenerationError` says what came back. What the
calls cost is in `collection.usage` (tokens, dollars from litellm's price map, retries).

`stored_scenarios` is what the `mcp` environment uses: the set for one (server, tool list, generator, seed)
is generated once and kept under the storage root (`{root}/mcp_scenarios/{key}.json`, key = a hash of all
four), so a re-run or a resumed run reads it back and never generates again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from art_core.rewards.accounting import JudgeUsage, import_litellm, usage_of

log = logging.getLogger(__name__)


@dataclass
class MCPTool:
    """One MCP tool as ART describes it: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MCPTool":
        return cls(
            name=data.get("name", ""),
            description=data.get("description", ""),
            parameters=data.get("parameters") or data.get("input_schema") or data.get("inputSchema") or {},
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass
class MCPResource:
    """One MCP resource: URI, name, description, MIME type."""

    uri: str
    name: str
    description: str
    mime_type: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MCPResource":
        return cls(
            uri=data.get("uri", ""),
            name=data.get("name", ""),
            description=data.get("description", ""),
            mime_type=data.get("mimeType") or data.get("mime_type"),
        )

    def to_dict(self) -> dict[str, Any]:
        out = {"uri": self.uri, "name": self.name, "description": self.description}
        if self.mime_type:
            out["mimeType"] = self.mime_type
        return out


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1)
    difficulty: int = Field(ge=1, le=5)


@dataclass
class GeneratedScenario:
    """One task for the agent, rated 1 (one tool call) to 5 (a long multi-step job)."""

    task: str
    difficulty: int

    def __post_init__(self) -> None:
        if not isinstance(self.difficulty, int) or not 1 <= self.difficulty <= 5:
            raise ValueError(f"difficulty must be an integer from 1 to 5, got {self.difficulty!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GeneratedScenario":
        return cls(task=data["task"], difficulty=data["difficulty"])

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "difficulty": self.difficulty}

    def preview(self, max_length: int = 120) -> str:
        return self.task if len(self.task) <= max_length else self.task[:max_length].strip() + "…"


@dataclass
class GeneratedScenarioCollection:
    """Scenarios with ART's helpers (split, filter, summary); `usage` is what generating them cost."""

    scenarios: list[GeneratedScenario]
    usage: JudgeUsage = field(default_factory=JudgeUsage)

    @classmethod
    def from_dicts(cls, data: list[dict[str, Any]]) -> "GeneratedScenarioCollection":
        return cls([GeneratedScenario.from_dict(d) for d in data])

    @classmethod
    def from_json(cls, text: str) -> "GeneratedScenarioCollection":
        data = json.loads(text)
        items = data["scenarios"] if isinstance(data, dict) else data
        usage = JudgeUsage(**data["usage"]) if isinstance(data, dict) and "usage" in data else JudgeUsage()
        return cls([GeneratedScenario.from_dict(d) for d in items], usage)

    def to_dicts(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.scenarios]

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps({"scenarios": self.to_dicts(), "usage": self.usage.model_dump()}, indent=indent)

    def __len__(self) -> int:
        return len(self.scenarios)

    def __iter__(self) -> Iterator[GeneratedScenario]:
        return iter(self.scenarios)

    def __getitem__(self, index: int) -> GeneratedScenario:
        return self.scenarios[index]

    def shuffle(self, seed: int | None = None) -> "GeneratedScenarioCollection":
        items = list(self.scenarios)
        random.Random(seed).shuffle(items)
        return GeneratedScenarioCollection(items, self.usage)

    def split(self, train_size: int) -> tuple["GeneratedScenarioCollection", "GeneratedScenarioCollection"]:
        if train_size > len(self.scenarios):
            raise ValueError(f"train_size ({train_size}) is larger than the {len(self.scenarios)} scenarios")
        return GeneratedScenarioCollection(self.scenarios[:train_size]), GeneratedScenarioCollection(
            self.scenarios[train_size:]
        )

    def filter_by_difficulty(self, min_difficulty: int = 1, max_difficulty: int = 5) -> "GeneratedScenarioCollection":
        return GeneratedScenarioCollection(
            [s for s in self.scenarios if min_difficulty <= s.difficulty <= max_difficulty]
        )

    def get_difficulty_distribution(self) -> Counter:
        return Counter(s.difficulty for s in self.scenarios)

    def get_summary(self) -> dict[str, Any]:
        n = len(self.scenarios) or 1
        return {
            "total_scenarios": len(self.scenarios),
            "difficulty_distribution": dict(self.get_difficulty_distribution()),
            "avg_difficulty": sum(s.difficulty for s in self.scenarios) / n if self.scenarios else 0,
            "avg_task_length": sum(len(s.task) for s in self.scenarios) / n if self.scenarios else 0,
        }


class ScenarioGenerationError(RuntimeError):
    """The generator gave no usable set of scenarios in every allowed attempt; `usage` is what they cost."""

    def __init__(self, message: str, usage: JudgeUsage) -> None:
        super().__init__(message)
        self.usage = usage


PROMPT = """You write tasks for training an AI agent that works through the tools of an MCP server.

Tools:
{tools}

Resources:
{resources}

Write {n} different, realistic tasks a user of this server might give the agent. Each must be doable with
these tools (do not name the tools in the task); vary them from easy (one tool call, difficulty 1) to hard
(many steps and some reasoning, difficulty 5), and cover different tools and combinations. Each task asks the
agent to finish with a short summary of what it did and found.

Reply with a JSON object {{"scenarios": [{{"task": "...", "difficulty": 1-5}}, ...]}} of exactly {n} items."""


def reply_schema(num_scenarios: int) -> dict[str, Any]:
    """The strict JSON schema of the generator's reply: exactly `num_scenarios` {task, difficulty 1..5}."""
    item = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1},
            "difficulty": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": ["task", "difficulty"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "scenarios": {"type": "array", "items": item, "minItems": num_scenarios, "maxItems": num_scenarios}
        },
        "required": ["scenarios"],
        "additionalProperties": False,
    }


def parse_reply(content: str | None, num_scenarios: int) -> list[GeneratedScenario]:
    """The scenarios of one reply, or ValueError saying how it breaks the schema."""
    if not content or not content.strip():
        raise ValueError("the reply is empty")
    try:
        data = json.loads(content.strip().removeprefix("```json").strip("`"))
    except json.JSONDecodeError as e:
        raise ValueError(f"the reply is not JSON ({e}): {content[:200]!r}") from None
    items = data.get("scenarios") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError(f"the reply has no 'scenarios' list: {content[:200]!r}")
    if len(items) != num_scenarios:
        raise ValueError(f"the reply has {len(items)} scenarios, {num_scenarios} were asked for")
    try:
        return [GeneratedScenario(**_Item.model_validate(i).model_dump()) for i in items]
    except ValidationError as e:
        raise ValueError(f"a scenario breaks the schema: {e.errors()[0]['loc']} {e.errors()[0]['msg']}") from None


async def generate_scenarios(
    tools: list[MCPTool] | list[dict[str, Any]],
    resources: list[MCPResource] | list[dict[str, Any]] | None = None,
    num_scenarios: int = 24,
    show_preview: bool = False,
    custom_instructions: str | None = None,
    generator_model: str = "openai/gpt-4.1-mini",
    generator_api_key: str | None = None,
    generator_base_url: str | None = None,
    *,
    seed: int | None = None,
    max_retries: int = 3,
    litellm_params: dict[str, Any] | None = None,
) -> GeneratedScenarioCollection:
    """Ask `generator_model` (any litellm model) for `num_scenarios` tasks over these tools and resources.

    >>> s = await generate_scenarios([{"name": "add", "description": "Adds", "parameters": {}}], num_scenarios=4,
    ...                              generator_model="hosted_vllm/gen", generator_base_url="http://127.0.0.1:8000/v1")
    >>> len(s), s.usage.calls
    (4, 1)
    """
    tool_dicts = [t.to_dict() if isinstance(t, MCPTool) else MCPTool.from_dict(t).to_dict() for t in tools]
    resource_dicts = [
        r.to_dict() if isinstance(r, MCPResource) else MCPResource.from_dict(r).to_dict() for r in resources or []
    ]
    if not tool_dicts and not resource_dicts:
        raise ValueError("generate_scenarios needs at least one tool or resource")
    prompt = PROMPT.format(
        tools=json.dumps(tool_dicts, indent=1),
        n=num_scenarios,
        resources=json.dumps(resource_dicts, indent=1) if resource_dicts else "none",
    )
    if custom_instructions:
        prompt += f"\n\nAlso follow these instructions:\n{custom_instructions}"
    params = dict(litellm_params or {})
    if generator_base_url:
        params["api_base"] = generator_base_url
    if generator_api_key:
        params["api_key"] = generator_api_key
    if seed is not None:
        params.setdefault("seed", seed)
    litellm = import_litellm()
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "scenarios", "schema": reply_schema(num_scenarios), "strict": True},
    }
    usage, problems = JudgeUsage(), []
    for attempt in range(max_retries + 1):
        if attempt:
            usage.retries += 1
        try:
            response = await litellm.acompletion(
                model=generator_model,
                messages=[{"role": "user", "content": prompt}],
                response_format=fmt,
                num_retries=0,
                **params,
            )
        except Exception as e:  # a refused or failed request: also retried, then reported
            problems.append(f"attempt {attempt + 1}: request failed ({type(e).__name__}: {str(e)[:200]})")
            continue
        usage = usage + usage_of(response, generator_model)
        choice = response.choices[0]
        try:
            if getattr(choice, "finish_reason", None) == "length":
                raise ValueError("the reply was cut off by max_tokens; raise max_tokens in litellm_params")
            scenarios = parse_reply(choice.message.content, num_scenarios)
        except ValueError as e:
            problems.append(f"attempt {attempt + 1}: {e}")
            log.warning("scenario generator %s: %s", generator_model, problems[-1])
            continue
        collection = GeneratedScenarioCollection(scenarios, usage)
        if show_preview:
            for i, s in enumerate(collection.scenarios[:5]):
                print(f"  {i + 1}. {s.preview()} (difficulty {s.difficulty}/5)")
        return collection
    raise ScenarioGenerationError(
        f"scenario generator {generator_model} gave no usable reply in {max_retries + 1} attempts (it must match the JSON "
        f"schema: exactly {num_scenarios} items of {{task, difficulty 1-5}}): " + "; ".join(problems),
        usage,
    )


def scenarios_key(server: str, tools: list[dict[str, Any]], resources: list[dict[str, Any]], generate: Any) -> str:
    """The stored set's key: a hash of the server, its tool and resource list, the generator and its seed.

    The generator's address is left out (the same model moved to another port still hits); no key is hashed."""
    spec = (
        generate.model_dump(exclude={"api_base", "max_retries"}) if hasattr(generate, "model_dump") else dict(generate)
    )
    blob = json.dumps(
        {"server": server, "tools": tools, "resources": resources, "generate": spec}, sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def scenarios_uri(store: str | None, key: str) -> str:
    from art_core.settings import get_settings
    from art_core.storage import Storage

    return Storage(store or get_settings().storage_root).join("mcp_scenarios", f"{key}.json")


def read_collection(uri: str) -> GeneratedScenarioCollection:
    """A stored collection (what `stored_scenarios` wrote, or any {"scenarios": [...]} JSON) at a path or URI."""
    from art_core.storage import Storage

    storage = Storage(uri.rsplit("/", 1)[0] or "/")
    if not storage.exists(uri):
        raise FileNotFoundError(f"no scenario collection at {uri}")
    return GeneratedScenarioCollection.from_json(storage.read_text(uri))


def stored_scenarios(
    server: str, tools: list[dict[str, Any]], resources: list[dict[str, Any]], generate: Any, store: str | None = None
) -> GeneratedScenarioCollection:
    """The scenarios for this (server, tools, generator, seed): read from storage, else generated once and stored.

    `generate` is an `art_core.envs.mcp.GenerateOptions`. The file holds the scenarios, their cost and what they
    were generated from; a run that finds it pays nothing."""
    from art_core.envs.mcp.server import run_blocking
    from art_core.storage import Storage

    uri = scenarios_uri(store, scenarios_key(server, tools, resources, generate))
    storage = Storage(uri.rsplit("/", 2)[0])
    if storage.exists(uri):
        log.info("MCP scenarios for %s: reusing %s", server, uri)
        return GeneratedScenarioCollection.from_json(storage.read_text(uri))
    collection = run_blocking(
        generate_scenarios(
            tools,
            resources,
            num_scenarios=generate.num_scenarios,
            custom_instructions=generate.custom_instructions,
            generator_model=generate.generator_model,
            generator_base_url=generate.api_base,
            seed=generate.seed,
            max_retries=generate.max_retries,
            litellm_params=generate.litellm_params,
        )
    )
    record = json.loads(collection.to_json())
    record.update(
        server=server, generator=generate.generator_model, seed=generate.seed, tools=[t["name"] for t in tools]
    )
    storage.write_text(uri, json.dumps(record, indent=1))
    log.info(
        "MCP scenarios for %s: generated %d with %s ($%.4f) -> %s",
        server,
        len(collection),
        generate.generator_model,
        collection.usage.cost_usd,
        uri,
    )
    return collection


__all__ = [
    "GeneratedScenario",
    "GeneratedScenarioCollection",
    "MCPResource",
    "MCPTool",
    "ScenarioGenerationError",
    "generate_scenarios",
    "read_collection",
    "stored_scenarios",
]
