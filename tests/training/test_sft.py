"""Supervised fine-tuning: loss only on assistant tokens of the tiny model's Qwen2.5 template, bad JSONL named,
and through LocalBackend a reply the base model never gives becomes its greedy reply, then GRPO continues."""

from __future__ import annotations

import json

import pytest
import torch

import art_core as art
from art_core.sft import learning_rates, parse_sft_lines, train_sft_from_file
from art_core.store import ModelStore
from art_core.training.sft import TrainSFTConfig, tokenize_sft

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather now",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
        },
    }
]
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Hobart?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"location": "Hobart"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "15C, cloudy"},
    {"role": "assistant", "content": "15C and cloudy."},
]


def _trained_spans(tokenizer, seq) -> list[str]:
    spans, cur = [], []
    for token, trained in zip(seq.input_ids + [None], seq.trainable + [False]):
        if trained:
            cur.append(token)
        elif cur:
            spans.append(tokenizer.decode(cur))
            cur = []
    return spans


def test_only_the_assistant_turns_carry_loss_on_the_qwen_template(tokenizer):
    seq = tokenize_sft(CHAT, TOOLS, tokenizer)
    assert _trained_spans(tokenizer, seq) == [
        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Hobart"}}\n</tool_call><|im_end|>',
        "15C and cloudy.<|im_end|>",
    ]
    text = tokenizer.decode(seq.input_ids)  # the whole conversation is there, as context
    assert "You are terse." in text and "Weather in Hobart?" in text and "15C, cloudy" in text and "get_weather" in text
    # ...and it is the template's own rendering (tool arguments as the object the hermes parser reads).
    messages = [
        *CHAT[:2],
        {
            **CHAT[2],
            "tool_calls": [
                {**CHAT[2]["tool_calls"][0], "function": {"name": "get_weather", "arguments": {"location": "Hobart"}}}
            ],
        },
        *CHAT[3:],
    ]
    assert text + "\n" == tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    last = tokenize_sft(CHAT, TOOLS, tokenizer, assistant_turns="last")
    assert _trained_spans(tokenizer, last) == ["15C and cloudy.<|im_end|>"] and last.input_ids == seq.input_ids


def test_bad_sft_data_is_refused_naming_the_line():
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    with pytest.raises(ValueError, match="line 2: the last message must be the assistant's"):
        parse_sft_lines(good + "\n" + json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    with pytest.raises(ValueError, match="line 1: not JSON"):
        parse_sft_lines("{messages: []}")
    with pytest.raises(ValueError, match="role 'bot'"):
        parse_sft_lines(
            json.dumps({"messages": [{"role": "bot", "content": "x"}, {"role": "assistant", "content": "y"}]})
        )
    with pytest.raises(ValueError, match="one per batch"):
        TrainSFTConfig(learning_rate=[1e-3, 1e-3], batch_size=1).rates(3)
    assert learning_rates(3, 1.0, "constant") == [1.0, 1.0, 1.0]
    assert learning_rates(3, 2.0, "cosine") == pytest.approx([2.0, 1.0, 0.0])


TARGET = "ANSWER: 42"
PROMPTS = [
    "What is six times seven?",
    "Tell me the answer.",
    "hello",
    "Compute 40 + 2.",
    "Who are you?",
    "What now?",
    "Give a number.",
    "Reply please.",
]


async def _greedy(model: art.TrainableModel, prompt: str) -> str:
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(),
        messages=[{"role": "user", "content": prompt}],
        temperature=0,
        max_completion_tokens=12,
    )
    return completion.choices[0].message.content or ""


@pytest.mark.vllm
async def test_sft_teaches_a_reply_and_grpo_continues_from_it(vllm_server, tiny_model_path, tmp_path):
    from art_core.local import LocalBackend

    data = tmp_path / "train.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": TARGET}]})
            for p in PROMPTS
        )
    )
    backend = LocalBackend(path=str(tmp_path / ".art"), server=vllm_server)
    model = art.TrainableModel(name="sft", project="sft", base_model=tiny_model_path)
    await model.register(backend)
    assert await _greedy(model, "Something new?") != TARGET  # the random base model never says it
    result = await train_sft_from_file(model, str(data), epochs=4, batch_size=2, peak_lr=1e-2, schedule_type="constant")
    assert result.step == 4 and model.get_inference_name() == "sft@4"  # one checkpoint per epoch, served
    assert await _greedy(model, "Something new?") == TARGET  # now its most likely reply, even to a new prompt

    async def rollout() -> art.Trajectory:
        messages = [{"role": "user", "content": "Something new?"}]
        completion = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(), messages=messages, max_completion_tokens=8
        )
        choice = completion.choices[0]
        return art.Trajectory(messages_and_choices=[*messages, choice], reward=len(choice.message.content or "") / 10)

    groups = await art.gather_trajectory_groups([art.TrajectoryGroup(rollout() for _ in range(4))], pbar_desc=None)
    trained = await backend.train(model, groups, learning_rate=1e-3)
    assert trained.step == 5  # GRPO continues the numbering from the SFT checkpoint
    history = ModelStore(backend.storage, "sft", "sft").read_history()
    assert [r["step"] for r in history if "sft/loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in history if "train/loss" in r] == [5]
    losses = [r["sft/loss"] for r in history if "sft/loss" in r]
    assert losses[-1] < losses[0] / 4
    await backend.close()


def _sft_epoch(path, tmp_path, config, name):
    """One SFT epoch from a fresh adapter: its metrics and the LoRA weights it wrote."""
    from safetensors.torch import load_file

    from art_core.storage import Storage
    from art_core.training.session import clear_model_cache
    from art_core.training.sft import sft_step

    clear_model_cache()
    policy = " ".join(f"Rule {i}: confirm the order id before any change." for i in range(12))
    conversations = [
        art.Trajectory(
            messages_and_choices=[
                {"role": "system", "content": policy},
                {"role": "user", "content": f"Where is order {n}?"},
                {"role": "assistant", "content": f"Order {n} ships {'today' if n % 2 else 'tomorrow'}."},
            ],
            tools=TOOLS,
            reward=0.0,
        )
        for n in range(6)
    ]
    result = sft_step(
        base_model=path,
        trajectories=conversations,
        config=TrainSFTConfig(batch_size=3, learning_rate=1e-3),
        train_config=config,
        storage=Storage(str(tmp_path / name)),
        project="p",
        name=name,
        step=0,
    )
    return result.metrics, load_file(f"{result.checkpoint_path}/adapter_model.safetensors")


def test_sft_computes_a_batchs_shared_system_prompt_and_tools_once_and_trains_the_same(
    tiny_model_path, tmp_path, fresh_trainer
):
    from art_core.training.config import TrainConfig

    config = TrainConfig(max_grad_norm=None, dtype="float32")
    shared, w_shared = _sft_epoch(tiny_model_path, tmp_path, config, "shared")
    plain, w_plain = _sft_epoch(tiny_model_path, tmp_path, config.model_copy(update={"share_prefixes": False}), "plain")
    assert plain["tokens_computed"] == plain["tokens_in_batch"] == shared["tokens_in_batch"]
    assert shared["tokens_computed"] < 0.6 * shared["tokens_in_batch"], shared  # the policy and tools, once a batch
    assert shared["loss"] == pytest.approx(plain["loss"], rel=1e-4)
    assert w_shared.keys() == w_plain.keys()
    for key in w_plain:
        assert torch.allclose(w_shared[key], w_plain[key], rtol=1e-3, atol=1e-6), key
