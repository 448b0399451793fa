"""What a model's chat template does with tools, and a tool-aware template for models that lack one.

A template that ignores `tools=` renders a prompt with no tool in it: the model is asked to use tools it
was never shown, and a tool task would train on those prompts. `renders_tools` finds out by rendering a
probe tool; `ensure_tool_template` gives a ChatML model folder (SmolLM2's, say) a template that lists the
tools in the system turn and writes calls and results in the hermes format (`<tools>`, `<tool_call>`,
`<tool_response>`), the format vLLM's `hermes` tool parser reads back. Without tools the new template
renders exactly as the old one did: its old text is kept as the no-tools branch. A base model that ships no
template at all (Gemma 3 270M's GGUF) gets a whole one in the turn markup its vocabulary holds: ChatML's
`<|im_start|>`/`<|im_end|>`, or Gemma's `<start_of_turn>`/`<end_of_turn>` (with its `<bos>` first and
`model` for the assistant's turns), and the end-of-turn token among the tokens generation stops at.

    >>> renders_tools(tokenizer)                  # doctest: +SKIP
    False
    >>> ensure_tool_template("/models/SmolLM2")   # doctest: +SKIP
    True

True: the folder's template was replaced (False: its own template renders tools already).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "art_probe_lookup_7f3a",
        "description": "probe",
        "parameters": {"type": "object", "properties": {"art_probe_arg_91c2": {"type": "string"}}, "required": []},
    },
}


class ToolTemplateError(ValueError):
    """A template that cannot show the tools to the model: the message says how to fix it."""


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template puts the tools' names and parameters in the prompt."""
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}], tools=[PROBE_TOOL], tokenize=False, add_generation_prompt=True
        )
    except Exception:  # a template that raises on tools shows none either
        return False
    return "art_probe_lookup_7f3a" in text and "art_probe_arg_91c2" in text


