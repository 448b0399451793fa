"""Templates without tool support: the tools reach the prompt, or the run is refused before anything starts."""

from __future__ import annotations

import json
import shutil

import pytest

# SmolLM2-135M-Instruct's own template, in effect: ChatML, a default system turn, and no `tools` at all.
CHATML_NO_TOOLS = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_price",
            "description": "Price of an item.",
            "parameters": {
                "type": "object",
                "properties": {"item": {"type": "string"}, "currency": {"type": "string"}},
                "required": ["item"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "place_order",
            "description": "Order items.",
            "parameters": {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"type": "string"}}},
                "required": ["items"],
            },
        },
    },
]


@pytest.fixture
def toolless_model(tiny_model_path, tmp_path) -> str:
    """The tiny model with a ChatML template that ignores tools (what SmolLM2 ships)."""
    folder = tmp_path / "toolless"
    shutil.copytree(tiny_model_path, folder)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.chat_template = CHATML_NO_TOOLS
    tok.save_pretrained(str(folder))
    return str(folder)


def test_a_template_that_drops_tools_gets_them_in_the_system_turn(toolless_model):
    from transformers import AutoTokenizer

    from art_core.chat_template import ensure_tool_template, renders_tools

    before = AutoTokenizer.from_pretrained(toolless_model)
    assert not renders_tools(before)
    plain = [{"role": "user", "content": "hi"}]
    plain_text = before.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)

    assert ensure_tool_template(toolless_model) is True
    tok = AutoTokenizer.from_pretrained(toolless_model)
    text = tok.apply_chat_template(plain, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    for name in ("lookup_price", "place_order", '"item"', '"currency"', '"items"'):
        assert name in text, name
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant.")  # the model's own system text kept
    # Without tools the template renders exactly as before.
    assert tok.apply_chat_template(plain, tokenize=False, add_generation_prompt=True) == plain_text
    assert ensure_tool_template(toolless_model) is False  # already renders tools: left alone


def test_multi_turn_tool_trajectories_tokenize_against_the_new_template(toolless_model):
    """A call, its result and an answer: the sampled turns are spliced in and every prompt is a prefix."""
    from art_core.chat_template import ensure_tool_template

    ensure_tool_template(toolless_model)
    _check_multi_turn_tokenization(toolless_model)


def test_multi_turn_tool_trajectories_tokenize_against_smollm2s_real_tokenizer(smollm2_path):
    _check_multi_turn_tokenization(smollm2_path)


def _check_multi_turn_tokenization(model_dir: str) -> None:
    from openai.types.chat.chat_completion import Choice
    from transformers import AutoTokenizer

    from art_core.training.tokenize import tokenize_trajectory
    from art_core.trajectories import Trajectory

    tok = AutoTokenizer.from_pretrained(model_dir)

    def choice(text: str, calls=None) -> Choice:
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        content = [{"token": f"token_id:{i}", "logprob": -0.5, "bytes": None, "top_logprobs": []} for i in ids]
        message = {"role": "assistant", "content": None if calls else text, "tool_calls": calls}
        return Choice.model_validate(
            {"index": 0, "finish_reason": "stop", "message": message, "logprobs": {"content": content}}
        )

    call_text = '<tool_call>\n{"name": "lookup_price", "arguments": {"item": "lamp"}}\n</tool_call>'
    calls = [{"id": "c1", "type": "function", "function": {"name": "lookup_price", "arguments": '{"item": "lamp"}'}}]
    traj = Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "How much is the lamp?"},
            choice(call_text, calls),
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"item": "lamp", "price": "$37"})},
            choice("The lamp costs $37."),
        ],
        tools=TOOLS,
        reward=1.0,
    )
    seq = tokenize_trajectory(traj, tok, group_index=0, trajectory_index=0)
    text = tok.decode(seq.input_ids)
    assert "lookup_price" in text and "<tool_response>" in text and "$37" in text
    sampled = tok.decode([i for i, t in zip(seq.input_ids, seq.trainable) if t])
    assert sampled == call_text + "<|im_end|>" + "The lamp costs $37.<|im_end|>"


