"""The offline tiny model: transformers loads and generates; the chat template renders tool calls and
tool results; the tokenizer reloads identically; the same seed gives the same files; its logits span a
range a LoRA can move; `python -m art_core.testing.tiny_model PATH` builds it; vLLM serves its 16k context."""

import hashlib
import os
import pathlib
import subprocess
import sys

import pytest

from art_core.testing import build_tiny_model, model_info

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "cancel_pending_order",
            "description": "Cancel an order that has not shipped.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "You are a store agent."},
    {"role": "user", "content": "Please cancel order #W123."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "cancel_pending_order", "arguments": {"order_id": "#W123"}}}
        ],
    },
    {"role": "tool", "content": '{"status": "cancelled"}'},
    {"role": "assistant", "content": "Your order is cancelled."},
]


def digest(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> pathlib.Path:
    return pathlib.Path(build_tiny_model(str(tmp_path_factory.mktemp("tiny"))))


def test_loads_with_transformers_and_generates(tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny)
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 1.5e6
    ids = tok.apply_chat_template(CONVERSATION[:2], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=6, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 6 or tok.eos_token_id in out[0].tolist()


def test_chat_template_renders_tool_calls_and_results(tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    text = tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    assert '<tools>\n{"type": "function", "function": {"name": "cancel_pending_order"' in text  # schema offered
    assert '<tool_call>\n{"name": "cancel_pending_order", "arguments": {"order_id": "#W123"}}\n</tool_call>' in text
    assert '<tool_response>\n{"status": "cancelled"}\n</tool_response>' in text
    assert text.count("<|im_start|>assistant") == 2
    # Every special marker is one token, so the tool-call parser can find it.
    for marker in ("<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>"):
        assert len(tok(marker, add_special_tokens=False)["input_ids"]) == 1


def test_tokenizer_reloads_identically(tiny, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    text = 'Héllo wörld! Order #W1234567 costs $1,299.99\n\n  <tool_call>{"a": 1}</tool_call> 東京'
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert tok(text)["input_ids"] == again(text)["input_ids"]
    assert again.decode(again(text)["input_ids"]) == text


def test_same_seed_same_files_other_seed_other_weights(tiny, tmp_path):
    same = pathlib.Path(build_tiny_model(str(tmp_path / "same")))
    other = pathlib.Path(build_tiny_model(str(tmp_path / "other"), seed=1))
    assert digest(same) == digest(tiny)
    assert digest(other) != digest(tiny)


def test_small_size_and_bad_size(tmp_path):
    path = build_tiny_model(str(tmp_path / "small"), size="small")
    assert 3e6 < model_info(path)["parameters"] < 4.5e6
    with pytest.raises(ValueError, match="unknown size 'huge'"):
        build_tiny_model(str(tmp_path / "huge"), size="huge")


def _last_logits(path: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    ids = tok.apply_chat_template(CONVERSATION[:2], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        return model(**ids).logits[0, -1]


def test_default_logits_span_a_range_a_lora_can_move(tiny, tmp_path):
    """The plain random init has near-uniform logits (about +-1) that no LoRA moves far; the default is 4x that."""
    plain = _last_logits(build_tiny_model(str(tmp_path / "plain"), norm_scale=1.0))
    default = _last_logits(str(tiny))
    assert float(plain.std()) < 0.35 and float(default.std()) > 0.7
    assert abs(float(default.std()) / float(plain.std()) - 4.0) < 0.1  # the final norm scales logits linearly
    assert float(default.softmax(-1).max()) > 5 * float(plain.softmax(-1).max())


def test_context_is_16k_positions(tiny):
    import json

    from transformers import AutoTokenizer

    assert json.loads((tiny / "config.json").read_text())["max_position_embeddings"] == 16384
    assert AutoTokenizer.from_pretrained(tiny).model_max_length == 16384


def test_command_line_builds_the_same_model(tiny, tmp_path):
    """The train flow's hint for a missing base model, `python -m art_core.testing.tiny_model PATH`, builds it."""
    out = tmp_path / "cli" / "tiny"
    r = subprocess.run(
        [sys.executable, "-m", "art_core.testing.tiny_model", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TOKENIZERS_PARALLELISM="false"),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"in {out}" in r.stdout and "context 16384" in r.stdout
    assert "RuntimeWarning" not in r.stderr  # runpy warns when the package imported the module first
    assert digest(out) == digest(tiny)
    bad = subprocess.run(
        [sys.executable, "-m", "art_core.testing.tiny_model", str(tmp_path / "x"), "--size", "huge"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "invalid choice: 'huge'" in bad.stderr


@pytest.mark.vllm
async def test_vllm_serves_a_prompt_of_12k_tokens(vllm_endpoint, tiny_model_path):
    """A tau2 policy with its tool schemas runs to about 10k tokens: the CPU server takes the whole context."""
    from openai import AsyncOpenAI
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    words = (" order refund cancel flight seat passenger exchange" * 4000).split()
    prompt = " ".join(words[:12000])
    assert 11000 < len(tok(prompt)["input_ids"]) < 16000
    client = AsyncOpenAI(base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key or "none", max_retries=0)
    r = await client.chat.completions.create(
        model=vllm_endpoint.model, messages=[{"role": "user", "content": prompt}], max_tokens=4, temperature=1.0
    )
    assert r.usage.prompt_tokens > 11000 and r.usage.completion_tokens >= 1
