"""Weight swap: a step's adapter merged into the running server's weights answers as the adapter does.

Two real vLLM servers in float32 (on every CPU kind): one serving the step as a LoRA adapter, one with
`weight_swap=True` (no LoRA; the same POST /v1/load_lora_adapter merges the adapter in place). Greedy
tokens must be the same and logprobs equal within 0.01 nats; the trainer's own recomputation of those
tokens' logprobs (transformers + peft, float32) must agree with what the swapped server sampled; step 0
(the zero adapter) brings back the base model's answers; a step loaded earlier is swapped back in when asked
for, and requests for different steps at once each get their own step's answers.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from art_core.adapters import zero_adapter
from art_core.inference import http_client
from art_core.inference.lora import load_adapter, unload_adapter
from art_core.inference.server import ServerConfig, VLLMServer
from art_core.storage import Storage
from tests.deploy.conftest import write_checkpoint

pytestmark = pytest.mark.vllm

PROMPTS = [
    [{"role": "user", "content": "Where is my order 1234?"}],
    [{"role": "system", "content": "You answer with one color."}, {"role": "user", "content": "Sky?"}],
]
TOLERANCE = 0.01  # nats per token, float32


def _greedy(server: VLLMServer, model: str, messages) -> tuple[list[int], list[int], list[float]]:
    r = http_client.post(
        f"{server.base_url}/chat/completions",
        headers=server.headers(),
        json={
            "model": model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": 10,
            "ignore_eos": True,
            "logprobs": True,
            "return_token_ids": True,
        },
        timeout=120,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    content = body["choices"][0]["logprobs"]["content"]
    ids = [int(t["token"].removeprefix("token_id:")) for t in content]
    return body["prompt_token_ids"], ids, [t["logprob"] for t in content]


def _recomputed(base: str, adapter: str, prompt: list[int], completion: list[int]) -> list[float]:
    """The trainer's view: log p(completion token | everything before it) under base + adapter, float32."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter)
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(1, torch.tensor(completion)[:, None])[:, 0].tolist()


def _server(tmp_path, model: str, name: str, swap: bool) -> VLLMServer:
    config = ServerConfig(
        model=model, served_model_name=name, dtype="float32", weight_swap=swap, log_path=str(tmp_path / f"{name}.log")
    )
    return VLLMServer(config)


@pytest.mark.slow  # a minute or more on 2 cores (make test hands slow files out first)
def test_a_swapped_step_answers_as_its_adapter_and_older_steps_swap_back_on_demand(tiny_model_path, tmp_path):
    storage = Storage(str(tmp_path / "art"))
    adapter = write_checkpoint(storage, "proj", "swap-agent", 1, tiny_model_path, seed=3)
    zero = zero_adapter(tiny_model_path, str(tmp_path / "cache"))
    with (
        _server(tmp_path, tiny_model_path, "lora", swap=False) as lora,
        _server(tmp_path, tiny_model_path, "swap", swap=True) as swap,
    ):
        assert "--enable-lora" not in swap.command() and "--enable-lora" in lora.command()
        load_adapter(lora.root_url, lora.headers(), "swap-agent@1", adapter)
        started = time.perf_counter()
        load_adapter(swap.root_url, swap.headers(), "swap-agent@1", adapter)
        print(f"swap in: {time.perf_counter() - started:.2f} s (tiny model, float32)")
        assert "swap-agent@1" in swap.served_models()

        for messages in PROMPTS:
            prompt, lora_ids, lora_lps = _greedy(lora, "swap-agent@1", messages)
            swap_prompt, swap_ids, swap_lps = _greedy(swap, "swap-agent@1", messages)
            assert swap_prompt == prompt and swap_ids == lora_ids
            assert max(abs(a - b) for a, b in zip(lora_lps, swap_lps)) < TOLERANCE
            recomputed = _recomputed(tiny_model_path, adapter, prompt, swap_ids)
            assert max(abs(a - b) for a, b in zip(recomputed, swap_lps)) < TOLERANCE, (recomputed, swap_lps)

        base_answers = [_greedy(lora, "lora", m) for m in PROMPTS]
        assert [a[1] for a in base_answers] != [_greedy(lora, "swap-agent@1", m)[1] for m in PROMPTS], (
            "the adapter must change the answers, or this proves nothing"
        )
        # Step 0 is the zero adapter: the base model's own weights again (the LoRA server computes them
        # through its LoRA layers, so the logprobs agree to float32 rounding, not bit for bit).
        load_adapter(swap.root_url, swap.headers(), "swap-agent@0", zero)
        for messages, (prompt, ids, lps) in zip(PROMPTS, base_answers):
            swap_prompt, swap_ids, swap_lps = _greedy(swap, "swap-agent@0", messages)
            assert (swap_prompt, swap_ids) == (prompt, ids)
            assert max(abs(a - b) for a, b in zip(lps, swap_lps)) < TOLERANCE

        # An earlier step asked for again is swapped back on demand; so is the base model's own name. Requests
        # for different steps at once each run on their own step's weights (a swap waits for the others).
        want = {name: _greedy(lora, name, PROMPTS[0])[1] for name in ("swap-agent@1", "lora")}
        asked = ["swap-agent@1", "swap-agent@0", "swap", "swap-agent@1"] * 2
        with ThreadPoolExecutor(len(asked)) as pool:
            answers = list(pool.map(lambda name: _greedy(swap, name, PROMPTS[0])[1], asked))
        for name, ids in zip(asked, answers):
            assert ids == want["lora" if name in ("swap-agent@0", "swap") else name], name
        assert "swap-agent@0" in swap.served_models()
        assert unload_adapter(swap.root_url, swap.headers(), "swap-agent@1")
        assert "swap-agent@1" not in swap.served_models()
