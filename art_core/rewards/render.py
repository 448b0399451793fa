"""What the RULER judge reads: trajectories rendered as text, their shared beginning sent once.

Each message becomes one text block (tool calls and tool results spelled out, random tool-call ids
left out, so two rollouts that did the same thing render the same). The longest run of blocks that
all trajectories start with goes once into `<shared_context>`; each trajectory then sends only the
rest, inside `<trajectory id="...">`.

    >>> a = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    >>> b = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go away"}]
    >>> shared_prefix_len([render_messages(a), render_messages(b)])
    1
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from art_core.trajectories import Message, Tools

Blocks = tuple[str, ...]

SYSTEM_PROMPT = """\
You judge the work of an AI agent for a reinforcement-learning run. The agent made several attempts \
at the same task; each attempt is one trajectory. Give every trajectory a score between 0 and 1 \
according to the rubric below. Judge the attempts against each other: the scores are used relative \
to one another, so their order and the size of the gaps between them matter more than their level.

Rubric:
{rubric}

How the attempts are shown: what all attempts have in common comes once, inside <shared_context>. \
Each attempt then appears inside <trajectory id="..."> with only what follows that shared \
beginning. A message starts with its role in square brackets. `call name(arguments)` is a tool call \
the agent made; `[tool result of name]` is what that tool answered.

Answer with a JSON object holding one entry per trajectory id. In each entry write a short \
explanation first (a sentence or two on what decided the score), then the score."""


def _content_text(content: Any) -> str:
    """Message content as text: strings as they are, multi-part content as its text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return str(content)


def _arguments_text(arguments: Any) -> str:
    """Tool-call arguments compactly; JSON is re-dumped so spacing differences do not split identical calls."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments  # the agent wrote invalid JSON: the judge should see exactly that
    return json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))


def render_message(message: Message, tool_names: dict[str, str]) -> str:
    """One message as a text block. `tool_names` maps tool-call ids seen so far to tool names."""
    role = message.get("role", "unknown")
    text = _content_text(message.get("content"))
    if role == "tool":
        name = message.get("name") or tool_names.get(str(message.get("tool_call_id")), "a tool")
        return f"[tool result of {name}]\n{text}".rstrip()
    lines = [f"[{role}]"]
    if text:
        lines.append(text)
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        name = fn.get("name", "?")
        if isinstance(call, dict) and call.get("id"):
            tool_names[str(call["id"])] = name
        lines.append(f"call {name}({_arguments_text(fn.get('arguments', ''))})")
    return "\n".join(lines)


def render_messages(messages: Sequence[Message]) -> Blocks:
    """A whole conversation as one block per message."""
    tool_names: dict[str, str] = {}
    return tuple(render_message(m, tool_names) for m in messages)


def render_tools(tools: Tools | None) -> str:
    """The tools offered, one line each: name(parameters): description. '' when there are none."""
    if not tools:
        return ""
    lines = []
    for tool in tools:
        fn = tool.get("function", tool)
        params = ", ".join((fn.get("parameters") or {}).get("properties", {}))
        desc = " ".join(str(fn.get("description", "")).split())
        lines.append(f"- {fn.get('name', '?')}({params}): {desc}".rstrip(": "))
    return "\n".join(lines)


def shared_prefix_len(rendered: Sequence[Blocks]) -> int:
    """How many leading blocks every trajectory has in common (0 when there is only one)."""
    if len(rendered) < 2:
        return 0
    n = 0
    for column in zip(*rendered):
        if any(block != column[0] for block in column[1:]):
            break
        n += 1
    return n


def _tools_text(tools: Sequence[Tools | None]) -> tuple[str, list[str]]:
    """Tools in the shared context when every trajectory had the same ones, else per trajectory."""
    texts = [render_tools(t) for t in tools]
    if len(set(texts)) <= 1:
        return (texts[0] if texts else ""), [""] * len(texts)
    return "", texts


def judge_user_message(
    rendered: Sequence[Blocks],
    ids: Sequence[str],
    tools: Sequence[Tools | None] | None = None,
    *,
    share_prefix: bool = True,
) -> str:
    """The user message for the judge. `share_prefix=False` sends every trajectory whole (for comparison)."""
    if len(rendered) != len(ids):
        raise ValueError(f"{len(rendered)} trajectories but {len(ids)} ids")
    n = shared_prefix_len(rendered) if share_prefix else 0
    shared_tools, own_tools = _tools_text(tools if tools is not None else [None] * len(rendered))
    parts = []
    context = list(rendered[0][:n]) if rendered else []
    if shared_tools:
        context.insert(0, "[tools the agent could call]\n" + shared_tools)
    if context:
        parts.append("<shared_context>\n" + "\n\n".join(context) + "\n</shared_context>")
    for tid, blocks, own in zip(ids, rendered, own_tools):
        body = list(blocks[n:])
        if own:
            body.insert(0, "[tools the agent could call]\n" + own)
        text = "\n\n".join(body) if body else "(nothing after the shared context: the attempt ends there)"
        parts.append(f'<trajectory id="{tid}">\n{text}\n</trajectory>')
    return "\n\n".join(parts)


def judge_messages(
    rendered: Sequence[Blocks],
    ids: Sequence[str],
    rubric: str,
    tools: Sequence[Tools | None] | None = None,
    *,
    share_prefix: bool = True,
) -> list[dict[str, str]]:
    """The full chat sent to the judge: our instructions with the rubric, then the trajectories."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(rubric=rubric.strip())},
        {"role": "user", "content": judge_user_message(rendered, ids, tools, share_prefix=share_prefix)},
    ]
