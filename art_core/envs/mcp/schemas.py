"""MCP tools as OpenAI tools: the conversion, and a refusal at start-up of what OpenAI's format cannot express.

An MCP tool carries a JSON Schema (`input_schema`) for its arguments; an OpenAI tool is
`{"type": "function", "function": {"name", "description", "parameters"}}`. OpenAI takes most of JSON
Schema in `parameters`, but not everything:
- the name must match `^[a-zA-Z0-9_-]{1,64}$`;
- `parameters` must be an object schema (`"type": "object"`), not a bare string, array or union at the root;
- a `$ref` must point inside the schema (`#/...`): OpenAI fetches nothing.
Such a tool is refused when the environment starts, naming the tool and what to change, instead of
failing at the first request (or, worse, being silently dropped).

    >>> openai_tool("add", "Adds.", {"type": "object", "properties": {"a": {"type": "integer"}}})["function"]["name"]
    'add'
    >>> openai_tool("bad name!", "", {"type": "object"})
    Traceback (most recent call last):
    art_core.envs.mcp.schemas.InexpressibleToolError: MCP tool 'bad name!': OpenAI tool names match ...
"""

from __future__ import annotations

import copy
import re
from typing import Any

from art_core.envs.tool_use.tools import function_schema

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ROOT_COMBINATORS = ("anyOf", "oneOf", "allOf", "not", "enum", "const")


class InexpressibleToolError(ValueError):
    """An MCP tool whose name or input schema OpenAI's tool format cannot carry."""


def openai_tool(
    name: str, description: str | None, schema: dict[str, Any] | None, hide: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The OpenAI tool for one MCP tool; `hide` names arguments the environment fills in itself (a state key)."""
    if not _NAME.match(name or ""):
        raise InexpressibleToolError(
            f"MCP tool {name!r}: OpenAI tool names match ^[a-zA-Z0-9_-]{{1,64}}$ (letters, digits, _ and -); rename it "
            "on the server or leave it out with the environment's hidden_tools option"
        )
    params = copy.deepcopy(schema) if schema else {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise InexpressibleToolError(
            f"MCP tool {name!r}: its input schema is {type(params).__name__}, not a JSON object schema"
        )
    params.pop("$schema", None)  # a draft URI OpenAI does not need
    kind = params.get("type", "object" if "properties" in params else None)
    bad_root = [k for k in _ROOT_COMBINATORS if k in params]
    if kind != "object" or bad_root:
        what = f"type {kind!r}" if kind != "object" else f"{bad_root[0]!r} at the root"
        raise InexpressibleToolError(
            f'MCP tool {name!r}: OpenAI tool parameters must be one JSON object schema ({{"type": "object", '
            f'"properties": ...}}), this one has {what}; wrap the arguments in an object on the server, or leave the '
            "tool out with hidden_tools"
        )
    outside = sorted(set(_external_refs(params)))
    if outside:
        raise InexpressibleToolError(
            f"MCP tool {name!r}: its input schema refers to {outside[0]!r} outside itself; OpenAI fetches no "
            "references: inline the definition (or use $defs with '#/$defs/...')"
        )
    params.pop("type", None)
    properties = {k: v for k, v in (params.pop("properties", None) or {}).items() if k not in hide}
    required = [r for r in params.pop("required", None) or [] if r not in hide]
    return function_schema(name, description or "", properties, required, **params)


def _external_refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) and not node["$ref"].startswith("#") else []
        return found + [r for v in node.values() for r in _external_refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _external_refs(v)]
    return []


def takes_argument(schema: dict[str, Any] | None, arg: str) -> bool:
    """Whether a tool's input schema has a property named `arg`."""
    return isinstance(schema, dict) and arg in (schema.get("properties") or {})


READ_RESOURCE = "read_resource"


def read_resource_tool(resources: list[dict[str, Any]]) -> dict[str, Any]:
    """The tool through which the model reads the server's resources (offered when the server lists any)."""
    listing = "; ".join(f"{r['uri']}: {r.get('description') or r.get('name') or ''}".strip() for r in resources)
    uri = {"type": "string", "enum": [r["uri"] for r in resources], "description": "The resource's URI."}
    return function_schema(
        READ_RESOURCE, f"Read one of the server's resources by its URI. Resources: {listing}", {"uri": uri}
    )
