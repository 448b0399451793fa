"""GPU only: vLLM's sleep mode frees the GPU for the trainer and wakes up answering as before.

Skipped where no CUDA GPU is visible (tests/conftest.py). On CPU sleep()/wake_up() are no-ops, checked
in test_server_process.py.
"""

from __future__ import annotations

import subprocess

import httpx
import pytest

from art_core.inference.server import ServerConfig, VLLMServer

pytestmark = [pytest.mark.gpu, pytest.mark.vllm]


def gpu_memory_used_mib() -> int:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.split()[0])


def greedy(server: VLLMServer) -> list[int]:
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        headers=server.headers(),
        timeout=120,
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "Where is my order?"}],
            "max_tokens": 12,
            "temperature": 0,
            "ignore_eos": True,
            "logprobs": True,
            "return_tokens_as_token_ids": True,
        },
    )
    r.raise_for_status()
    return [int(t["token"].removeprefix("token_id:")) for t in r.json()["choices"][0]["logprobs"]["content"]]


def test_sleep_frees_gpu_memory_and_wake_up_answers_the_same(tiny_model_path, tmp_path):
    config = ServerConfig(
        model=tiny_model_path,
        served_model_name="tiny",
        gpu_memory_utilization=0.3,
        log_path=str(tmp_path / "server.log"),
    )
    with VLLMServer(config) as server:
        assert server.device == "cuda" and server.sleep_mode and "--enable-sleep-mode" in server.command()
        before = greedy(server)
        awake_mib = gpu_memory_used_mib()

        assert server.sleep(level=1) is True and server.is_sleeping()
        asleep_mib = gpu_memory_used_mib()
        # The KV cache (30% of the GPU here) and the weights leave the GPU while it sleeps.
        assert asleep_mib < awake_mib - 1024, (awake_mib, asleep_mib)

        assert server.wake_up() is True and not server.is_sleeping()
        assert greedy(server) == before
