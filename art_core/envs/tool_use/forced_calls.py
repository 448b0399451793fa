"""A regex that admits exactly one well-formed Hermes-style tool call, for forcing random-weight models.

Given OpenAI tool schemas, `tool_call_regex` builds a regex for vLLM's structured outputs
(`extra_body={"structured_outputs": {"regex": r}}`) whose every match is

    <tool_call>
    {"name": "<one of the tools>", "arguments": {<its required parameters, each of its type>}}
    </tool_call>

Strings are short (at most `max_str` characters from a safe alphabet), lists hold at most
`max_items` elements, numbers have at most 4 digits, and there is no free whitespace, so every
match is parseable JSON of bounded length. The constraint admits any tokenization of a match, and a
random-weight model may spell one a character at a time: a max_tokens below the match's length in
characters can cut the call.

    >>> r = tool_call_regex([{"type": "function", "function": {"name": "f", "parameters": {
    ...     "type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}])
    >>> import re; bool(re.fullmatch(r, '<tool_call>\\n{"name": "f", "arguments": {"x": "ab"}}\\n</tool_call>'))
    True
"""

from __future__ import annotations

import json
from typing import Any

_SPECIAL = set("\\.^$|?*+()[]{}")
_STR_CHARS = "[A-Za-z0-9 _#@.-]"  # no quote or backslash: every match is a valid JSON string


def escape(text: str) -> str:
    """Escape regex metacharacters only (Python's re.escape also escapes spaces and '#', which
    some structured-output engines reject)."""
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


def value_regex(schema: dict[str, Any], max_str: int = 16, max_items: int = 2) -> str:
    """A regex for a JSON value of `schema` (a subset of JSON Schema: the one tool schemas use)."""
    if "enum" in schema:
        return "(" + "|".join(escape(json.dumps(v)) for v in schema["enum"]) + ")"
    if "const" in schema:
        return escape(json.dumps(schema["const"]))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return "(" + "|".join(value_regex(s, max_str, max_items) for s in schema[key]) + ")"
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        return "(" + "|".join(value_regex({**schema, "type": k}, max_str, max_items) for k in kind) + ")"
    if kind == "string":
        return f'"{_STR_CHARS}{{1,{max_str}}}"'
    if kind == "integer":
        return "(0|[1-9][0-9]{0,3})"
    if kind == "number":
        return "(0|[1-9][0-9]{0,3})(\\.[0-9]{1,2})?"
    if kind == "boolean":
        return "(true|false)"
    if kind == "null":
        return "null"
    if kind == "array":
        item = value_regex(schema.get("items", {"type": "string"}), max_str, max_items)
        return f"\\[{item}(, {item}){{0,{max_items - 1}}}\\]"
    if kind == "object":
        return object_regex(schema, max_str, max_items)
    raise ValueError(f"tool_call_regex cannot constrain JSON type {kind!r}; simplify the tool schema")


def object_regex(schema: dict[str, Any], max_str: int = 16, max_items: int = 2) -> str:
    """An object with its required properties (all of them when none is marked required), in order."""
    props = schema.get("properties", {})
    keys = schema.get("required", list(props))
    fields = [escape(json.dumps(k)) + ": " + value_regex(props.get(k, {}), max_str, max_items) for k in keys]
    return "\\{" + ", ".join(fields) + "\\}"


def tool_call_regex(tools: list[dict[str, Any]], max_str: int = 16, max_items: int = 2, message_chars: int = 0) -> str:
    """The regex of one `<tool_call>` block calling any of `tools` (OpenAI function schemas); with `message_chars`,
    a plain message of up to that many letters and simple punctuation is admitted too (an episode whose customer
    must be answered)."""
    if not tools:
        raise ValueError("force_tool_calls needs at least one tool")
    calls = []
    for tool in tools:
        fn = tool["function"]
        args = object_regex(fn.get("parameters") or {"type": "object", "properties": {}}, max_str, max_items)
        calls.append(escape('{"name": ' + json.dumps(fn["name"]) + ', "arguments": ') + args + "\\}")
    regex = "<tool_call>\\n(" + "|".join(calls) + ")\\n</tool_call>"
    return f"({regex})|([A-Za-z][A-Za-z ,.?!]{{0,{message_chars - 1}}})" if message_chars else regex


def max_match_tokens(regex: str) -> int:
    """At most how many tokens a reply held to `regex` takes: its longest match in characters, since the
    constraint admits any tokenization and a model may spell a match a character at a time (these regexes
    are ASCII: one character, at least one token's worth), plus the end-of-turn token. A max_tokens below
    this can cut a forced call.

    >>> max_match_tokens('(yes|no|maybe)!')   # 'maybe!' spelled a character at a time, then the end
    7
    """
    import re._parser as parser  # the standard library's regex parser: it knows each pattern's longest match

    longest = parser.parse(regex).getwidth()[1]
    if longest >= parser.MAXREPEAT:
        raise ValueError("the regex admits matches of any length; bound its repeats")
    return longest + 1
