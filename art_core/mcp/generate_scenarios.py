"""ART's `art.mcp.generate_scenarios`: ask a litellm model for tasks over an MCP server's tools, and preview them.

    from art_core.mcp.generate_scenarios import generate_scenarios, preview_scenarios
    scenarios = await generate_scenarios(tools, [], num_scenarios=24, generator_model="openai/gpt-4.1-mini")
    preview_scenarios(scenarios.to_dicts(), n=5)

The generator is asked for a strict JSON schema (exactly `num_scenarios` items of {task, difficulty 1-5}); a
reply that breaks it (not JSON, a wrong count, a difficulty of 7) or a failed request is retried up to
`max_retries` times, then `ScenarioGenerationError` says what came back. What the calls cost is in
`collection.usage` (tokens, dollars from litellm's price map, retries).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterable

from pydantic import ValidationError

from art_core.mcp.types import GeneratedScenario, GeneratedScenarioCollection, MCPResource, MCPTool, _Item
from art_core.rewards.accounting import JudgeUsage, import_litellm, usage_of
from art_core.utils.logging import _C, dim

log = logging.getLogger(__name__)


def preview_scenarios(scenarios: Iterable[dict[str, Any] | GeneratedScenario], n: int = 5) -> None:
    """Print the first `n` scenarios, one line each: the task (cut at 120 characters) and its difficulty.

    Takes dicts ({"task", "difficulty"}), as ART's notebook passes, or GeneratedScenarios (a collection).

    >>> preview_scenarios([{"task": "Add 2 and 3.", "difficulty": 1}])
       1. Add 2 and 3.  (difficulty 1/5)
    """
    for i, s in enumerate(list(scenarios)[: max(n, 0)]):
        task = s["task"] if isinstance(s, dict) else s.task
        difficulty = (s.get("difficulty") if isinstance(s, dict) else s.difficulty) or "N/A"
        text = task[:120].strip() + ("…" if len(task) > 120 else "")
        dim(f"   {i + 1}. {text}  {_C.GRAY}(difficulty {difficulty}/5){_C.RESET}")


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

    >>> tools = [{"name": "add", "description": "Adds", "parameters": {}}]
    >>> s = await generate_scenarios(tools, num_scenarios=4, generator_model="hosted_vllm/gen",   # doctest: +SKIP
    ...                              generator_base_url="http://127.0.0.1:8000/v1")
    >>> len(s), s.usage.calls                                                                     # doctest: +SKIP
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
            preview_scenarios(collection, n=5)
        return collection
    raise ScenarioGenerationError(
        f"scenario generator {generator_model} gave no usable reply in {max_retries + 1} attempts (it must match the JSON "
        f"schema: exactly {num_scenarios} items of {{task, difficulty 1-5}}): " + "; ".join(problems),
        usage,
    )


__all__ = [
    "PROMPT",
    "ScenarioGenerationError",
    "generate_scenarios",
    "parse_reply",
    "preview_scenarios",
    "reply_schema",
]