def test_a_tool_task_on_a_template_that_drops_tools_is_refused_before_anything_starts(toolless_model):
    from art_pipeline.flows.config import RunConfig
    from art_pipeline.flows.preflight import preflight

    with pytest.raises(ValueError, match=r"ignores `tools`.*python -m art_core.chat_template"):
        preflight(
            RunConfig(
                project="p",
                model="m",
                base_model=toolless_model,
                environment={"name": "price-lookup"},
                train={"old_logprobs": "recompute"},
            )
        )
    # A task without tools is fine on the same model.
    preflight(RunConfig(project="p", model="m", base_model=toolless_model, environment={"name": "word-quiz"}))


def test_a_template_that_is_not_chatml_is_refused_with_how_to_fix_it():
    from art_core.chat_template import ToolTemplateError, tool_template

    with pytest.raises(ToolTemplateError, match="not ChatML"):
        tool_template("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}", None)


def _base_model_tokenizer(folder, specials: list[str]) -> None:
    """A byte-level BPE tokenizer with these special tokens and no chat template, as a base model's GGUF has."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["How much is the lamp? It costs $37.", json.dumps(TOOLS)] * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    if "<bos>" in specials:
        fast.bos_token = "<bos>"
    assert fast.chat_template is None
    fast.save_pretrained(str(folder))
    GenerationConfig(eos_token_id=fast.eos_token_id).save_pretrained(str(folder))


def test_a_gemma_base_model_without_a_template_gets_one_in_its_own_turn_markup(tmp_path):
    """Gemma 3 270M's GGUF ships no chat template: it gets a whole one in Gemma's markup (bos first, `model`
    turns), tools in the system turn, and generation stops at <end_of_turn>; SFT trains each model turn to its end."""
    from transformers import AutoTokenizer, GenerationConfig

    from art_core.chat_template import ensure_tool_template, renders_tools
    from art_core.training.sft import tokenize_sft

    _base_model_tokenizer(tmp_path, ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"])
    assert ensure_tool_template(tmp_path) is True
    tok = AutoTokenizer.from_pretrained(str(tmp_path))
    assert renders_tools(tok)
    user = [{"role": "user", "content": "How much is the lamp?"}]
    assert tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True) == (
        "<bos><start_of_turn>user\nHow much is the lamp?<end_of_turn>\n<start_of_turn>model\n"
    )
    call = {"type": "function", "function": {"name": "lookup_price", "arguments": '{"item": "lamp"}'}}
    chat = [
        *user,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": '{"price": "$37"}'},
        {"role": "assistant", "content": "It costs $37."},
    ]
    text = tok.apply_chat_template(chat, tools=TOOLS, tokenize=False)
    assert text.startswith("<bos><start_of_turn>system\n") and '"name": "place_order"' in text
    assert '<start_of_turn>model\n<tool_call>\n{"name": "lookup_price", "arguments": {"item": "lamp"}}' in text
    assert "<start_of_turn>user\n<tool_response>\n" in text and "<start_of_turn>assistant" not in text
    end = tok.convert_tokens_to_ids("<end_of_turn>")
    assert end in GenerationConfig.from_pretrained(str(tmp_path)).eos_token_id
    seq = tokenize_sft(chat, TOOLS, tok)
    trained = tok.decode([t for t, m in zip(seq.input_ids, seq.trainable) if m])
    assert (
        trained
        == '<tool_call>\n{"name": "lookup_price", "arguments": {"item": "lamp"}}\n</tool_call><end_of_turn>'
        + ("It costs $37.<end_of_turn>")
    )


def test_a_base_model_with_no_template_and_no_turn_tokens_is_refused_saying_what_to_give_it(tmp_path):
    from art_core.chat_template import ToolTemplateError, ensure_tool_template

    _base_model_tokenizer(tmp_path, ["<pad>", "<eos>"])
    with pytest.raises(ToolTemplateError, match="ships no chat template .* Give the folder a chat template"):
        ensure_tool_template(tmp_path)
