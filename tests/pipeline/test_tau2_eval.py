"""The evaluate flow on tau2-retail's test split with a prompted endpoint: a pass^k report per domain, next to
the leaderboard's figures and a statement of where the run departs from tau2's protocol.

The prompted endpoint (and the customer's model) is the tiny model on the session's vLLM server, with
forced tool calls: the numbers are a random model's, what is tested is the flow and the report.
"""

from __future__ import annotations

import pytest

from art_core.envs.tau2.published import REFERENCE, reference_markdown


def test_reference_section_lists_published_figures_and_protocol_departures():
    assert reference_markdown("retail", {}, {}, split="test", scenarios=40, trials=4) is None  # our own retail: none
    followed = reference_markdown(
        "tau2-airline",
        {"eval_tasks": "base"},
        {"temperature": 0.0, "max_tokens": 4096},
        split="test",
        scenarios=50,
        trials=4,
    )
    assert (
        "| GPT-4.1 | 56.0 | 38.1 | gpt-4.1 | v0.1.3 |" in followed and "This run follows tau2's protocol." in followed
    )
    assert "Source: tau2-bench leaderboard" in followed
    departs = reference_markdown(
        "tau2-retail",
        {"user": {"model": "openai/gpt-4o-mini"}},
        {"temperature": 1.0, "max_tokens": 64},
        split="test",
        scenarios=40,
        trials=1,
    )
    for expected in (
        "agent temperature 1.0",
        "max_tokens 64",
        "the test split, 40 tasks",
        "1 trials",
        "user model openai/gpt-4o-mini",
    ):
        assert expected in departs
    assert REFERENCE["retail"][0].pass_1 == 74.0 and REFERENCE["airline"][0].pass_1 == 56.0


@pytest.mark.vllm
def test_evaluate_flow_writes_a_tau2_pass_k_report_for_a_prompted_endpoint(
    prefect_api, tmp_path, tiny_model_path, vllm_endpoint, monkeypatch
):
    from art_core.storage import Storage
    from art_core.training.config import TrainConfig
    from art_pipeline.flows.config import EnvironmentConfig, EvalConfig, EvaluateConfig, RunConfig, SamplingConfig
    from art_pipeline.flows.evaluate import evaluate_flow

    ep = vllm_endpoint
    monkeypatch.setenv("ART_BASELINE_API_KEY", ep.api_key or "none")
    monkeypatch.setenv("OPENAI_API_KEY", ep.api_key or "none")  # the customer's model reads it through litellm
    options = {
        "user": {"model": f"openai/{ep.model}", "api_base": ep.base_url, "max_tokens": 24, "temperature": 1.0},
        "force_tool_calls": True,
        "forced_message_chars": 40,
        "max_steps": 8,
    }
    run = RunConfig(
        project="tau2",
        model="agent",
        base_model=tiny_model_path,
        environment=EnvironmentConfig(name="tau2-retail", options=options),
        train=TrainConfig(old_logprobs="recompute"),  # forced calls constrain sampling
        eval=EvalConfig(split="test", scenarios=3, trials=2),
        sampling=SamplingConfig(temperature=1.0, max_tokens=256),
        storage_url=str(tmp_path / "store"),
        inference_url=ep.base_url,
        report_to_wandb=False,
    )
    reports = evaluate_flow(EvaluateConfig(run=run, baseline_model=ep.model, prompted_only=True))

    assert len(reports) == 1 and reports[0].model == ep.model and reports[0].split == "test"
    r = reports[0]
    assert r.scenarios == 3 and r.trials == 2 and set(r.pass_k) == {1, 2} and 0.0 <= r.pass_k[2] <= r.pass_k[1] <= 1.0
    assert list(r.per_scenario) == ["5", "9", "12"] and all(
        len(v) == 2 for v in r.per_scenario.values()
    )  # tau2's test ids
    storage = Storage(run.storage_url)
    md = storage.read_text(f"{run.storage_url}/tau2/models/agent/reports/eval-tau2-retail-test.md")
    assert md.startswith("# agent on tau2-retail test") and f"| {ep.model} |" in md and "pass^2" in md
    assert "Published tau2-bench retail figures" in md and "| GPT-4.1 | 74.0 |" in md
    assert "departs from tau2's protocol" in md and "forced tool calls" in md
    # the run's rollouts sample at 1.0, the evaluation at tau2's 0 (EvalConfig.temperature None): no departure
    assert "agent temperature" not in md
    assert storage.exists(f"{run.storage_url}/tau2/baselines/{ep.model}/eval-test.json")
    # no trained step was evaluated and no checkpoint was needed
    assert not storage.exists(f"{run.storage_url}/tau2/models/agent/eval/0000.json")


@pytest.mark.vllm
def test_train_flow_trains_on_tau2_retails_train_split_with_ruler_and_the_environments_reward(
    prefect_api, tmp_path, tiny_model_path, vllm_endpoint, monkeypatch
):
    """One step on tau2's train tasks: the customer and the RULER judge are the tiny model on the session server,
    RULER's score is mixed with tau2's reward (0 here: a random agent is cut off), and the step is trained."""
    from art_core.store import ModelStore
    from art_pipeline.flows.config import RunConfig
    from art_pipeline.flows.train import train

    ep = vllm_endpoint
    for key in ("ART_INFERENCE_API_KEY", "ART_JUDGE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(key, ep.api_key or "none")
    options = {
        "user": {"model": f"openai/{ep.model}", "api_base": ep.base_url, "max_tokens": 16, "temperature": 1.0},
        "force_tool_calls": True,
        "forced_message_chars": 30,
        "max_steps": 6,
    }
    judge = {
        "model": f"openai/{ep.model}",
        "api_base": ep.base_url,
        "max_retries": 4,
        "explanation_max_chars": 40,
        "combine": "weighted",
        "ruler_weight": 0.5,
        "litellm_params": {"temperature": 1.0, "max_tokens": 2000},
    }
    cfg = RunConfig(
        project="tau2",
        model="trained",
        base_model=tiny_model_path,
        storage_url=str(tmp_path / "art"),
        inference_url=ep.base_url,
        environment={"name": "tau2-retail", "options": options},
        steps=1,
        groups_per_step=1,
        group_size=2,
        train={"learning_rate": 2e-3, "old_logprobs": "recompute"},
        sampling={"temperature": 1.0, "max_tokens": 256},
        judge=judge,
        eval_every=0,
        report_to_wandb=False,
    )
    summary = train(cfg)
    store = ModelStore(cfg.storage_url, "tau2", "trained")
    scored = store.read_groups(store.scored("train", 0))
    trajectories = [t for g in scored for t in g.trajectories]
    train_ids = set(load_train_ids())
    assert len(trajectories) == 2 and all(
        t.metadata["task_id"] in train_ids and t.metadata["split"] == "train" for t in trajectories
    )
    for t in trajectories:  # tau2's reward kept next to RULER's score, every component in the metrics
        assert t.metrics["independent_reward"] == 0.0 and t.metrics["truncated"] == 1.0 and "r_db" in t.metrics
        assert t.reward == pytest.approx(0.5 * t.metrics["ruler_score"])
    assert 1 in summary.rewards and store.is_complete(1)


def load_train_ids() -> list[str]:
    from art_core.envs import load_environment

    return [s.id for s in load_environment("tau2-retail").scenarios("train")]
