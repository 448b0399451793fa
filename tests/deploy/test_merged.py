"""deploy_to="merged": the merged safetensors folder answers like base + adapter, through real vLLM.

The session's vLLM server serves the tiny model with the step's adapter loaded by deploy_to="vllm" (LoRA
applied at run time);
a second server, started here, serves the merged folder as a plain model. Greedy tokens must be the same
and their logprobs close: both servers run the same dtype (float32 on a CPU without bf16, where the
measured difference is 0.0000 nats; in bf16, on a CPU with AVX512-BF16, LoRA's separate low-rank product and
the merged weight round differently: 0.19 nats measured on the tiny model, whose final norm is scaled 4x so
its logits are large, hence a wider tolerance there).
"""

from __future__ import annotations

import json
import os

import pytest

from art_core.deploy import deploy_model
from art_core.serving import Endpoint
from art_core.storage import Storage
from art_core.store import ModelRef
from tests.deploy.conftest import write_checkpoint

pytestmark = pytest.mark.vllm

PROMPTS = [
    [{"role": "user", "content": "Where is my order 1234?"}],
    [{"role": "system", "content": "You answer with one color."}, {"role": "user", "content": "Sky?"}],
]
# nats, per sampled token, by the dtype both servers run in (ServerOptions.dtype unset: float32 without bf16
# instructions, else vLLM's bfloat16, whose 8-bit mantissa rounds a logit of ~40 by up to ~0.16).
LOGPROB_TOLERANCE = {"float32": 0.1, None: 0.5}


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


async def test_merged_export_answers_like_base_plus_adapter(vllm_endpoint, tiny_model_path, tmp_path):
    from art_core.inference.server import ServerConfig, ServerOptions, VLLMServer, detect_device

    storage = Storage(str(tmp_path / "art"))
    write_checkpoint(storage, "proj", "merge-agent", 1, tiny_model_path, seed=3)
    ref = ModelRef(storage_url=storage.root, project="proj", model="merge-agent", base_model=tiny_model_path)
    d = await deploy_model("merged", ref, step=1)
    assert (d.status, d.model_name, d.endpoint) == ("saved", "merge-agent", None)
    files = set(os.listdir(d.uri))
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "COMPLETE"} <= files
    assert not any(f.startswith("adapter_") for f in files), "a merged folder is a plain model, not an adapter"
    assert "quantization_config" not in json.loads(open(os.path.join(d.uri, "config.json")).read())

    served = await deploy_model("vllm", ref, 1, inference_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key)
    assert (served.status, served.model_name, served.endpoint) == ("serving", "merge-agent@1", vllm_endpoint.base_url)
    session = Endpoint(base_url=vllm_endpoint.base_url, api_key=vllm_endpoint.api_key, base_name=vllm_endpoint.model)
    merged = VLLMServer(
        ServerConfig(
            model=d.uri, served_model_name="merged", enable_lora=False, log_path=str(tmp_path / "merged-server.log")
        )
    )
    merged.start()
    try:
        ours = Endpoint.of(merged)
        async with session.client() as with_lora, ours.client() as plain:
            diffs, changed = [], False
            for messages in PROMPTS:
                lora_ids, lora_lps = await _greedy(with_lora, served.model_name, messages)
                merged_ids, merged_lps = await _greedy(plain, "merged", messages)
                base_ids, _ = await _greedy(with_lora, vllm_endpoint.model, messages)
                assert merged_ids == lora_ids, f"merged {merged_ids} != base+adapter {lora_ids}"
                diffs += [abs(a - b) for a, b in zip(lora_lps, merged_lps)]
                changed |= base_ids != lora_ids
    finally:
        merged.stop()
    assert changed, "the adapter must change the base model's answers, or this test proves nothing"
    print(f"logprob |merged - base+adapter|: max {max(diffs):.4f}, mean {sum(diffs) / len(diffs):.4f} nats")
    assert max(diffs) < LOGPROB_TOLERANCE[ServerOptions().resolved_dtype(detect_device())]