def default_system_prompt(tokenizer: Any) -> str | None:
    """The system text a ChatML template adds when the conversation has none (SmolLM2 adds one), else None."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    head = "<|im_start|>system\n"
    if not text.startswith(head):
        return None
    return text[len(head) :].split("<|im_end|>", 1)[0]


# The tools branch: the system turn (the user's, or the model's default) followed by the tool list; assistant
# tool calls as <tool_call> JSON; tool results as a user turn holding <tool_response>. Written for ChatML.
_TOOLS_BRANCH = r"""
{%- set first_is_system = messages and messages[0]['role'] == 'system' -%}
{{- '<|im_start|>system\n' -}}
{%- if first_is_system -%}{{- messages[0]['content'] -}}{%- else -%}{{- DEFAULT_SYSTEM -}}{%- endif -%}
{{- '\n\nYou can call these functions. Their signatures, one JSON object per line, are inside <tools></tools>:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' -}}{{- (tool if tool.function is defined else {'type': 'function', 'function': tool}) | tojson -}}{%- endfor -%}
{{- '\n</tools>\n\nTo call a function, answer with a JSON object holding its name and arguments inside <tool_call></tool_call>:\n<tool_call>\n{"name": "function name", "arguments": {"argument": "value"}}\n</tool_call><|im_end|>\n' -}}
{%- for message in messages -%}
{%- if loop.first and first_is_system -%}
{%- elif message['role'] == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if message['content'] -%}{{- message['content'] -}}{%- endif -%}
{%- for call in (message['tool_calls'] or []) -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- if message['content'] or not loop.first -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' -}}
{%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif message['role'] == 'tool' -%}
{{- '<|im_start|>user\n<tool_response>\n' + message['content'] + '\n</tool_response><|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""


@dataclass(frozen=True)
class TurnMarkup:
    """How a template marks its turns: `start` + role + newline ... `end` + newline."""

    start: str
    end: str
    assistant: str  # the role name written for the assistant's turns
    bos: bool  # the template writes the tokenizer's bos_token first

    def branch(self) -> str:
        """The tools branch (written for ChatML) in this markup."""
        first = _TOOLS_BRANCH.replace(r"<|im_start|>assistant\n", self.start + self.assistant + r"\n")
        return first.replace("<|im_start|>", self.start).replace("<|im_end|>", self.end)

    def plain(self) -> str:
        """A template without tools: each message a turn, the assistant's own role name for its turns."""
        role = f"('{self.assistant}' if message['role'] == 'assistant' else message['role'])"
        return (
            "{%- for message in messages -%}"
            f"{{{{- '{self.start}' + {role} + '\\n' + (message['content'] or '') + '{self.end}\\n' -}}}}"
            "{%- endfor -%}"
            f"{{%- if add_generation_prompt -%}}{{{{- '{self.start}{self.assistant}\\n' -}}}}{{%- endif -%}}"
        )


CHATML = TurnMarkup("<|im_start|>", "<|im_end|>", "assistant", bos=False)
GEMMA = TurnMarkup("<start_of_turn>", "<end_of_turn>", "model", bos=True)


def vocabulary_markup(tokenizer: Any) -> TurnMarkup | None:
    """The turn markup whose markers are single tokens of this vocabulary (ChatML first), else None."""
    for markup in (CHATML, GEMMA):
        if all(len(tokenizer.encode(m, add_special_tokens=False)) == 1 for m in (markup.start, markup.end)):
            return markup
    return None


def tool_template(original: str, default_system: str | None, markup: TurnMarkup = CHATML) -> str:
    """A template that renders tools hermes-style and otherwise renders exactly as `original`."""
    if markup.start not in original:
        raise ToolTemplateError(
            "the chat template is not ChatML (no <|im_start|>), so no tool section can be added to it "
            "automatically; give the model folder a chat template that renders `tools` (tokenizer_config.json's "
            "chat_template) or use a model whose template does"
        )
    system = json.dumps(default_system or "You are a helpful assistant.")
    return (
        "{%- set DEFAULT_SYSTEM = "
        + system
        + " -%}\n"
        + ("{{- bos_token -}}" if markup.bos else "")
        + "{%- if tools -%}"
        + markup.branch()
        + "{%- else -%}"
        + original
        + "{%- endif -%}"
    )


def ensure_tool_template(model_dir: str | os.PathLike) -> bool:
    """Give the folder's tokenizer a tool-aware template if its own ignores tools; True when it was replaced.

    Raises ToolTemplateError when the template ignores tools and is not ChatML (nothing safe to add).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    if renders_tools(tokenizer):
        return False
    original = tokenizer.chat_template
    if original is None:  # a base model: a whole template in the markup its vocabulary has
        markup = vocabulary_markup(tokenizer)
        if markup is None:
            raise ToolTemplateError(
                f"{model_dir}: the model ships no chat template (a base model), and its vocabulary has neither "
                "ChatML's <|im_start|>/<|im_end|> nor Gemma's <start_of_turn>/<end_of_turn> as single tokens to "
                "write one with. Give the folder a chat template that renders `tools` (tokenizer_config.json's "
                "chat_template)"
            )
        tokenizer.chat_template = tool_template(markup.plain(), None, markup)
        _stop_at_turn_end(model_dir, tokenizer, markup)
        done = "it had no chat template; it now has one in its vocabulary's turn markup"
    elif not isinstance(original, str):
        raise ToolTemplateError(f"{model_dir}: the tokenizer has several chat templates; name one that renders tools")
    else:
        tokenizer.chat_template = tool_template(original, default_system_prompt(tokenizer))
        done = "its chat template ignored tools=; it now has one that renders them"
    if not renders_tools(tokenizer):
        raise ToolTemplateError(f"{model_dir}: the tool-aware template still renders no tools")
    tokenizer.save_pretrained(str(model_dir))
    log.warning("%s: %s, tools in the system turn (hermes format)", model_dir, done)
    return True


def _stop_at_turn_end(model_dir: str | os.PathLike, tokenizer: Any, markup: TurnMarkup) -> None:
    """Make the end-of-turn token one that generation stops at (generation_config.json's eos_token_id), as
    chat models ship it: a base model's stops only at its end of text, and would answer for the customer."""
    from transformers import GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(str(model_dir))
    except OSError:  # no generation_config.json
        config = GenerationConfig()
    eos = config.eos_token_id if config.eos_token_id is not None else tokenizer.eos_token_id
    stops = [eos] if isinstance(eos, int) else list(eos or [])
    end = tokenizer.convert_tokens_to_ids(markup.end)
    if end not in stops:
        config.eos_token_id = stops + [end]
        config.save_pretrained(str(model_dir))


_checked: dict[tuple[str, float], bool] = {}


def check_template_shows_tools(model_dir: str) -> None:
    """Refuse a model folder whose chat template ignores tools (remembered per folder and template file)."""
    from pathlib import Path

    config = Path(model_dir) / "tokenizer_config.json"
    key = (str(model_dir), config.stat().st_mtime if config.exists() else 0.0)
    if key not in _checked:
        from transformers import AutoTokenizer

        _checked[key] = renders_tools(AutoTokenizer.from_pretrained(str(model_dir)))
    if not _checked[key]:
        require_tool_template(None, str(model_dir))


def require_tool_template(tokenizer: Any, where: str) -> None:
    """Refuse a tokenizer whose template would hide the tools from the model (`where` names the model)."""
    if tokenizer is None or not renders_tools(tokenizer):
        raise ToolTemplateError(
            f"{where}: the chat template ignores `tools`, so the model would never see the tools it is asked to "
            f"use. Fix: `python -m art_core.chat_template {where}` adds a hermes-style tool section to a ChatML "
            "template (the template is unchanged for chats without tools), or give the folder a template that "
            "renders tools"
        )


if __name__ == "__main__":
    import sys

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for folder in sys.argv[1:]:
        print(folder, "replaced" if ensure_tool_template(folder) else "already renders tools")
