"""deploy_to="merged": the merged safetensors folder is a plain model that answers like base + adapter.

- Exactly, in float32, in this process (every CPU): the merged folder loaded by transformers gives the same
  next-token log-probabilities as the base with the adapter applied by peft, within 1e-3 nats.
- Through real vLLM: the merged folder served as a plain model next to the session server's base + adapter
  (LoRA applied at run time, loaded by deploy_to="vllm"), asked the same prompts greedily, in the session
  server's dtype. One server start (the merged one); the float32 pair of servers this test once started cost
  two more on every run.
  - float32 (a CPU without bf16 support): the greedy tokens must be the same and the logprobs equal within
    0.01 nats (measured 0.0000).
  - bfloat16 (AVX512-BF16 or AMX): LoRA's separate low-rank product and the merged weight round differently.
    The tiny model's final norm is scaled 4x, so its logits are large and near-ties flip: greedy tokens may
    part (seen on an AMX Xeon: 628 != 2140 at the third token), and once they part the continuations are
    different texts. So the check compares the logprobs of the tokens up to where the two first differ,
    within 0.5 nats (a logit of ~40 rounds by up to ~0.16 in bf16's 8-bit mantissa).
"""

from __future__ import annotations

import json
import os

import pytest

from art_core.deploy import deploy_model
from art_core.inference.server import ServerConfig, VLLMServer
from art_core.serving import Endpoint
from art_core.storage import Storage
from art_core.store import ModelRef
from tests.deploy.conftest import write_checkpoint

pytestmark = pytest.mark.vllm

PROMPTS = [
    [{"role": "user", "content": "Where is my order 1234?"}],
    [{"role": "system", "content": "You answer with one color."}, {"role": "user", "content": "Sky?"}],
]
IN_PROCESS_TOLERANCE = 1e-3  # nats, float32 transformers: merged vs peft's base + adapter
FLOAT32_TOLERANCE = 0.01  # nats per sampled token, vLLM in float32
BF16_TOLERANCE = 0.5  # vLLM in bf16


async def _greedy(client, model: str, messages) -> tuple[list[int], list[float]]:
    r = await client.chat.completions.create(
        model=model,
        messages=messages,
        temperature=0,
        max_tokens=12,
        logprobs=True,
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
    )
    content = r.choices[0].logprobs.content
    return [int(t.token.removeprefix("token_id:")) for t in content], [t.logprob for t in content]


async def _merged_folder(tmp_path, tiny_model_path) -> tuple[ModelRef, str]:
    storage = Storage(str(tmp_path / "art"))
    write_checkpoint(storage, "proj", "merge-agent", 1, tiny_model_path, seed=3)
    ref = ModelRef(storage_url=storage.root, project="proj", model="merge-agent", base_model=tiny_model_path)
    d = await deploy_model("merged", ref, step=1)
    assert (d.status, d.model_name, d.endpoint) == ("saved", "merge-agent", None)
    files = set(os.listdir(d.uri))
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "COMPLETE"} <= files
    assert not any(f.startswith("adapter_") for f in files), "a merged folder is a plain model, not an adapter"
    assert "quantization_config" not in json.loads(open(os.path.join(d.uri, "config.json")).read())
    return ref, d.uri


def _server(tmp_path, model: str, name: str, dtype: str | None, lora: bool) -> VLLMServer:
    config = ServerConfig(
        model=model, served_model_name=name, enable_lora=lora, dtype=dtype, log_path=str(tmp_path / f"{name}.log")
    )
    return VLLMServer(config)


async def _compare(lora_endpoint: Endpoint, ref: ModelRef, merged: VLLMServer, base_name: str):
    """Per prompt: (base+adapter ids, merged ids, base ids, base+adapter logprobs, merged logprobs)."""
    served = await deploy_model("vllm", ref, 1, inference_url=lora_endpoint.base_url, api_key=lora_endpoint.api_key)
    assert (served.status, served.model_name) == ("serving", "merge-agent@1")
    out = []
    async with lora_endpoint.client() as with_lora, Endpoint.of(merged).client() as plain:
        for messages in PROMPTS:
            lora_ids, lora_lps = await _greedy(with_lora, served.model_name, messages)
            merged_ids, merged_lps = await _greedy(plain, "merged", messages)
            base_ids, _ = await _greedy(with_lora, base_name, messages)
            out.append((lora_ids, merged_ids, base_ids, lora_lps, merged_lps))
    assert any(base != lora for lora, _, base, _, _ in out), (
        "the adapter must change the answers, or this proves nothing"
    )
    return out


async def test_merged_weights_equal_base_plus_adapter_in_float32(tiny_model_path, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ref, merged_dir = await _merged_folder(tmp_path, tiny_model_path)
    store = ref.store()
    adapter = store.storage.get_dir(store.checkpoint(1), str(tmp_path / "adapter"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    with_adapter = PeftModel.from_pretrained(base, adapter).eval()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    worst, moved = 0.0, 0.0
    with torch.no_grad():
        for messages in PROMPTS:
            ids = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            a = torch.log_softmax(with_adapter(**ids).logits.float(), -1)
            b = torch.log_softmax(merged(**ids).logits.float(), -1)
            with with_adapter.disable_adapter():
                plain = torch.log_softmax(with_adapter(**ids).logits.float(), -1)
            worst = max(worst, (a - b).abs().max().item())
            moved = max(moved, (a - plain).abs().max().item())
    print(f"float32 in process: |merged - base+adapter| max {worst:.2e} nats; the adapter moves {moved:.2f}")
    assert moved > 1.0, "the adapter must change the answers, or this proves nothing"
    assert worst < IN_PROCESS_TOLERANCE


@pytest.mark.slow  # a minute or more on 2 cores (make test hands slow files out first)
async def test_vllm_serves_the_merged_export_like_base_plus_adapter(
    vllm_server, vllm_endpoint, tiny_model_path, tmp_path
):
    dtype = vllm_server.config.resolved_dtype(vllm_server.device) or "auto"
    ref, merged_dir = await _merged_folder(tmp_path, tiny_model_path)
    merged = _server(tmp_path, merged_dir, "merged", vllm_server.config.dtype, lora=False)
    merged.start()
    try:
        session = Endpoint(
            base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key, base_name=vllm_endpoint.model
        )
        results = await _compare(session, ref, merged, vllm_endpoint.model)
    finally:
        merged.stop()
    diffs = []
    exact = dtype == "float32"
    for lora_ids, merged_ids, _, lora_lps, merged_lps in results:
        if exact:
            assert merged_ids == lora_ids, f"merged {merged_ids} != base+adapter {lora_ids}"
        # Up to and including the first token where they part: after it the two continue different texts.
        same = next((i for i, (a, b) in enumerate(zip(lora_ids, merged_ids)) if a != b), len(lora_ids) - 1)
        diffs += [abs(a - b) for a, b in zip(lora_lps[: same + 1], merged_lps[: same + 1])]
    print(f"vLLM {dtype}: logprob |merged - base+adapter| up to the first differing token: max {max(diffs):.4f}")
    assert max(diffs) < (FLOAT32_TOLERANCE if exact else BF16_TOLERANCE)
