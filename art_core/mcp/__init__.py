"""ART's `art.mcp`: MCP tools and resources, generated scenarios, `generate_scenarios` and `preview_scenarios`.

    from art_core.mcp import generate_scenarios, MCPTool
    from art_core.mcp.generate_scenarios import preview_scenarios     # ART's module paths work too
    tools = [MCPTool(name="add", description="Adds two numbers.", parameters={"type": "object", ...})]
    scenarios = await generate_scenarios(tools, [], num_scenarios=24, generator_model="openai/gpt-4.1-mini")
    scenarios.get_summary()["avg_difficulty"], scenarios.usage.cost_usd

The modules follow ART's: `types` (MCPTool, MCPResource, GeneratedScenario, GeneratedScenarioCollection) and
`generate_scenarios` (the generator, which any litellm model can be); `stored` is ours, the scenario sets the
`mcp` environment keeps in storage. As in ART, `art_core.mcp.generate_scenarios` the attribute is the function;
the module of that name is reached by importing from it.
"""

from __future__ import annotations

from art_core.mcp.generate_scenarios import (
    PROMPT,
    ScenarioGenerationError,
    generate_scenarios,
    parse_reply,
    preview_scenarios,
    reply_schema,
)
from art_core.mcp.stored import read_collection, scenarios_key, scenarios_uri, stored_scenarios
from art_core.mcp.types import GeneratedScenario, GeneratedScenarioCollection, MCPResource, MCPTool
from art_core.rewards.accounting import JudgeUsage

__all__ = [
    "PROMPT",
    "GeneratedScenario",
    "GeneratedScenarioCollection",
    "JudgeUsage",
    "MCPResource",
    "MCPTool",
    "ScenarioGenerationError",
    "generate_scenarios",
    "parse_reply",
    "preview_scenarios",
    "read_collection",
    "reply_schema",
    "scenarios_key",
    "scenarios_uri",
    "stored_scenarios",
]
