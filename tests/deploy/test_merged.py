"""deploy_to="merged": the merged safetensors folder answers like base + adapter, through real vLLM.

Base + adapter (LoRA applied at run time, loaded by deploy_to="vllm") and the merged folder (a plain
model) are served side by side and asked the same prompts greedily:

- in float32 (both servers started here with dtype float32, on every CPU kind) the greedy tokens must be
  the same and the logprobs equal within 0.01 nats (measured 0.0000);
- in bfloat16 (the session server and a merged server in vLLM's bf16, where the CPU computes bf16:
  AVX512-BF16 or AMX) LoRA's separate low-rank product and the merged weight round differently. The
  tiny model's final norm is scaled 4x, so its logits are large and near-ties flip: greedy tokens may
  part (seen on an AMX Xeon: 628 != 2140 at the third token), and once they part the continuations are
  different texts. So the bf16 check compares the logprobs of the tokens up to where the two first
  differ, within 0.5 nats (a logit of ~40 rounds by up to ~0.16 in bf16's 8-bit mantissa).
"""

from __future__ import annotations

import json
import os

import pytest

from art_core.deploy import deploy_model
from art_core.inference.server import ServerConfig, VLLMServer, cpu_has_bf16
from art_core.serving import Endpoint
from art_core.storage import Storage
from art_core.store import ModelRef
from tests.deploy.conftest import write_checkpoint

pytestmark = pytest.mark.vllm

PROMPTS = [
    [{"role": "user", "content": "Where is my order 1234?"}],
    [{"role": "system", "content": "You answer with one color."}, {"role": "user", "content": "Sky?"}],
]
FLOAT32_TOLERANCE = 0.01  # nats per sampled token
BF16_TOLERANCE = 0.5


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


async def test_merged_export_answers_like_base_plus_adapter_in_float32(tiny_model_path, tmp_path):
    ref, merged_dir = await _merged_folder(tmp_path, tiny_model_path)
    with_lora = _server(tmp_path, tiny_model_path, "base", "float32", lora=True)
    merged = _server(tmp_path, merged_dir, "merged", "float32", lora=False)
    with_lora.start()
    try:
        merged.start()
        try:
            lora_endpoint = Endpoint(base_url=with_lora.base_url, api_key=with_lora.api_key, base_name="base")
            results = await _compare(lora_endpoint, ref, merged, "base")
        finally:
            merged.stop()
    finally:
        with_lora.stop()
    diffs = []
    for lora_ids, merged_ids, _, lora_lps, merged_lps in results:
        assert merged_ids == lora_ids, f"merged {merged_ids} != base+adapter {lora_ids}"
        diffs += [abs(a - b) for a, b in zip(lora_lps, merged_lps)]
    print(f"float32 logprob |merged - base+adapter|: max {max(diffs):.4f} nats")
    assert max(diffs) < FLOAT32_TOLERANCE


@pytest.mark.skipif(not cpu_has_bf16(), reason="bf16 check: this CPU has neither AVX512-BF16 nor AMX")
async def test_merged_export_is_close_to_base_plus_adapter_in_bf16(
    vllm_server, vllm_endpoint, tiny_model_path, tmp_path
):
    if vllm_server.config.resolved_dtype(vllm_server.device) not in (None, "bfloat16", "auto"):
        pytest.skip("the session server does not run bf16 here")
    ref, merged_dir = await _merged_folder(tmp_path, tiny_model_path)
    merged = _server(tmp_path, merged_dir, "merged", None, lora=False)
    merged.start()
    try:
        session = Endpoint(
            base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key, base_name=vllm_endpoint.model
        )
        results = await _compare(session, ref, merged, vllm_endpoint.model)
    finally:
        merged.stop()
    diffs = []
    for lora_ids, merged_ids, _, lora_lps, merged_lps in results:
        # Up to and including the first token where they part: after it the two continue different texts.
        same = next((i for i, (a, b) in enumerate(zip(lora_ids, merged_ids)) if a != b), len(lora_ids) - 1)
        diffs += [abs(a - b) for a, b in zip(lora_lps[: same + 1], merged_lps[: same + 1])]
    print(f"bf16 logprob |merged - base+adapter| up to the first differing token: max {max(diffs):.4f} nats")
    assert max(diffs) < BF16_TOLERANCE
