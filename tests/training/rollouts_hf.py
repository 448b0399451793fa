"""Test helpers: sampled Choices without a server, via transformers generate.

They build exactly what a vLLM OpenAI endpoint returns with logprobs=True and
return_tokens_as_token_ids (each token as "token_id:N" with its logprob), so the trainer is exercised
on realistic input before (and independently of) the inference server.
"""

from __future__ import annotations

from typing import Callable

from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob

from art_core.trajectories import Trajectory, TrajectoryGroup


def make_choice(
    ids: list[int],
    logprobs: list[float],
    content: str = "",
    tool_calls: list | None = None,
    finish_reason: str = "stop",
) -> Choice:
    """A Choice as vLLM returns it: the text, and per token "token_id:N" with its logprob."""
    items = [
        ChatCompletionTokenLogprob(token=f"token_id:{i}", logprob=lp, bytes=None, top_logprobs=[])
        for i, lp in zip(ids, logprobs)
    ]
    message = ChatCompletionMessage(role="assistant", content=content, tool_calls=tool_calls)
    if tool_calls:
        finish_reason = "tool_calls"
    return Choice(index=0, finish_reason=finish_reason, message=message, logprobs=ChoiceLogprobs(content=items))


def sample_groups(
    model,
    tokenizer,
    prompts: list[str],
    group_size: int,
    max_new_tokens: int,
    reward: Callable[[list[int]], float],
    seed: int,
) -> list[TrajectoryGroup]:
    """Sample `group_size` completions per prompt from the full distribution (temperature 1, no top-k)."""
    import torch

    torch.manual_seed(seed)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    groups = []
    for prompt in prompts:
        messages = [{"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **inputs,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=max_new_tokens,
                num_return_sequences=group_size,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos,
            )
        n_prompt = inputs["input_ids"].shape[1]
        logp = torch.stack(out.logits, dim=1).float().log_softmax(-1)  # [G, T, V]
        trajectories = []
        for g in range(group_size):
            ids = out.sequences[g, n_prompt:].tolist()
            if eos in ids:
                ids = ids[: ids.index(eos) + 1]
            lps = [float(logp[g, t, tok]) for t, tok in enumerate(ids)]
            choice = make_choice(
                ids,
                lps,
                content=tokenizer.decode(ids, skip_special_tokens=True),
                finish_reason="stop" if ids[-1] == eos else "length",
            )
            trajectories.append(Trajectory(messages_and_choices=[*messages, choice], reward=reward(ids)))
        groups.append(TrajectoryGroup(trajectories))
    return groups


def sharpen(model_path: str, out: str, scale: float = 4.0) -> str:
    """Copy a model with its final norm's weight set to `scale`, so its logits span a learnable range.

    A random model's logits span about +-1 with a norm weight of 1 (tied embeddings of std 0.02), so no
    LoRA can move its next-token distribution far from uniform; 4 lets the same LoRA reach it. Set, not
    multiplied: the tiny model builder may already scale its norm (art_core.testing.tiny_model.NORM_SCALE),
    and 16x makes a degenerate model that samples one token.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(model_path)
    with torch.no_grad():
        model.model.norm.weight.fill_(scale)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(model_path).save_pretrained(out)
    GenerationConfig.from_pretrained(model_path).save_pretrained(out)
    return out


def target_set(model_path: str, size: int = 400) -> set[int]:
    """The `size` tokens whose (tied) embeddings score highest along a fixed random direction.

    A set a random-weight model can learn to prefer: steering its last hidden state along that one
    direction, which a LoRA can learn, raises all of them at once.
    """
    import os

    import torch
    from safetensors.torch import load_file

    emb = load_file(os.path.join(model_path, "model.safetensors"))["model.embed_tokens.weight"]
    direction = torch.randn(emb.shape[1], generator=torch.Generator().manual_seed(0))
    return set(torch.topk(emb @ direction, size).indices.tolist())
