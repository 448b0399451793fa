"""The sft flow: epochs as cached, resumable tasks writing checkpoints the train flow continues from.
Real Prefect test server, real vLLM (for the GRPO steps), local storage."""

from __future__ import annotations

import json

import pytest

from tests.pipeline.test_train_flow import history, run_config, run_flow, task_states

pytestmark = pytest.mark.vllm


def test_sft_flow_resumes_and_grpo_continues_its_numbering(
    prefect_api, tiny_model_path, vllm_endpoint, tmp_path, monkeypatch
):
    from art_pipeline.flows.sft import SFTRunConfig, sft

    monkeypatch.setenv("ART_INFERENCE_API_KEY", vllm_endpoint.api_key or "")
    data = tmp_path / "moves.jsonl"
    data.write_text(
        "\n".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": f"Board {i}: your move?"},
                        {"role": "assistant", "content": "MOVE 5"},
                    ]
                }
            )
            for i in range(6)
        )
    )
    storage = str(tmp_path / "runs")
    cfg = SFTRunConfig(
        storage_url=storage,
        project="pipe",
        model="warm",
        base_model=tiny_model_path,
        data=str(data),
        sft={"epochs": 2, "batch_size": 2, "peak_lr": 1e-2, "schedule_type": "constant"},
    )
    first = sft(cfg)
    assert first.start_step == 0 and sorted(first.checkpoints) == [1, 2] and first.trained_steps == [1, 2]
    assert first.losses[2] < first.losses[1]

    state = sft(cfg, return_state=True)  # the same run again: nothing is trained, both epochs show Cached
    again = state.result()
    assert again.trained_steps == [] and again.start_step == 0
    assert set(task_states(state.state_details.flow_run_id).values()) == {"Cached"}

    grpo = run_config(tiny_model_path, storage, vllm_endpoint.base_url, name="warm", steps=3, eval_every=0)
    summary, _ = run_flow(grpo)
    assert summary.trained_steps == [3]  # checkpoints 1 and 2 are SFT's; GRPO trains step 3 from checkpoint 2
    # Nothing is rolled out for the steps SFT checkpointed: GRPO's first gather samples checkpoint 2.
    rollouts = tmp_path / "runs" / "pipe" / "models" / "warm" / "trajectories" / "train"
    assert sorted(p.name for p in rollouts.iterdir()) == ["0002.jsonl"]
    assert sorted(summary.checkpoints) == [1, 2, 3] and list(summary.rewards) == [3]
    records = history(storage, grpo)
    assert [r["step"] for r in records if "sft/loss" in r] == [1, 2]
    assert any(r["step"] == 3 and "train/loss" in r for r in records)
    assert not any(r["step"] in (1, 2) and "train/loss" in r for r in records)  # SFT's steps stay SFT's
