"""On a CUDA machine with vLLM: the train flow's own server really sleeps while the trainer holds the GPU.

Skipped where no GPU is visible (the CPU suite checks the calls and their order in test_one_engine.py).
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.vllm]


def test_train_flow_puts_its_server_to_sleep_during_training_and_wakes_it(
    prefect_api, tmp_path, tiny_model_path, monkeypatch
):
    import art_core.training.trainer as trainer
    from art_core.serving import PROCESS_POOL
    from art_pipeline.flows.train import train
    from tests.pipeline.test_train_flow import run_config

    seen: list[bool] = []
    real = trainer.train_grpo_step

    def spy(**kwargs):
        seen.extend(s.is_sleeping() for s in PROCESS_POOL.servers())
        return real(**kwargs)

    monkeypatch.setattr(trainer, "train_grpo_step", spy)
    cfg = run_config(tiny_model_path, str(tmp_path / "art"), None, project="gpu", steps=2, eval_every=0)
    try:
        summary = train(cfg)
        assert all(not s.is_sleeping() for s in PROCESS_POOL.servers()), "the server was not woken after training"
    finally:
        PROCESS_POOL.close()
    assert summary.trained_steps == [1, 2]
    assert seen == [True, True], "the server was awake while the trainer held the GPU"
