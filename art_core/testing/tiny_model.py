"""Build a tiny random-weight chat model offline: Qwen2 architecture, a locally trained BPE tokenizer,
and the Qwen2.5 chat template with tools. transformers and vLLM both load the directory.

No model hub is reachable here, so tests, the demo and benchmarks build their model with this:

    >>> path = build_tiny_model("/tmp/tiny")            # ~1M parameters, under a second
    >>> path = build_tiny_model("/tmp/small", size="small")  # ~3.5M parameters, for benchmarks

or from a shell (what the train flow suggests when its base_model folder is missing):

    python -m art_core.testing.tiny_model ./.models/tiny [--size small] [--seed 0]

Shape of the models (hidden, layers, heads, kv heads, MLP): tiny 128/2/4/2/256, small 256/4/4/2/512;
vocabulary 4096 in both; context 16,384 positions (room for a tau2 policy and tool schemas in the prompt).
The same seed gives the same weights and tokenizer byte for byte.

A LoRA can move it: the final RMSNorm's weight is NORM_SCALE (4) instead of 1. With tied embeddings of
std 0.02 behind a norm of weight 1, a random model's logits span about +-1, so its next-token
distribution is nearly uniform and stays there whatever a rank-8 adapter does; at 4x the logits span
about +-4 and GRPO on a LoRA raises a learnable reward within a few steps (tests/pipeline/test_demo.py).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=256
    ),
    "small": dict(
        hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=512
    ),
}
VOCAB_SIZE = 4096
MAX_POSITIONS = 16384
# The final norm's weight: large enough for a LoRA to move the logits (see the module docstring).
NORM_SCALE = 4.0

# Qwen2's pre-tokenizer split pattern; without it the tokenizer reloads differently (docs/design.md).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added (not special) so they survive skip_special_tokens and vLLM's hermes parser finds them in the vocab.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

_WORDS = (
    "the a an and or but if then else when while for to of in on at by with from as is are was were be been "
    "you your we our they their he she it this that these those what which who how why where yes no please "
    "thank thanks hello hi sorry help can could would should will may might must do does did done have has had "
    "order orders item items product products user users email name first last zip code address city state "
    "country payment method card credit gift balance paypal refund return exchange cancel cancelled pending "
    "processed delivered status price total amount flight flights reservation booking book cabin economy "
    "business basic seat seats bag bags baggage passenger passengers airport date time day month one way round "
    "trip insurance certificate membership gold silver regular tool call result function arguments error "
    "confirm proceed change modify update details list find get search direct stop transfer human agent "
    "board move left right up down row column win lose draw game player score tile x o empty cell next turn "
    "reward step model train true false null system assistant content role type object string number integer "
    "array properties required description parameters"
).split()


def _corpus(seed: int) -> list[str]:
    """Text that covers chat markup, JSON tool calls, numbers and common words (deterministic)."""
    rng = random.Random(seed)
    # Pseudo-words from syllables give BPE enough distinct pairs to fill the vocabulary.
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "sh", "ch", "st", "er", "ing", "ed"]
    pseudo = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(6000)]
    vocabulary = _WORDS * 20 + pseudo
    lines = []
    for _ in range(12000):
        words = [rng.choice(vocabulary) for _ in range(rng.randint(3, 16))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 99999)))
        lines.append(" ".join(words).capitalize() + rng.choice([".", "?", "!", ":", ","]))
    for _ in range(500):
        args = {
            rng.choice(_WORDS): rng.choice([rng.choice(_WORDS), rng.randint(0, 999)]) for _ in range(rng.randint(1, 3))
        }
        call = {"name": "_".join(rng.sample(_WORDS, 2)), "arguments": args}
        lines.append(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
        lines.append(f"<|im_start|>assistant\n{' '.join(rng.sample(_WORDS, 5))}<|im_end|>\n")
    return lines


def _chat_template() -> str:
    """Qwen2.5's chat template with tools, as TRL ships it (prefix-preserving across turns)."""
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def build_tokenizer(seed: int = 0):
    """Train a byte-level BPE tokenizer with Qwen2's pre-tokenizer and an NFC normalizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(TOOL_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(TOOL_TOKENS, special_tokens=False)
    fast.chat_template = _chat_template()
    return fast


def build_tiny_model(
    path: str, size: str = "tiny", seed: int = 0, norm_scale: float = NORM_SCALE, max_positions: int = MAX_POSITIONS
) -> str:
    """Write a random-weight Qwen2 chat model to `path` and return `path`.

    `norm_scale` multiplies the final norm's weight (1.0 gives the plain random init, whose logits a
    LoRA barely moves); `max_positions` is the context length vLLM serves by default.

    >>> build_tiny_model("/tmp/tiny-model")
    '/tmp/tiny-model'
    """
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}: use one of {', '.join(SIZES)}")
    if norm_scale <= 0 or max_positions < 256:
        raise ValueError(f"norm_scale must be > 0 and max_positions >= 256; got {norm_scale}, {max_positions}")
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(seed)
    tokenizer.model_max_length = max_positions
    vocab = len(tokenizer)
    config = Qwen2Config(
        vocab_size=vocab,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
        **SIZES[size],
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.model.norm.weight.mul_(norm_scale)  # a deterministic multiply: same seed, same bytes
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    eos = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    GenerationConfig(eos_token_id=eos, pad_token_id=tokenizer.pad_token_id).save_pretrained(path)
    return path


def model_info(path: str) -> dict[str, Any]:
    """Parameter count and shape of a built model, read from its config (no torch needed)."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    h, layers, inter, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = h // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    per_layer = h * h * 2 + h * kv * 2 + (h + 2 * kv) + 3 * h * inter + 2 * h
    return {"parameters": vocab * h + layers * per_layer + h, "hidden_size": h, "layers": layers, "vocab_size": vocab}


def main(argv: list[str] | None = None) -> None:
    """`python -m art_core.testing.tiny_model PATH`: build the model there and say what was built."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m art_core.testing.tiny_model", description=main.__doc__)
    p.add_argument("path", help="folder to write the model to (created if missing)")
    p.add_argument("--size", default="tiny", choices=sorted(SIZES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--norm-scale", type=float, default=NORM_SCALE, help="final norm weight (1.0: the plain random init)"
    )
    p.add_argument("--max-positions", type=int, default=MAX_POSITIONS, help="context length")
    args = p.parse_args(argv)
    path = build_tiny_model(
        args.path, size=args.size, seed=args.seed, norm_scale=args.norm_scale, max_positions=args.max_positions
    )
    info = model_info(path)
    print(
        f"built a {args.size} model ({info['parameters']:,} parameters, vocabulary {info['vocab_size']}, "
        f"context {args.max_positions}) in {os.path.abspath(path)}"
    )


if __name__ == "__main__":
    main()
